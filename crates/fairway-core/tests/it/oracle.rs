//! An outside observer of a [`Scheduler`]: it sees only the events it is fed, the decisions
//! cycles return and the public queries, and checks properties that must hold whatever the
//! core does inside. Used by the scenario runner and the property tests.
//!
//! Properties checked after every cycle (besides `check_invariants`):
//! - no GPU is in two live `Start` placements (live: started and not yet released);
//! - per node, live placements use at most the node's GPUs, CPU and memory;
//! - per capped account, its live placements (running jobs, and jobs asked to stop until
//!   they are gone: a ResourceQuota counts a pod in its grace period) stay within its cap
//!   (its hard quota, and for a project in a cohort its nominal quota plus borrowing
//!   limit), or within what it held and had reserved when the cap was lowered, as that
//!   drains;
//! - per cohort, what its members use beyond their guarantees (nominal less lending limit)
//!   stays within what they lend, `Σ max(0, u − g) ≤ Σ lent` (the rule as the docs state
//!   it, not the core's `C + U` form), `u` counting a member's live placements, except those
//!   being preempted for a job of its own cohort that moved to its hold (chosen within the
//!   cohort, or their project joined while the hold was held), which count as that job's hold
//!   at its full size; or within what it was above that when membership or a nominal quota
//!   changed, as that drains;
//! - a started gang has `replicas` replicas of `per_replica.gpus` GPUs each, on nodes of the
//!   job's model; a fresh start uses schedulable nodes, a preemptor starts on its reservation;
//! - a `Preempt` victim was running (or started earlier in the cycle), is preemptible and of
//!   strictly lower priority than its preemptor (or of the same priority, reclaimed: of
//!   another project of the preemptor's cohort that uses more than its nominal quota), whose policy and the config allow preemption, and whose class's preemption
//!   delay (rule 1) has passed since it last entered the queue;
//! - every pending job has a reason, and a job waiting for preemption names victims that are
//!   still being preempted for it;
//! - work conservation: after every cycle (those that preempt too), no pending job that is within its
//!   quotas and not blocked behind another fits in the free room (a group left dormant when
//!   its wait was over would show up here), and a job said to never fit indeed fits no node;
//! - a job blocked behind another (strict order) names a pending job that does block;
//! - no start ranked below a reservation delays it: after every cycle in which no job
//!   ranked above a reservation started (with fair sharing, none of its priority or above:
//!   shares rank a tier) and none began preempting (a preemptor follows
//!   the preemption order, not the plan), the reservation's job still
//!   fits at its time on the nodes of its model, counting as free there what live jobs
//!   expected to end by then (by the documented rule, computed here: a run-time limit plus
//!   grace, else the default estimate extended by whole estimates as a run overruns it; a
//!   preemption's deadline) will have freed, less what preemptors hold and earlier
//!   reservations reserve;
//! - preemption liveness: a pending job that could obviously preempt (taking every eligible
//!   lower-priority victim, within the victim bound, would make it fit, keep all its
//!   accounts within their caps and its cohort within what the cohort lends) has not been
//!   left without trying; a job short of its cohort is checked too. After a cycle that
//!   decided nothing, the eligible victims include, for a job whose project stays within its
//!   nominal quota with it, the runs of its own priority of the other members of its cohort
//!   that use more than their nominal quota (a reclaim, rule 1): a start or preemption in a
//!   cycle can make a member borrow, and what that lets a job reclaim is looked at from the
//!   next cycle (scenario 142);
//! - starts are taken back, not stopped (preemption rule 8): a preemptor that stops a run
//!   started in its own cycle also reclaims an older run of that start's project, a
//!   project not sure to borrow without the start (counted low: its runs from before the
//!   cycle that still run, and the older victims), or an earlier preemptor of the cycle
//!   reclaimed from that project;
//! - a reclaim's victim is of a project that borrows, counting what the decisions before it
//!   started: a start taken back later in the cycle is one the core never made.

use std::collections::{BTreeMap, BTreeSet};

use fairway_core::*;

#[derive(Default)]
pub struct Oracle {
    nodes: BTreeMap<NodeId, NodeSpec>,
    drained: BTreeSet<NodeId>,
    specs: BTreeMap<JobId, JobSpec>,
    /// Placements of started jobs whose GPUs the core has not released yet.
    live: BTreeMap<JobId, Placement>,
    /// Reservations seen just before the current cycle.
    reserved_before: BTreeMap<JobId, Placement>,
    /// Jobs running (not terminating) just before the current cycle.
    running_before: BTreeSet<JobId>,
    /// The best rank of a pending job holding nothing just before the current cycle: a
    /// preemptor must rank above it to leave its hold for room elsewhere.
    best_queued_rank_before: Option<std::cmp::Reverse<Priority>>,
    /// The time of the cycle being checked.
    now: Time,
    /// When each running job started, as of the cycle's start.
    started_before: BTreeMap<JobId, Time>,
    /// When each job was chosen as a victim.
    preempted_at: BTreeMap<JobId, Vec<Time>>,
    /// When each job last entered the queue (submit, or requeue), for rule 1's delay.
    queued_at: BTreeMap<JobId, Time>,
    quotas: BTreeMap<AccountId, Quota>,
    /// Each job's place in the queue: when it was first submitted.
    submitted: BTreeMap<JobId, Time>,
    /// Jobs started, and preemptors that began holding, in the cycle being checked.
    started_now: BTreeSet<JobId>,
    preempting_now: BTreeSet<JobId>,
    /// Every job the cycle being checked started, those that held a reservation included
    /// (which `started_now` leaves out).
    started_in_cycle: BTreeSet<JobId>,
    /// Each preemptor's victims as of its latest hold, made by a cycle or restored (a hold
    /// made again has the victims of the cycle that made it).
    hold_victims: BTreeMap<JobId, BTreeSet<JobId>>,
    /// Victims that were in their preemptor's project's cohort when chosen (or their hold
    /// restored), or whose project joined it while the hold was held, with the preemptor:
    /// they count as its hold in the cohort until the preemptor's project leaves it. One
    /// whose project joins the cohort after the hold was given up counts as its own
    /// project's: it runs until it is gone, and nothing moved it (`docs/cohorts.md`).
    moved_to_hold: BTreeMap<JobId, JobId>,
    /// Projects' places in cohorts.
    nominals: BTreeMap<AccountId, NominalQuota>,
    /// Per cohort, what its members used beyond what they lend when membership or a nominal
    /// quota last changed (or a job was restored), shrinking as that drains.
    cohort_grandfathered: BTreeMap<AccountId, Resources>,
    /// The same for what the members hold now (`live_usage`: running, and leaving after a
    /// preemption, moved to a hold or not), which no start may take beyond what they lend
    /// either; grandfathered and drained with their holds counted (`committed`), which may
    /// still become their runs.
    cohort_grandfathered_now: BTreeMap<AccountId, Resources>,
    /// Per capped account, what it may hold above its cap: what it held and had reserved
    /// when the cap was set (or a job restored), shrinking as that drains.
    grandfathered: BTreeMap<AccountId, Resources>,
}

impl Oracle {
    pub fn new() -> Oracle {
        Oracle::default()
    }

    /// When each job was chosen as a victim: what a driver passes on across a restart.
    pub fn preemption_history(&self) -> BTreeMap<JobId, Vec<Time>> {
        self.preempted_at.clone()
    }

    /// A fresh oracle that remembers the victims chosen before a restart.
    pub fn with_preemption_history(preempted_at: BTreeMap<JobId, Vec<Time>>) -> Oracle {
        Oracle { preempted_at, ..Oracle::default() }
    }

    /// Record an event the scheduler accepted at `now`.
    pub fn applied(&mut self, s: &Scheduler, event: &Event, now: Time) -> Result<(), String> {
        match event {
            Event::Submit(spec) => {
                self.submitted.insert(spec.id, now);
                self.specs.insert(spec.id, spec.clone());
                self.queued_at.insert(spec.id, now);
            }
            Event::Restore(job) => {
                self.submitted.insert(job.spec.id, job.submitted_at);
                self.specs.insert(job.spec.id, job.spec.clone());
                // A job preempted before re-entered the queue when last chosen as a victim.
                let last_preempted = job.preempted_at.iter().copied().max();
                self.queued_at
                    .insert(job.spec.id, last_preempted.map_or(job.submitted_at, |t| t.max(job.submitted_at)));
                if let Some(run) = &job.running {
                    self.live.insert(job.spec.id, run.placement.clone());
                    // A restored job keeps what it holds, above a cap too.
                    for a in job.spec.accounts() {
                        let committed = self.committed(s, a);
                        let g = self.grandfathered.entry(a).or_default();
                        *g = max(*g, committed);
                    }
                    self.grandfather_cohorts(s);
                }
            }
            Event::RestoreHold(hold) => {
                self.hold_victims.insert(hold.preemptor, hold.victims.iter().copied().collect());
                for &victim in &hold.victims {
                    self.note_victim(victim, hold.preemptor);
                }
                // A restored hold keeps what it reserves, above a cap too, as a restored run does.
                if let Some(spec) = self.specs.get(&hold.preemptor).cloned() {
                    for a in spec.accounts() {
                        let committed = self.committed(s, a);
                        let g = self.grandfathered.entry(a).or_default();
                        *g = max(*g, committed);
                    }
                    self.grandfather_cohorts(s);
                }
            }
            Event::SetNominalQuota { project, nominal } => {
                match nominal {
                    Some(n) => self.nominals.insert(*project, *n),
                    None => self.nominals.remove(project),
                };
                // Victims of a preemptor whose project left their cohort count again; those
                // of a hold still held whose project is now in its cohort move to it.
                let moved = std::mem::take(&mut self.moved_to_hold);
                self.moved_to_hold = moved.into_iter().filter(|&(v, p)| self.same_cohort(v, p)).collect();
                let holding = |p: JobId| matches!(s.job_status(p), Some(JobStatus::Pending { reserved: Some(_), .. }));
                let joined: Vec<(JobId, JobId)> = self
                    .hold_victims
                    .iter()
                    .filter(|(p, _)| holding(**p))
                    .flat_map(|(p, vs)| vs.iter().map(move |v| (*v, *p)))
                    .filter(|&(v, p)| self.same_cohort(v, p))
                    .collect();
                self.moved_to_hold.extend(joined);
                let committed = self.committed(s, *project);
                self.grandfathered.insert(*project, committed);
                self.cohort_grandfathered.clear();
                self.cohort_grandfathered_now.clear();
                self.grandfather_cohorts(s);
            }
            Event::SetQuota { account, quota } => {
                match quota {
                    Some(q) => self.quotas.insert(*account, *q),
                    None => self.quotas.remove(account),
                };
                let committed = self.committed(s, *account);
                self.grandfathered.insert(*account, committed);
            }
            Event::NodeAdded(spec) => {
                self.nodes.insert(spec.id, spec.clone());
                self.drained.remove(&spec.id);
            }
            Event::NodeRemoved(id) => {
                self.nodes.remove(id);
                self.drained.remove(id);
            }
            Event::NodeDrained(id) => {
                self.drained.insert(*id);
            }
            Event::NodeUncordoned(id) => {
                self.drained.remove(id);
            }
            Event::Cancel(_)
            | Event::Exited { .. }
            | Event::CheckpointReported { .. }
            | Event::SetFairShareWeight { .. }
            | Event::RestoreRecentUsage { .. }
            | Event::NodeImages { .. } => {}
        }
        // Started jobs back in the queue (an exit requeued, a node removed) entered it now.
        for &id in self.live.keys() {
            if matches!(s.job_status(id), Some(JobStatus::Pending { .. })) {
                self.queued_at.insert(id, now);
            }
        }
        self.refresh_live(s)?;
        self.drain_grandfathered(s);
        Ok(())
    }

    /// What `account` holds (live placements) plus the full size of its jobs holding GPUs
    /// for their victims: an upper bound of what the core charges it.
    fn committed(&self, s: &Scheduler, account: AccountId) -> Resources {
        let held = self.live_usage(account);
        self.specs
            .values()
            .filter(|spec| spec.accounts().any(|a| a == account))
            .filter(|spec| matches!(s.job_status(spec.id), Some(JobStatus::Pending { reserved: Some(_), .. })))
            .fold(held, |sum, spec| sum.plus(spec.total()))
    }

    fn live_usage(&self, account: AccountId) -> Resources {
        self.live
            .keys()
            .map(|id| &self.specs[id])
            .filter(|spec| spec.accounts().any(|a| a == account))
            .fold(Resources::ZERO, |sum, spec| sum.plus(spec.total()))
    }

    /// Usage above a cap may drain, never grow back.
    fn drain_grandfathered(&mut self, s: &Scheduler) {
        let accounts: Vec<AccountId> = self.grandfathered.keys().copied().collect();
        for a in accounts {
            let committed = self.committed(s, a);
            let g = self.grandfathered.get_mut(&a).expect("listed");
            *g = g.min_by_amount(committed);
        }
        let cohorts: Vec<AccountId> = self.cohort_grandfathered.keys().copied().collect();
        for c in cohorts {
            let excess = self.cohort_excess(c, |a| self.cohort_usage(s, a));
            let g = self.cohort_grandfathered.get_mut(&c).expect("listed");
            *g = g.min_by_amount(excess);
        }
        let cohorts: Vec<AccountId> = self.cohort_grandfathered_now.keys().copied().collect();
        for c in cohorts {
            let excess = self.cohort_excess(c, |a| self.committed(s, a));
            let g = self.cohort_grandfathered_now.get_mut(&c).expect("listed");
            *g = g.min_by_amount(excess);
        }
    }

    /// Each cohort may stay as far beyond what its members lend as its members' committed
    /// work takes it now.
    fn grandfather_cohorts(&mut self, s: &Scheduler) {
        let cohorts: BTreeSet<AccountId> = self.nominals.values().map(|n| n.cohort).collect();
        for c in cohorts {
            let excess = self.cohort_excess(c, |a| self.cohort_usage(s, a));
            let g = self.cohort_grandfathered.entry(c).or_default();
            *g = max(*g, excess);
            // Holds included: a hold made before may still become its run.
            let excess = self.cohort_excess(c, |a| self.committed(s, a));
            let g = self.cohort_grandfathered_now.entry(c).or_default();
            *g = max(*g, excess);
        }
    }

    /// How far a cohort's members, using `usage` each, go beyond what they lend:
    /// `max(0, Σ max(0, u − g) − Σ lent)` per dimension the cohort governs (0 elsewhere).
    fn cohort_excess(&self, cohort: AccountId, usage: impl Fn(AccountId) -> Resources) -> Resources {
        let members: Vec<(AccountId, NominalQuota)> =
            self.nominals.iter().filter(|(_, n)| n.cohort == cohort).map(|(p, n)| (*p, *n)).collect();
        let excess = |k: ResourceKind| {
            if members.iter().all(|(_, n)| n.nominal.limit(k).is_none()) {
                return 0;
            }
            let (mut beyond, mut lent) = (0u64, 0u64);
            for (project, n) in &members {
                let nominal = n.nominal.limit(k).unwrap_or(0);
                let lends = n.lending_limit.limit(k).map_or(nominal, |l| l.min(nominal));
                let guaranteed = nominal - lends;
                // In thousandths for GPUs (`ResourceKind::amount`): shares add up exactly.
                beyond += k.amount(usage(*project)).saturating_sub(k.amount_of_limit(guaranteed));
                lent += k.amount_of_limit(lends);
            }
            beyond.saturating_sub(lent)
        };
        Resources::from_amounts(excess)
    }

    /// An account's cap in `kind`: its hard quota and, for a project in a cohort, its
    /// nominal quota plus borrowing limit, whichever is lower.
    fn cap_of(&self, account: AccountId, kind: ResourceKind) -> Option<u64> {
        let hard = self.quotas.get(&account).and_then(|q| q.limit(kind));
        let borrowing = self
            .nominals
            .get(&account)
            .and_then(|n| n.borrowing_limit.limit(kind).map(|b| n.nominal.limit(kind).unwrap_or(0) + b));
        match (hard, borrowing) {
            (Some(h), Some(b)) => Some(h.min(b)),
            (h, b) => h.or(b),
        }
    }

    /// Would starting `spec` (with `freed` uncharged per account) take its project's cohort
    /// beyond what its members lend, by the core's figures of what each member is charged?
    fn cohort_short(&self, s: &Scheduler, spec: &JobSpec, freed: &BTreeMap<AccountId, Resources>) -> bool {
        let Some(n) = self.nominals.get(&spec.project) else { return false };
        // What each member holds as its cohort counts it, as the core may count it: the
        // largest of what is charged to it, what it holds once preemptions complete, and,
        // while victims moved to holds are on their way out, what it holds now and will
        // (`Ledger::over_cohort_now`: live placements, those victims included, and holds).
        // Victims it would preempt free the first two, not the last: they hold their GPUs
        // until they exit.
        let usage = |a: AccountId| {
            let held = max(s.account_usage(a).0, self.cohort_usage(s, a));
            let held = held.saturating_minus(freed.get(&a).copied().unwrap_or_default());
            let held = max(held, self.committed(s, a));
            if a == spec.project { held.plus(spec.total()) } else { held }
        };
        self.cohort_excess(n.cohort, usage) != Resources::ZERO
    }

    /// What a member holds as its cohort counts it: its live placements, except those being
    /// preempted for a job of its own cohort (they count as that job's), and its jobs holding
    /// GPUs for their victims at their full size.
    /// Are the victim's and the preemptor's projects in one cohort now?
    fn same_cohort(&self, victim: JobId, preemptor: JobId) -> bool {
        let cohort = |job: JobId| self.specs.get(&job).and_then(|j| self.nominals.get(&j.project)).map(|n| n.cohort);
        cohort(victim).is_some() && cohort(victim) == cohort(preemptor)
    }

    /// A victim chosen for `preemptor`: whether it moves to the hold (see `moved_to_hold`).
    fn note_victim(&mut self, victim: JobId, preemptor: JobId) {
        match self.same_cohort(victim, preemptor) {
            true => self.moved_to_hold.insert(victim, preemptor),
            false => self.moved_to_hold.remove(&victim),
        };
    }

    /// Does the victim count as its preemptor's hold in their cohort (not as its project's)?
    fn counts_as_hold(&self, victim: &JobSpec, preemptor: JobId) -> bool {
        self.moved_to_hold.get(&victim.id) == Some(&preemptor) && self.same_cohort(victim.id, preemptor)
    }

    fn cohort_usage(&self, s: &Scheduler, project: AccountId) -> Resources {
        self.specs
            .values()
            .filter(|spec| spec.project == project)
            .filter(|spec| match s.job_status(spec.id) {
                Some(JobStatus::Preempting { preemptor, .. }) => !self.counts_as_hold(spec, preemptor),
                Some(JobStatus::Pending { reserved, .. }) => reserved.is_some(),
                Some(_) => self.live.contains_key(&spec.id),
                None => false,
            })
            .fold(Resources::ZERO, |sum, spec| sum.plus(spec.total()))
    }

    fn check_cohorts(&self, s: &Scheduler) -> Result<(), String> {
        let cohorts: BTreeSet<AccountId> = self.nominals.values().map(|n| n.cohort).collect();
        for c in cohorts {
            let excess = self.cohort_excess(c, |a| self.cohort_usage(s, a));
            let g = self.cohort_grandfathered.get(&c).copied().unwrap_or_default();
            if !excess.within_by_amount(g) {
                return Err(format!(
                    "cohort {c}'s members use {excess} beyond what they lend (running or leaving), grandfathered {g}"
                ));
            }
            // What they hold now, victims on their way out included, moved to holds or not.
            let excess = self.cohort_excess(c, |a| self.live_usage(a));
            let g = self.cohort_grandfathered_now.get(&c).copied().unwrap_or_default();
            if !excess.within_by_amount(g) {
                return Err(format!(
                    "cohort {c}'s members hold {excess} beyond what they lend now (running and leaving), grandfathered {g}"
                ));
            }
        }
        Ok(())
    }

    /// Did the project use more than its nominal quota, in a dimension its cohort governs,
    /// counting what it holds for its preemptors (an upper bound of what the core charges)?
    fn borrowing(&self, s: &Scheduler, project: AccountId) -> bool {
        self.over_nominal(project, self.committed(s, project))
    }

    /// Is `usage` above `project`'s nominal quota in a dimension its cohort governs (one
    /// where some member has a nominal quota)? False outside every cohort.
    fn over_nominal(&self, project: AccountId, usage: Resources) -> bool {
        let Some(n) = self.nominals.get(&project) else { return false };
        ResourceKind::ALL.into_iter().any(|k| {
            let governed = self.nominals.values().any(|m| m.cohort == n.cohort && m.nominal.limit(k).is_some());
            governed && k.amount(usage) > k.amount_of_limit(n.nominal.limit(k).unwrap_or(0))
        })
    }

    /// Does `project` surely use more than its nominal quota (in a dimension its cohort
    /// governs) without its starts of this cycle, when a preemptor stopping `victims`
    /// chose them? Counted low, so that the check it serves never fails a core that
    /// counts more: its runs from before the cycle that still run, and the older of
    /// `victims` (running when they were chosen). Preemption rule 8 takes a start back
    /// beside an older reclaim of its project where the project borrows without it.
    fn surely_borrows_without_starts(
        &self,
        s: &Scheduler,
        project: AccountId,
        victims: &[JobId],
        started_now: &BTreeSet<JobId>,
    ) -> bool {
        let still_running = |id: &JobId| matches!(s.job_status(*id), Some(JobStatus::Running { .. }));
        let older_victim = |id: &JobId| victims.contains(id) && !started_now.contains(id);
        let usage = self
            .running_before
            .iter()
            .filter(|id| still_running(id) || older_victim(id))
            .map(|id| &self.specs[id])
            .filter(|spec| spec.project == project)
            .fold(Resources::ZERO, |sum, spec| sum.plus(spec.total()));
        self.over_nominal(project, usage)
    }

    fn check_quotas(&self) -> Result<(), String> {
        let accounts: BTreeSet<AccountId> = self.quotas.keys().chain(self.nominals.keys()).copied().collect();
        for account in accounts {
            let usage = self.live_usage(account);
            let g = self.grandfathered.get(&account).copied().unwrap_or_default();
            for kind in ResourceKind::ALL {
                let Some(limit) = self.cap_of(account, kind) else { continue };
                if kind.amount(usage) > kind.amount_of_limit(limit).max(kind.amount(g)) {
                    return Err(format!(
                        "{account}'s jobs hold {} {} (running or leaving), over its cap {limit} (grandfathered {})",
                        kind.of(usage),
                        kind.name(),
                        kind.of(g)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Drop live placements the core has released; complain about placements that changed
    /// without a `Start`.
    fn refresh_live(&mut self, s: &Scheduler) -> Result<(), String> {
        let mut gone = Vec::new();
        for (id, placement) in &self.live {
            match s.job_status(*id) {
                Some(
                    JobStatus::Running { placement: p, .. }
                    | JobStatus::Preempting { placement: p, .. }
                    | JobStatus::Stopping { placement: p, .. },
                ) => {
                    if p != placement {
                        return Err(format!("{id} moved from {placement} to {p} without a Start decision"));
                    }
                }
                Some(JobStatus::Pending { .. }) | None => gone.push(*id),
            }
        }
        for id in gone {
            self.live.remove(&id);
        }
        Ok(())
    }

    /// Snapshot what the checks of the next cycle need, and check that a plan of
    /// reservations the cycle would keep is what a fresh one would be. Call right before
    /// `cycle`.
    pub fn before_cycle(&mut self, s: &Scheduler, now: Time) -> Result<(), String> {
        s.check_kept_plan(now)?;
        self.now = now;
        self.reserved_before.clear();
        self.running_before.clear();
        self.started_before.clear();
        self.best_queued_rank_before = None;
        for &id in self.specs.keys() {
            match s.job_status(id) {
                Some(JobStatus::Pending { reserved: None, .. }) => {
                    let rank = self.queue_key(s, id).0;
                    self.best_queued_rank_before = Some(self.best_queued_rank_before.map_or(rank, |r| r.min(rank)));
                }
                Some(JobStatus::Pending { reserved: Some(p), .. }) => {
                    self.reserved_before.insert(id, p.clone());
                }
                Some(JobStatus::Running { started_at, .. }) => {
                    self.running_before.insert(id);
                    self.started_before.insert(id, started_at);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Check a cycle's outcome. Call right after `cycle`.
    pub fn after_cycle(&mut self, s: &Scheduler, out: &CycleOutcome) -> Result<(), String> {
        s.check_invariants().map_err(|e| format!("check_invariants: {e}"))?;
        let config = s.config();
        // Rule 7: the cycle's victims within its budget.
        let victims = out.decisions.iter().filter(|d| matches!(d, Decision::Preempt { .. })).count();
        if victims > config.limits.victims_per_cycle_max as usize {
            return Err(format!("{victims} victims in one cycle, above victims_per_cycle_max"));
        }
        // A preemptor whose start from its hold was taken back is an ordinary pending job:
        // it holds nothing, and may start anywhere in a later walk of the cycle.
        for job in &out.taken_back {
            self.reserved_before.remove(job);
        }
        let mut started_now: BTreeSet<JobId> = BTreeSet::new();
        self.preempting_now = out
            .decisions
            .iter()
            .filter_map(|d| match d {
                Decision::Preempt { preemptor, .. } => Some(*preemptor),
                _ => None,
            })
            .collect();
        for preemptor in &self.preempting_now {
            self.hold_victims.remove(preemptor);
        }
        for d in &out.decisions {
            if let Decision::Preempt { victim, preemptor, .. } = d {
                self.hold_victims.entry(*preemptor).or_default().insert(*victim);
                self.note_victim(*victim, *preemptor);
            }
        }
        for d in &out.decisions {
            match d {
                Decision::Start { job, placement } => {
                    self.check_start(s, *job, placement)?;
                    started_now.insert(*job);
                }
                Decision::Preempt { victim, preemptor, cause, .. } => {
                    let delay_ends = self.queued_at[preemptor].plus_ms(self.spec(*preemptor)?.preemption_delay_ms);
                    if self.now < delay_ends {
                        return Err(format!(
                            "{preemptor} preempted {victim} at {}, before its delay ends at {delay_ends}",
                            self.now
                        ));
                    }
                    let overrides = self.spec(*preemptor)?.overrides_protection;
                    self.check_protection(*victim, overrides)?;
                    let v = self.spec(*victim)?;
                    let p = self.spec(*preemptor)?;
                    if !config.policy.preemption {
                        return Err(format!("{preemptor} preempted {victim} under a policy without preemption"));
                    }
                    if p.preemption_policy == PreemptionPolicy::Never {
                        return Err(format!("{preemptor} has preemptionPolicy Never but preempted {victim}"));
                    }
                    let reclaimed = v.priority == p.priority
                        && v.project != p.project
                        && self
                            .nominals
                            .get(&v.project)
                            .zip(self.nominals.get(&p.project))
                            .is_some_and(|(a, b)| a.cohort == b.cohort)
                        && self.borrowing(s, v.project);
                    if v.priority >= p.priority && !reclaimed {
                        return Err(format!(
                            "{preemptor} (priority {}) preempted {victim} (priority {})",
                            p.priority, v.priority
                        ));
                    }
                    // The cause the victim's owner reads: priority when it is below, else a
                    // reclaim within the preemptor's cohort.
                    let expected_cause = match v.priority < p.priority {
                        true => PreemptCause::Priority,
                        false => PreemptCause::Reclaim { cohort: self.nominals[&p.project].cohort },
                    };
                    if *cause != expected_cause {
                        return Err(format!(
                            "{preemptor} preempted {victim} with cause {cause:?}, expected {expected_cause:?}"
                        ));
                    }
                    if !v.preemptible {
                        return Err(format!("{preemptor} preempted non-preemptible {victim}"));
                    }
                    // A preemptor started in step 3 may be preempted in step 4 of the same cycle.
                    if !self.running_before.contains(victim) && !started_now.contains(victim) {
                        return Err(format!("{preemptor} preempted {victim}, which was not running"));
                    }
                    match s.job_status(*victim) {
                        Some(JobStatus::Preempting { preemptor: p2, .. }) if p2 == *preemptor => {}
                        other => return Err(format!("victim {victim} is {other:?} after being preempted")),
                    }
                }
                Decision::Stop { .. } | Decision::Requeued { .. } => {}
            }
        }
        // A start of this cycle is taken back, not stopped, unless the set also reclaims an
        // older run of the same project that does not borrow without the starts, or an
        // earlier preemptor of the cycle reclaimed from that project (which may have counted
        // on the start): no driver has heard of it (preemption rule 8). So a preemptor that
        // stops a start of its cycle also reclaims an older run (of its own priority) of
        // the project of one of those starts, and that project is not sure to borrow
        // without them (`surely_borrows_without_starts`); or a run of that project was
        // reclaimed by a Preempt decision before its own.
        let mut victims_of: BTreeMap<JobId, (Vec<JobId>, BTreeSet<AccountId>)> = BTreeMap::new();
        let mut reclaimed_so_far: BTreeSet<AccountId> = BTreeSet::new();
        for d in &out.decisions {
            if let Decision::Preempt { victim, preemptor, cause, .. } = d {
                // What was reclaimed before this preemptor's first victim.
                victims_of.entry(*preemptor).or_insert_with(|| (Vec::new(), reclaimed_so_far.clone())).0.push(*victim);
                if matches!(cause, PreemptCause::Reclaim { .. }) {
                    reclaimed_so_far.insert(self.spec(*victim)?.project);
                }
            }
        }
        for (preemptor, (victims, reclaimed_before)) in &victims_of {
            let Some(started) = victims.iter().find(|v| started_now.contains(v)) else { continue };
            let priority = self.spec(*preemptor)?.priority;
            let mut started_projects = BTreeSet::new();
            for v in victims.iter().filter(|v| started_now.contains(v)) {
                started_projects.insert(self.spec(*v)?.project);
            }
            let mut kept = started_projects.iter().any(|p| reclaimed_before.contains(p));
            for v in victims.iter().filter(|v| !started_now.contains(v)) {
                let spec = self.spec(*v)?;
                kept |= spec.priority == priority
                    && started_projects.contains(&spec.project)
                    && !self.surely_borrows_without_starts(s, spec.project, victims, &started_now);
            }
            if !kept {
                return Err(format!(
                    "{preemptor} preempted {victims:?}, {started} started in this cycle, instead of taking it back \
                     (no older run reclaimed from the project of a start of the cycle that borrows only with it, \
                     and no reclaim from that project earlier in the cycle)"
                ));
            }
        }
        self.started_in_cycle = started_now.clone();
        self.started_now = started_now.into_iter().filter(|id| !self.reserved_before.contains_key(id)).collect();
        self.refresh_live(s)?;
        self.check_capacity()?;
        self.check_quotas()?;
        self.check_cohorts(s)?;
        self.drain_grandfathered(s);
        self.check_pending(s)?;
        self.check_work_conserving(s)?;
        self.check_blockers(s)?;
        self.check_reservations(s)?;
        self.check_preemption_liveness(s)?;
        self.check_forecast(s)?;
        Ok(())
    }

    /// The forecast (`forecast.rs`): every pending job once, in queue order, numbered from
    /// 1; no start in the past; a preemptor waiting for victims starts at the last victim's
    /// grace deadline (even on a node drained since: a hold stays); a reservation's holder
    /// at its reservation's time; any other job no set of nodes could hold is not placeable; and asking for some jobs gives what asking for all
    /// gives them.
    fn check_forecast(&self, s: &Scheduler) -> Result<(), String> {
        let all = s.forecast(self.now, usize::MAX);
        let pending: Vec<JobId> = s.pending().collect();
        let listed: Vec<JobId> = all.iter().map(|e| e.job).collect();
        let fair = s.config().policy.fair_share.is_some() && s.config().policy.backfill;
        if !fair && listed != pending {
            return Err(format!("forecast lists {listed:?}, the queue is {pending:?}"));
        }
        // With fair sharing, shares order each rank's tenants: every pending job once, the
        // ranks in order, and each tenant's jobs of one rank in queue order.
        if fair {
            let mut sorted = listed.clone();
            sorted.sort_unstable();
            let mut queued = pending.clone();
            queued.sort_unstable();
            let rank_of = |id: &JobId| self.queue_key(s, *id).0;
            let tenant_of = |id: &JobId| (rank_of(id), self.specs[id].project, self.specs[id].user);
            let in_queue: Vec<(_, Vec<JobId>)> = group_in_order(&pending, tenant_of);
            let in_forecast: Vec<(_, Vec<JobId>)> = group_in_order(&listed, tenant_of);
            let tenants_in_order = |mut groups: Vec<(_, Vec<JobId>)>| {
                groups.sort_by_key(|(tenant, _)| *tenant);
                groups
            };
            if sorted != queued
                || !listed.is_sorted_by_key(rank_of)
                || tenants_in_order(in_queue) != tenants_in_order(in_forecast)
            {
                return Err(format!("forecast lists {listed:?}, the queue is {pending:?}"));
            }
        }
        let pending = listed.clone();
        let reservations = s.reservations();
        let plan: BTreeMap<JobId, Time> = reservations.iter().map(|p| (p.job, p.at)).collect();
        // Nodes where a job started or began to hold GPUs for its victims in this cycle, and
        // those of its victims (a victim ends at its grace deadline, which may be later than
        // the end the plan counted on): the plan, brought up to date at the next cycle's
        // start, may still count their room.
        let victims_now = self.preempting_now.iter().flat_map(|p| self.hold_victims.get(p).into_iter().flatten());
        let started_on: BTreeSet<NodeId> = self
            .started_now
            .iter()
            .chain(&self.preempting_now)
            .chain(victims_now)
            .filter_map(|id| match s.job_status(*id) {
                Some(JobStatus::Running { placement, .. })
                | Some(JobStatus::Pending { reserved: Some(placement), .. })
                | Some(JobStatus::Preempting { placement, .. }) => Some(placement),
                _ => None,
            })
            .flat_map(|placement: &Placement| placement.replicas().iter().map(|r| r.node))
            .collect();
        // Placed jobs the forecast may count gone at once: terminating ones (past their
        // deadline, or about to be), and runs at or past their run-time limit (the next
        // cycle stops them), or with a limit over all their runs (whose part left is not
        // known here).
        let leaving_now = self.specs.iter().any(|(id, spec)| match s.job_status(*id) {
            Some(JobStatus::Preempting { .. } | JobStatus::Stopping { .. }) => true,
            Some(JobStatus::Running { started_at, .. }) => {
                spec.max_total_runtime_ms.is_some()
                    || spec.max_runtime_ms.is_some_and(|limit| started_at.plus_ms(limit + spec.grace_ms) <= self.now)
            }
            _ => false,
        });
        for (i, e) in all.iter().enumerate() {
            if e.position as usize != i + 1 {
                return Err(format!("{} at position {} in place {}", e.job, e.position, i + 1));
            }
            if let StartEstimate::At(t) = e.start
                && t < self.now
            {
                return Err(format!("{} forecast to start at {t}, before now {}", e.job, self.now));
            }
            // A job that its quota or its cohort holds back now (as the ledger says) cannot
            // start now: nothing is charged less until time passes (unless a job may leave
            // at once, above).
            if e.start == StartEstimate::At(self.now)
                && !leaving_now
                && let Some(reason) = s.held_back_by_caps(e.job)
            {
                return Err(format!("{} forecast to start now, yet it is held back: {reason}", e.job));
            }
            let victims_gone = self
                .hold_victims
                .get(&e.job)
                .into_iter()
                .flatten()
                .filter_map(|v| match s.job_status(*v) {
                    Some(JobStatus::Preempting { preemptor, deadline, .. }) if preemptor == e.job => Some(deadline),
                    _ => None,
                })
                .fold(self.now, Time::max);
            let expected = match s.job_status(e.job) {
                Some(JobStatus::Pending { reserved: Some(_), .. }) => Some(victims_gone),
                _ => plan.get(&e.job).copied(),
            };
            // A reservation's job starts at its time, unless the reservation gave way (later
            // then, never earlier): to a job ranked above it, forecast to start first, or
            // because a job started in this cycle on one of its nodes.
            let held_by_plan = plan.contains_key(&e.job);
            let gave_way = |at: Time| {
                let later = match e.start {
                    StartEstimate::At(t) => t > at,
                    StartEstimate::NotBefore(_) | StartEstimate::NotPlaceable => true,
                    StartEstimate::NotForecast => false,
                };
                let first_above = all[..i].iter().any(|o| {
                    matches!((o.start, e.start.at()), (StartEstimate::At(t), Some(mine)) if t <= mine)
                        || matches!((o.start, e.start.at()), (StartEstimate::At(_), None))
                });
                let room_taken = reservations
                    .iter()
                    .filter(|p| p.job == e.job)
                    .any(|p| p.nodes.iter().any(|(node, _)| started_on.contains(node)));
                later && (first_above || room_taken)
            };
            if let Some(at) = expected
                && e.start != StartEstimate::At(at)
                && !(held_by_plan && gave_way(at))
            {
                return Err(format!("{} forecast {:?}, expected at {at}", e.job, e.start));
            }
            let spec = &self.specs[&e.job];
            let empty = self.empty_room();
            let holds = matches!(s.job_status(e.job), Some(JobStatus::Pending { reserved: Some(_), .. }));
            if !holds && !self.fits(spec, &empty, &BTreeMap::new()) && e.start != StartEstimate::NotPlaceable {
                return Err(format!("{} fits on no set of nodes, yet is forecast {:?}", e.job, e.start));
            }
        }
        let some: BTreeSet<JobId> = pending.iter().step_by(2).copied().collect();
        let part = s.forecast_jobs(self.now, &some, usize::MAX);
        let expected: Vec<Estimate> = all.iter().filter(|e| some.contains(&e.job)).copied().collect();
        if part != expected {
            return Err(format!("forecast of some jobs {part:?} differs from the full forecast's {expected:?}"));
        }
        // With a limit, every job keeps its position and those beyond it are not forecast.
        let limited = s.forecast(self.now, 2);
        for (e, full) in limited.iter().zip(&all) {
            if (e.job, e.position) != (full.job, full.position)
                || (e.position > 2 && e.start != StartEstimate::NotForecast)
            {
                return Err(format!("forecast limited to 2 gives {e:?} for {full:?}"));
            }
        }
        // Asked for some jobs with a limit, those beyond it have their position only.
        let part = s.forecast_jobs(self.now, &some, 2);
        let listed: Vec<(JobId, u32)> = part.iter().map(|e| (e.job, e.position)).collect();
        let expected: Vec<(JobId, u32)> =
            all.iter().filter(|e| some.contains(&e.job)).map(|e| (e.job, e.position)).collect();
        if listed != expected || part.iter().any(|e| e.position > 2 && e.start != StartEstimate::NotForecast) {
            return Err(format!("forecast of some jobs limited to 2 gives {part:?}"));
        }
        Ok(())
    }

    fn spec(&self, id: JobId) -> Result<&JobSpec, String> {
        self.specs.get(&id).ok_or(format!("decision names unknown {id}"))
    }

    fn check_start(&mut self, s: &Scheduler, job: JobId, placement: &Placement) -> Result<(), String> {
        let spec = self.spec(job)?.clone();
        if self.live.contains_key(&job) {
            return Err(format!("{job} started while it still holds GPUs"));
        }
        if placement.replicas().len() != spec.replicas as usize {
            return Err(format!("{job} started with {} of {} replicas", placement.replicas().len(), spec.replicas));
        }
        let reserved = self.reserved_before.get(&job);
        if let Some(r) = reserved
            && r != placement
        {
            self.check_moved_off_hold(s, job, r, placement)?;
        }
        let newly_placed = reserved != Some(placement);
        let mut mine: BTreeSet<(NodeId, u32)> = BTreeSet::new();
        for r in placement.replicas() {
            let node = self.nodes.get(&r.node).ok_or(format!("{job} started on unknown {}", r.node))?;
            if newly_placed && self.drained.contains(&r.node) {
                return Err(format!("{job} newly placed on drained {}", r.node));
            }
            if spec.gpu_model.is_some_and(|m| m != node.gpu_model) {
                return Err(format!("{job} wants {:?} but started on {} ({})", spec.gpu_model, r.node, node.gpu_model));
            }
            if r.gpus.len() != spec.per_replica.slots_per_replica() {
                return Err(format!("{job} replica on {} has {} GPUs", r.node, r.gpus.len()));
            }
            for g in r.gpus.iter() {
                if g >= node.capacity.gpus {
                    return Err(format!("{job} got GPU {g} on {}, which has {}", r.node, node.capacity.gpus));
                }
                if !mine.insert((r.node, g)) {
                    return Err(format!("{job} got GPU {g} on {} twice", r.node));
                }
            }
        }
        // A GPU is taken whole by one job, or shared by shares adding up to 1000 at most.
        let share = spec.per_replica.gpu_milli;
        for &(node, g) in &mine {
            let mut shared_milli = share;
            for (other, p) in &self.live {
                let theirs = self.specs[other].per_replica.gpu_milli;
                for _ in p.replicas().iter().filter(|r| r.node == node && r.gpus.contains(g)) {
                    if share == 0 || theirs == 0 {
                        return Err(format!("{job} started on GPU {g} of {node}, still held by {other}"));
                    }
                    shared_milli += theirs;
                }
            }
            if shared_milli > 1000 {
                return Err(format!("{job}'s share takes GPU {g} of {node} to {shared_milli} thousandths"));
            }
        }
        self.live.insert(job, placement.clone());
        Ok(())
    }

    /// A preemptor that held `reserved` started on `placement` instead (cycle step 3b): only
    /// while some victim of its still terminates (else it starts on its hold), only if it
    /// ranked above every job that held nothing before the cycle, and only if none of its
    /// terminating victims is of its cohort (the cohort's level would move). Its new GPUs
    /// are checked free like any start's, and the quotas after the cycle.
    fn check_moved_off_hold(
        &self,
        s: &Scheduler,
        job: JobId,
        reserved: &Placement,
        placement: &Placement,
    ) -> Result<(), String> {
        let moved = || format!("{job} reserved {reserved} but started on {placement}");
        let terminating: Vec<JobId> = (self.hold_victims.get(&job).into_iter().flatten())
            .copied()
            .filter(|v| matches!(s.job_status(*v), Some(JobStatus::Preempting { preemptor, .. }) if preemptor == job))
            .collect();
        if terminating.is_empty() {
            return Err(format!("{}, though its victims had gone", moved()));
        }
        let rank = self.queue_key(s, job).0;
        if let Some(best) = self.best_queued_rank_before
            && rank >= best
        {
            return Err(format!("{}, though a job of rank {} was queued", moved(), best.0));
        }
        // Quotas are checked after the cycle over every live placement, the victims' too.
        let spec = &self.specs[&job];
        let cohort_of = |project: AccountId| self.nominals.get(&project).map(|n| n.cohort);
        for v in terminating {
            let victim = &self.specs[&v];
            let shares_project = victim.project == spec.project;
            let shares_cohort = cohort_of(spec.project).is_some_and(|c| cohort_of(victim.project) == Some(c));
            if shares_cohort || (shares_project && cohort_of(spec.project).is_some()) {
                return Err(format!("{}, while its victim {v} of its cohort terminates", moved()));
            }
        }
        Ok(())
    }

    /// Per node and in total, live placements fit the nodes.
    fn check_capacity(&self) -> Result<(), String> {
        let mut used: BTreeMap<NodeId, Resources> = BTreeMap::new();
        for (id, p) in &self.live {
            let per = self.specs[id].per_replica;
            for r in p.replicas() {
                let u = used.entry(r.node).or_default();
                *u = u.plus(per);
            }
        }
        let mut total_used = 0u32;
        for (node, u) in &used {
            let spec = self.nodes.get(node).ok_or(format!("live job on unknown {node}"))?;
            if !u.without_shares().fits_in(spec.capacity) {
                return Err(format!("{node} over capacity: live jobs use {u}, capacity {}", spec.capacity));
            }
            total_used += u.gpus;
        }
        let capacity: u32 = self.nodes.values().map(|n| n.capacity.gpus).sum();
        if total_used > capacity {
            return Err(format!("live jobs use {total_used} GPUs of {capacity}"));
        }
        Ok(())
    }

    fn check_pending(&self, s: &Scheduler) -> Result<(), String> {
        let complete = s.config().limits.starts_per_cycle_max == Limits::default().starts_per_cycle_max;
        for id in s.pending() {
            let reasons = s.why(id);
            if complete && (reasons.is_empty() || reasons.contains(&PendingReason::NotYetConsidered)) {
                return Err(format!("pending {id} not considered by a cycle: {reasons:?}"));
            }
            for r in &reasons {
                if let PendingReason::WaitingForPreemption { victims } = r {
                    if victims.is_empty() {
                        return Err(format!("{id} waits for preemption of nobody"));
                    }
                    for v in victims {
                        match s.job_status(*v) {
                            Some(JobStatus::Preempting { preemptor, .. }) if preemptor == id => {}
                            other => return Err(format!("{id} waits for {v}, which is {other:?}")),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// What a new job may take now on each schedulable node.
    /// Each schedulable node's free room, worked out slot by slot from the live placements
    /// and the holds: a slot is free, taken whole (by a job or a hold), or shared.
    fn free_room(&self, s: &Scheduler) -> BTreeMap<NodeId, Room> {
        let mut slots: BTreeMap<NodeId, Vec<Slot>> = BTreeMap::new();
        let mut used: BTreeMap<NodeId, Resources> = BTreeMap::new();
        let mut take = |node: NodeId, per: Resources, gpus: GpuSet, hold: bool| {
            let Some(n) = self.nodes.get(&node) else { return };
            let list = slots.entry(node).or_insert_with(|| vec![Slot::Free; n.capacity.gpus as usize]);
            let len = list.len();
            for g in gpus.iter().filter(|&g| (g as usize) < len) {
                let slot = &mut list[g as usize];
                *slot = match (*slot, per.is_share() && !hold) {
                    (Slot::Shared(m), true) => Slot::Shared(m + per.gpu_milli),
                    (Slot::Free, true) => Slot::Shared(per.gpu_milli),
                    _ => Slot::Whole,
                };
            }
            let u = used.entry(node).or_default();
            *u = u.plus(per.without_shares());
        };
        for (id, p) in &self.live {
            for r in p.replicas() {
                take(r.node, self.specs[id].per_replica, r.gpus, false);
            }
        }
        for (id, spec) in &self.specs {
            if let Some(JobStatus::Pending { reserved: Some(p), .. }) = s.job_status(*id) {
                for r in p.replicas() {
                    take(r.node, spec.per_replica, r.gpus, true);
                }
            }
        }
        self.nodes
            .iter()
            .filter(|(id, _)| !self.drained.contains(id))
            .map(|(id, n)| {
                let list = slots.remove(id).unwrap_or_else(|| vec![Slot::Free; n.capacity.gpus as usize]);
                let rest = n.capacity.saturating_minus(used.get(id).copied().unwrap_or_default());
                let whole_free = list.iter().filter(|s| **s == Slot::Free).count() as u32;
                let share_free =
                    list.iter().filter_map(|s| if let Slot::Shared(m) = s { Some(1000 - m) } else { None }).collect();
                (*id, Room { res: Resources { gpus: whole_free, ..rest }, share_free })
            })
            .collect()
    }

    /// Each schedulable node empty.
    fn empty_room(&self) -> BTreeMap<NodeId, Room> {
        self.nodes
            .iter()
            .filter(|(id, _)| !self.drained.contains(id))
            .map(|(id, n)| (*id, Room { res: n.capacity, share_free: Vec::new() }))
            .collect()
    }

    /// Would the whole gang fit in `free` plus `extra` (per node)? A share fits on a free
    /// GPU or beside other shares on a GPU with room; with `extra` (what victims free) it
    /// needs a whole GPU, as the core's victim search counts (a share victim frees its CPU
    /// and memory, not its GPU).
    fn fits(&self, spec: &JobSpec, free: &BTreeMap<NodeId, Room>, extra: &BTreeMap<NodeId, Resources>) -> bool {
        let per = spec.per_replica;
        let fitting: u64 = free
            .iter()
            .filter(|(node, _)| spec.gpu_model.is_none_or(|m| m == self.nodes[node].gpu_model))
            .map(|(node, f)| {
                let room = f.res.plus(extra.get(node).copied().unwrap_or_default().without_shares());
                let beside_shares = per.is_share()
                    && extra.is_empty()
                    && per.without_shares().fits_in(room)
                    && f.share_free.iter().any(|&m| m >= per.gpu_milli);
                if beside_shares { 1 } else { replicas_fitting(room, per.as_whole_gpus()) }
            })
            .fold(0u64, u64::saturating_add);
        fitting >= u64::from(spec.replicas)
    }

    fn check_blockers(&self, s: &Scheduler) -> Result<(), String> {
        for id in s.pending() {
            for r in s.why(id) {
                if let PendingReason::BlockedBehind { job, .. } = r {
                    if !matches!(s.job_status(job), Some(JobStatus::Pending { .. })) {
                        return Err(format!("{id} blocked behind {job}, which is not pending"));
                    }
                    let theirs = s.why(job);
                    // A job holding GPUs blocks whatever it waits for (cycle step 4b): a
                    // ready preemptor may wait on its cohort (`cohort_exhausted`).
                    let holds = matches!(s.job_status(job), Some(JobStatus::Pending { reserved: Some(_), .. }));
                    if !holds
                        && matches!(
                            theirs.first(),
                            Some(
                                PendingReason::OverQuota { .. }
                                    | PendingReason::CohortExhausted { .. }
                                    | PendingReason::NeverFits { .. }
                                    | PendingReason::BlockedBehind { .. }
                            )
                        )
                    {
                        return Err(format!("{id} blocked behind {job}, which does not block: {theirs:?}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// When a live job is expected to end, by the documented rule (`None` when the rule
    /// needs what the oracle does not know: a limit on the total run time, or the tenants'
    /// history of run times for a job without a limit).
    fn expected_end(&self, s: &Scheduler, id: JobId) -> Option<Time> {
        let spec = &self.specs[&id];
        s.config().policy.reservations?;
        let default = s.config().policy.estimates.default_runtime_ms.max(1);
        match s.job_status(id)? {
            JobStatus::Running { started_at, .. } => {
                if spec.max_total_runtime_ms.is_some() {
                    return None;
                }
                let learns = s.config().policy.estimates.history_runs_max > 0;
                Some(match spec.max_runtime_ms {
                    Some(limit) => started_at.plus_ms(limit + spec.grace_ms).max(self.now),
                    None if learns => return None,
                    None => {
                        let ran = self.now.ms_since(started_at);
                        started_at.plus_ms((ran / default + 1) * default)
                    }
                })
            }
            JobStatus::Preempting { deadline, .. } => Some(deadline.max(self.now)),
            JobStatus::Stopping { .. } => Some(self.now),
            JobStatus::Pending { .. } => None,
        }
    }

    /// A job's place in the queue: (rank, expected run under shortest-first order, first
    /// submit, id), as the queue orders.
    fn queue_key(&self, s: &Scheduler, id: JobId) -> (std::cmp::Reverse<Priority>, u64, Time, JobId) {
        let spec = &self.specs[&id];
        let (rank, expected) = match s.config().policy.order {
            QueueOrder::Priority => (spec.priority, 0),
            QueueOrder::PriorityShortestFirst => {
                (spec.priority, spec.max_runtime_ms.or(spec.runtime_estimate_ms).unwrap_or(u64::MAX))
            }
            QueueOrder::Fifo => (0, 0),
        };
        (std::cmp::Reverse(rank), expected, self.submitted[&id], id)
    }

    /// See the module doc: each reservation still fits at its time.
    fn check_reservations(&self, s: &Scheduler) -> Result<(), String> {
        let plan = s.reservations();
        if plan.is_empty() {
            return Ok(());
        }
        // With fair sharing a job of the holder's rank (its priority; every job under FIFO
        // order) ranks above it when its tenants' shares are lower (`plan.rs`), whatever
        // their submit order: any start at that rank or above may displace it.
        let fair = s.config().policy.fair_share.is_some();
        let ranks_above = |started: JobId, holder: JobId| match fair {
            true => self.queue_key(s, started).0 <= self.queue_key(s, holder).0,
            false => self.queue_key(s, started) < self.queue_key(s, holder),
        };
        let first_displaced = plan
            .iter()
            .position(|p| self.started_now.iter().any(|k| ranks_above(*k, p.job)) || !self.preempting_now.is_empty());
        // A reservation displaced, and those after it (they were placed around it), are
        // not checked this cycle.
        let plan = &plan[..first_displaced.unwrap_or(plan.len())];
        let mut ends: BTreeMap<JobId, Time> = BTreeMap::new();
        for &id in self.live.keys() {
            match self.expected_end(s, id) {
                Some(end) => {
                    ends.insert(id, end);
                }
                None => return Ok(()), // The rule is not checkable here.
            }
        }
        let mut earlier: BTreeMap<NodeId, Resources> = BTreeMap::new();
        for p in plan {
            let spec = &self.specs[&p.job];
            let mut free: BTreeMap<NodeId, Resources> = self
                .nodes
                .iter()
                .filter(|(id, n)| !self.drained.contains(id) && spec.gpu_model.is_none_or(|m| m == n.gpu_model))
                .map(|(id, n)| (*id, n.capacity))
                .collect();
            // GPUs by slot (a hold takes its victims' slots: one slot counts once); CPU and
            // memory by sum (a hold's count apart from its victims', as the core books them).
            let mut slots: BTreeMap<NodeId, BTreeSet<u32>> = BTreeMap::new();
            let mut take = |node: NodeId, r: Resources, gpus: &fairway_core::GpuSet| {
                if let Some(f) = free.get_mut(&node) {
                    *f = f.saturating_minus(Resources { gpus: 0, ..r.without_shares() });
                    slots.entry(node).or_default().extend(gpus.iter());
                }
            };
            for (id, placement) in &self.live {
                if ends[id] > p.at {
                    for r in placement.replicas() {
                        take(r.node, self.specs[id].per_replica, &r.gpus);
                    }
                }
            }
            for (id, other) in &self.specs {
                if let Some(JobStatus::Pending { reserved: Some(held), .. }) = s.job_status(*id) {
                    for r in held.replicas() {
                        take(r.node, other.per_replica, &r.gpus);
                    }
                }
            }
            for (node, f) in free.iter_mut() {
                f.gpus = f.gpus.saturating_sub(slots.get(node).map_or(0, |s| s.len() as u32));
            }
            for (node, r) in &earlier {
                if let Some(f) = free.get_mut(node) {
                    *f = f.saturating_minus(*r);
                }
            }
            let hosted: u64 = free
                .values()
                .map(|f| replicas_fitting(*f, spec.per_replica.as_whole_gpus()).min(u64::from(spec.replicas)))
                .sum();
            if hosted < u64::from(spec.replicas) {
                return Err(format!(
                    "the reservation of {} at {} no longer fits: the nodes hold {hosted} of its {} replicas then",
                    p.job, p.at, spec.replicas
                ));
            }
            for (node, r) in &p.nodes {
                let e = earlier.entry(*node).or_default();
                *e = e.plus(*r);
            }
        }
        Ok(())
    }

    /// See the module doc. Only a sufficient condition for success is checked, so a miss here
    /// is a real miss: the victim search takes candidates in order until the job fits, and
    /// taking all of them makes it fit.
    fn check_preemption_liveness(&self, s: &Scheduler) -> Result<(), String> {
        let config = s.config();
        if !config.policy.preemption || config.limits.starts_per_cycle_max != Limits::default().starts_per_cycle_max {
            return Ok(());
        }
        let free = self.free_room(s);
        for id in s.pending() {
            let spec = &self.specs[&id];
            let reasons = s.why(id);
            let delayed = self.now < self.queued_at[&id].plus_ms(spec.preemption_delay_ms);
            let skip = spec.preemption_policy == PreemptionPolicy::Never
                || delayed
                || self.waits_for_delayed_mate(s, id, &reasons)
                || matches!(s.job_status(id), Some(JobStatus::Pending { reserved: Some(_), .. }))
                || reasons.iter().any(|r| {
                    matches!(
                        r,
                        PendingReason::BlockedBehind { .. }
                            | PendingReason::PreemptionBudgetExhausted
                            | PendingReason::NeverFits { .. }
                            | PendingReason::HeldForReservation { .. }
                    )
                });
            if skip {
                continue;
            }
            // Over quota: only the account's own work; else any. Lower priority, preemptible,
            // running (not already terminating); and where it may reclaim (rule 1: its
            // project stays within its nominal quota with it), of its own priority from the
            // other members of its cohort that borrow.
            let scope = self.over_quota(s, spec, &BTreeMap::new());
            // A start or preemption in the cycle can make a member borrow (or move a charge
            // to a hold): what it lets a job reclaim is looked at next cycle (scenario 142),
            // so reclaims are checked after cycles that decided nothing.
            let quiet = self.started_now.is_empty() && self.preempting_now.is_empty();
            let reclaims_from =
                if scope.is_none() && quiet { self.reclaimable_projects(s, spec) } else { BTreeSet::new() };
            let eligible = |vs: &JobSpec| {
                vs.priority < spec.priority || (vs.priority == spec.priority && reclaims_from.contains(&vs.project))
            };
            let victims: Vec<JobId> = self
                .live
                .keys()
                .copied()
                .filter(|v| {
                    let vs = &self.specs[v];
                    eligible(vs)
                        && vs.preemptible
                        && matches!(s.job_status(*v), Some(JobStatus::Running { .. }))
                        && scope.is_none_or(|a| vs.user == a || vs.project == a)
                })
                .collect();
            // Rule 1's protection (a minimum run, an hourly maximum of preemptions): the
            // check is only a sufficient condition, so it stands aside when any candidate
            // may be protected.
            let protected = victims.iter().any(|v| {
                let vs = &self.specs[v];
                let young = match s.job_status(*v) {
                    Some(JobStatus::Running { started_at, .. }) => {
                        self.now < started_at.plus_ms(vs.min_run_before_preemption_ms)
                    }
                    _ => false,
                };
                young || vs.preemptions_per_hour_max.is_some()
            });
            if protected {
                continue;
            }
            let mut extra: BTreeMap<NodeId, Resources> = BTreeMap::new();
            let mut freed_quota: BTreeMap<AccountId, Resources> = BTreeMap::new();
            // A job short of its cohort needs what the members' runs give back to it: a
            // victim of its cohort counts against the bound even where it frees no room the
            // job can use.
            let cohort = self.nominals.get(&spec.project).map(|n| n.cohort);
            let short = self.cohort_short(s, spec, &BTreeMap::new());
            let gives_cohort = |vs: &JobSpec| short && self.nominals.get(&vs.project).map(|n| n.cohort) == cohort;
            let mut useful = 0;
            for v in &victims {
                let vs = &self.specs[v];
                let mut helps = false;
                for r in self.live[v].replicas() {
                    let node = &self.nodes[&r.node];
                    if !self.drained.contains(&r.node) && spec.gpu_model.is_none_or(|m| m == node.gpu_model) {
                        let e = extra.entry(r.node).or_default();
                        *e = e.plus(vs.per_replica);
                        helps = true;
                    }
                }
                for a in vs.accounts() {
                    let f = freed_quota.entry(a).or_default();
                    *f = f.plus(vs.total());
                }
                if helps || scope.is_some() || gives_cohort(vs) {
                    useful += 1;
                }
            }
            // Rule 6: at most the bound's victims, and the search examines the first
            // `victim_candidates_max` candidates (by priority, then id) only: the check holds
            // when every candidate it could have seen during the cycle is among them (those
            // preempted later in the cycle were candidates when it searched).
            let seen_in_cycle = self
                .live
                .keys()
                .filter(|v| {
                    let vs = &self.specs[*v];
                    eligible(vs)
                        && vs.preemptible
                        && matches!(
                            s.job_status(**v),
                            Some(JobStatus::Running { .. } | JobStatus::Preempting { .. } | JobStatus::Stopping { .. })
                        )
                })
                .count();
            let bound = config.limits.victims_per_preemption_max.min(config.limits.victim_candidates_max);
            if useful == 0 || useful > bound as usize || seen_in_cycle > config.limits.victim_candidates_max as usize {
                continue;
            }
            if self.over_quota(s, spec, &freed_quota).is_some()
                || self.cohort_short(s, spec, &freed_quota)
                || !self.fits(spec, &free, &extra)
            {
                continue;
            }
            return Err(format!(
                "{id} could preempt {victims:?} (within quota and bound, then it fits) but is left with {reasons:?}"
            ));
        }
        Ok(())
    }

    /// The projects a pending job may reclaim runs of its own priority from (rule 1 and
    /// docs/cohorts.md): if its project stays within its nominal quota with it, in every
    /// dimension its cohort governs, the other members of its cohort that use more than
    /// their nominal quota (usage as the cohort counts it, `cohort_usage`); else none.
    fn reclaimable_projects(&self, s: &Scheduler, spec: &JobSpec) -> BTreeSet<AccountId> {
        let Some(own) = self.nominals.get(&spec.project) else { return BTreeSet::new() };
        let members: Vec<(AccountId, NominalQuota)> =
            self.nominals.iter().filter(|(_, n)| n.cohort == own.cohort).map(|(p, n)| (*p, *n)).collect();
        let governed: Vec<ResourceKind> = ResourceKind::ALL
            .into_iter()
            .filter(|&k| members.iter().any(|(_, n)| n.nominal.limit(k).is_some()))
            .collect();
        let above = |usage: Resources, n: &NominalQuota| {
            governed.iter().any(|&k| k.amount(usage) > k.amount_of_limit(n.nominal.limit(k).unwrap_or(0)))
        };
        if above(self.cohort_usage(s, spec.project).plus(spec.total()), own) {
            return BTreeSet::new();
        }
        members
            .iter()
            .filter(|(p, n)| *p != spec.project && above(self.cohort_usage(s, *p), n))
            .map(|(p, _)| *p)
            .collect()
    }

    /// Rule 1's delay, as documented for equivalence groups: a job behind a member of its
    /// group still in its delay waits for it. The core's reason names the delay's end; the
    /// check accepts it only if another pending job of the same group (same tier, tenant,
    /// shape and run limit, both allowed to preempt) is in its delay until exactly then.
    fn waits_for_delayed_mate(&self, s: &Scheduler, id: JobId, reasons: &[PendingReason]) -> bool {
        let spec = &self.specs[&id];
        let group = |o: &JobSpec| {
            let limit = match (o.max_runtime_ms.or(o.runtime_estimate_ms), o.max_total_runtime_ms) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)).saturating_add(o.grace_ms)),
            };
            (o.priority, o.gpu_model, o.per_replica, o.replicas, o.user, o.project, o.preemption_policy, limit)
        };
        reasons.iter().any(|r| {
            let PendingReason::PreemptionDelayed { until } = r else { return false };
            *until > self.now
                && s.pending().into_iter().any(|mate| {
                    let ms = &self.specs[&mate];
                    mate != id
                        && group(ms) == group(spec)
                        && self.queued_at[&mate].plus_ms(ms.preemption_delay_ms) == *until
                })
        })
    }

    /// Rule 1's protection, from outside: the victim's run is at least its minimum run old,
    /// and it was chosen fewer than its hourly maximum of times in the hour before, unless
    /// the preemptor's class overrides protection (the preemption is still remembered).
    fn check_protection(&mut self, victim: JobId, overridden: bool) -> Result<(), String> {
        let spec = self.spec(victim)?.clone();
        let now = self.now;
        if overridden {
            self.preempted_at.entry(victim).or_default().push(now);
            return Ok(());
        }
        if let Some(started) = self.started_before.get(&victim)
            && now < started.plus_ms(spec.min_run_before_preemption_ms)
        {
            return Err(format!(
                "{victim} preempted at {now}, {} ms into a run protected for {} ms",
                now.ms_since(*started),
                spec.min_run_before_preemption_ms
            ));
        }
        let times = self.preempted_at.entry(victim).or_default();
        if let Some(max) = spec.preemptions_per_hour_max {
            let in_hour = times.iter().filter(|t| now.ms_since(**t) < 3_600_000).count();
            if in_hour >= max as usize {
                return Err(format!(
                    "{victim} preempted at {now} for the {}th time within an hour (max {max})",
                    in_hour + 1
                ));
            }
        }
        times.push(now);
        Ok(())
    }

    fn check_work_conserving(&self, s: &Scheduler) -> Result<(), String> {
        if s.config().limits.starts_per_cycle_max != Limits::default().starts_per_cycle_max {
            return Ok(());
        }
        let free = self.free_room(s);
        // With fair sharing, shares rank a holder and the jobs held for it. In a cycle that
        // started nothing and began no preemption they did not move during the walk: each
        // job held for a reservation ranks below its holder then, as the forecast lists
        // them (one that shares moved above it is asked again, scenario 161).
        let shares_still =
            s.config().policy.fair_share.is_some() && self.started_now.is_empty() && self.preempting_now.is_empty();
        let mut forecast_place: Option<BTreeMap<JobId, usize>> = None;
        for id in s.pending() {
            let spec = &self.specs[&id];
            let reasons = s.why(id);
            if matches!(s.job_status(id), Some(JobStatus::Pending { reserved: Some(_), .. }))
                || reasons.iter().any(|r| matches!(r, PendingReason::BlockedBehind { .. }))
            {
                continue;
            }
            let matches_model = |n: &NodeSpec| spec.gpu_model.is_none_or(|m| m == n.gpu_model);
            if reasons.iter().any(|r| matches!(r, PendingReason::NeverFits { .. })) {
                // Replica by replica onto the empty nodes: how many fit in all.
                let mut fit = 0u64;
                for n in self.nodes.values().filter(|n| matches_model(n)) {
                    let (mut room, per) = (n.capacity, spec.per_replica.as_whole_gpus());
                    while per.fits_in(room) && fit < u64::from(spec.replicas) {
                        room = room.minus(per);
                        fit += 1;
                    }
                }
                if fit >= u64::from(spec.replicas) {
                    return Err(format!(
                        "{id} said to never fit, but the empty nodes hold its {fit} replicas: {reasons:?}"
                    ));
                }
                continue;
            }
            if self.over_quota(s, spec, &BTreeMap::new()).is_some() || self.cohort_short(s, spec, &BTreeMap::new()) {
                continue;
            }
            // Held back for a reservation: the reservation's job is pending and, in priority
            // order, ranks at least as high (what it would delay is the plan's, see `plan.rs`).
            if let Some(PendingReason::HeldForReservation { job, .. }) =
                reasons.iter().find(|r| matches!(r, PendingReason::HeldForReservation { .. }))
            {
                let holder = self.specs.get(job).ok_or(format!("{id} held for unknown {job}"))?;
                // (With fair sharing the walk may meet it before the reservation's job, which
                // may then start in the same cycle, and even be chosen as a victim later in
                // that cycle, a borrower reclaimed by a member within its nominal quota beside
                // runs of earlier cycles (alone, its start is taken back, scenario 170); and a
                // job asleep behind a reservation is not asked again in the cycle whose walk
                // makes the reservation's job preempt instead. The next cycle looks at it
                // again: the plan changed, and a preemption always brings an exit.)
                let pending_or_just_started = match s.job_status(*job) {
                    Some(JobStatus::Pending { reserved: None, .. }) => true,
                    Some(JobStatus::Pending { reserved: Some(_), .. }) => self.preempting_now.contains(job),
                    Some(JobStatus::Running { started_at, .. }) => started_at == self.now,
                    Some(JobStatus::Preempting { .. }) => self.started_in_cycle.contains(job),
                    _ => false,
                };
                if !pending_or_just_started
                    || (s.config().policy.order == QueueOrder::Priority && holder.priority < spec.priority)
                {
                    return Err(format!("{id} is held for {job}, which is not a pending job ranked above it"));
                }
                if shares_still {
                    let place = forecast_place.get_or_insert_with(|| {
                        s.forecast(self.now, usize::MAX).iter().enumerate().map(|(i, e)| (e.job, i)).collect()
                    });
                    if place.get(job) > place.get(&id) {
                        return Err(format!("{id} is held for {job}, which shares now rank below it"));
                    }
                }
                continue;
            }
            if self.fits(spec, &free, &BTreeMap::new()) {
                return Err(format!("pending {id} is within quota and fits in free room {free:?}, yet: {reasons:?}"));
            }
        }
        Ok(())
    }
}

impl Oracle {
    /// The first of the job's accounts that starting it would take over its cap, once
    /// `freed` (per account) is uncharged.
    fn over_quota(&self, s: &Scheduler, spec: &JobSpec, freed: &BTreeMap<AccountId, Resources>) -> Option<AccountId> {
        spec.accounts().find(|a| {
            let (charged, _) = s.account_usage(*a);
            let freed = freed.get(a).copied().unwrap_or_default();
            ResourceKind::ALL.into_iter().any(|k| {
                self.cap_of(*a, k).is_some_and(|limit| {
                    k.amount(charged).saturating_sub(k.amount(freed)) + k.amount(spec.total())
                        > k.amount_of_limit(limit)
                })
            })
        })
    }
}

/// A GPU slot as the oracle books it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Free,
    /// Taken by a whole-GPU job or held for a preemptor.
    Whole,
    /// Shares adding up to these thousandths.
    Shared(u32),
}

/// A node's free room: `res.gpus` whole free GPUs (CPU and memory left), and what each
/// shared GPU has left for another share.
#[derive(Clone, Debug)]
struct Room {
    res: Resources,
    share_free: Vec<u32>,
}

/// How many replicas of `per` fit in `free`.
fn replicas_fitting(free: Resources, per: Resources) -> u64 {
    let by = |have: u64, need: u64| have.checked_div(need).unwrap_or(u64::MAX);
    by(u64::from(free.gpus), u64::from(per.gpus))
        .min(by(free.cpu_millis, per.cpu_millis))
        .min(by(free.memory_mib, per.memory_mib))
}

/// The larger of each dimension, GPUs by amount (whole and shared together).
fn max(a: Resources, b: Resources) -> Resources {
    Resources::from_amounts(|k| k.amount(a).max(k.amount(b)))
}

/// `ids` by `key`, each group's ids in the order met, the groups in order of their first.
fn group_in_order<K: PartialEq + Copy>(ids: &[JobId], key: impl Fn(&JobId) -> K) -> Vec<(K, Vec<JobId>)> {
    let mut groups: Vec<(K, Vec<JobId>)> = Vec::new();
    for id in ids {
        let k = key(id);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(*id),
            None => groups.push((k, vec![*id])),
        }
    }
    groups
}
