//! The driver's own ledger: what the simulator has been told to run, checked decision by
//! decision against the rules a user would hold the scheduler to, from outside the core.
//!
//! It keeps, independently of the core's bookkeeping, which GPU slots of which node each
//! started job occupies until the simulator reports it gone, and what each capped account
//! holds. Every decision is checked as it is carried out, at a cost proportional to the
//! decision (never to the cluster or the backlog), so it runs over every cycle of a whole
//! trace:
//!
//! 1. A start places the whole gang: `replicas` replicas of `per_replica.gpus` GPUs each
//!    (one GPU for a share of one GPU), on known nodes of the job's GPU model.
//! 2. No GPU is assigned twice: a started replica's slots exist on its node and no job the
//!    driver still runs (including a victim in its grace period) occupies them; a share
//!    sits only on a GPU no job takes whole, and the shares on one GPU add up to at most
//!    1000 thousandths; the CPU and memory of a node's replicas stay within its capacity.
//!    Quotas count GPUs in thousandths (whole GPUs and shares together).
//! 3. Usage stays within quota: what a capped account's running jobs hold never exceeds
//!    its hard cap, nor a project in a cohort its nominal quota plus borrowing limit; and
//!    what a cohort's members hold beyond their guarantees (nominal less lending limit)
//!    never exceeds what they lend, `Σ max(0, u − g) ≤ Σ lent` (the rule as documented,
//!    not the core's form of it).
//! 4. A preemption is allowed: the victim runs, is preemptible and has strictly lower
//!    priority than the preemptor, which is pending and may preempt; or, reclaimed, the
//!    same priority, the victim's project another member of the preemptor's cohort. Its
//!    cause says which: `priority` when the victim is below, else `reclaim` in the
//!    preemptor's cohort.
//!
//! The core's own whole-state check (`Scheduler::check_invariants`) verifies its internal
//! indexes; the engine runs it on a schedule (see `engine::CheckLevel`).

use fairway_core::GpuSet;
use fairway_core::{
    AccountId, JobSpec, NodeId, NodeSpec, NominalQuota, Placement, PreemptCause, PreemptionPolicy, Quota, ResourceKind,
    Resources,
};

/// A node as the driver sees it.
struct NodeLedger {
    spec: NodeSpec,
    /// Slots occupied whole by jobs the driver runs.
    taken: GpuSet,
    /// Per slot, the thousandths its shares take.
    shares: Vec<u32>,
    used: Resources,
}

struct AccountLedger {
    id: AccountId,
    quota: Quota,
    held: Resources,
}

/// A project in a cohort, and what it holds.
struct MemberLedger {
    project: AccountId,
    nominal: NominalQuota,
    held: Resources,
}

pub(crate) struct Audit {
    /// Sorted by node id.
    nodes: Vec<NodeLedger>,
    /// Capped accounts only, sorted by id.
    accounts: Vec<AccountLedger>,
    /// Projects in cohorts, sorted by project.
    members: Vec<MemberLedger>,
    /// By job index: where the job runs now, as the driver was told.
    placed: Vec<Option<Placement>>,
    placed_count: usize,
}

impl Audit {
    pub(crate) fn new(
        nodes: &[NodeSpec],
        quotas: &[(AccountId, Quota)],
        nominals: &[(AccountId, NominalQuota)],
        jobs: usize,
    ) -> Audit {
        let mut nodes: Vec<NodeLedger> = nodes
            .iter()
            .map(|spec| NodeLedger {
                spec: spec.clone(),
                taken: GpuSet::EMPTY,
                shares: vec![0; spec.capacity.gpus as usize],
                used: Resources::ZERO,
            })
            .collect();
        nodes.sort_by_key(|n| n.spec.id);
        let mut accounts: Vec<AccountLedger> =
            quotas.iter().map(|&(id, quota)| AccountLedger { id, quota, held: Resources::ZERO }).collect();
        accounts.sort_by_key(|a| a.id);
        // A later quota for the same account replaces an earlier one, as in the core.
        accounts.dedup_by(|later, earlier| {
            let same = later.id == earlier.id;
            if same {
                earlier.quota = later.quota;
            }
            same
        });
        let mut members: Vec<MemberLedger> = nominals
            .iter()
            .map(|&(project, nominal)| MemberLedger { project, nominal, held: Resources::ZERO })
            .collect();
        members.sort_by_key(|m| m.project);
        Audit { nodes, accounts, members, placed: vec![None; jobs], placed_count: 0 }
    }

    /// Nodes plus jobs placed: the size of what the core's whole-state check walks.
    pub(crate) fn state_size(&self) -> usize {
        self.nodes.len() + self.placed_count
    }

    /// Rules 1–3 for a job the core starts. A refused start changes nothing.
    pub(crate) fn start(&mut self, index: usize, spec: &JobSpec, placement: &Placement) -> Result<(), String> {
        let id = spec.id;
        if self.placed[index].is_some() {
            return Err(format!("{id} started while it still runs"));
        }
        let replicas = placement.replicas();
        if replicas.len() != spec.replicas as usize {
            return Err(format!("gang {id} started with {} of {} replicas", replicas.len(), spec.replicas));
        }
        for r in replicas {
            let node = self.node(r.node).ok_or_else(|| format!("{id} started on unknown {}", r.node))?;
            let wants = spec.per_replica.slots_per_replica();
            if r.gpus.len() != wants {
                return Err(format!("{id} replica on {} has {} GPUs, wants {wants}", r.node, r.gpus.len()));
            }
            if spec.gpu_model.is_some_and(|m| m != node.spec.gpu_model) {
                return Err(format!(
                    "{id} wants GPU model {:?}, {} has {:?}",
                    spec.gpu_model, r.node, node.spec.gpu_model
                ));
            }
        }
        let total = spec.total();
        for account in spec.accounts() {
            let Some(a) = self.account(account) else { continue };
            let held = a.held.plus(total);
            if let Some(kind) = a.quota.first_exceeded(held) {
                let limit = a.quota.limit(kind).expect("over a limit it has");
                return Err(format!(
                    "{id} takes {account} to {} {}, over its quota of {limit}",
                    kind.of(held),
                    kind.name()
                ));
            }
        }
        self.check_cohort(spec)?;
        // Claim replica by replica: a gang may put several replicas on one node.
        for (k, r) in replicas.iter().enumerate() {
            let node = self.node_mut(r.node).expect("checked above");
            let outside = r.gpus.minus(GpuSet::first(node.spec.capacity.gpus));
            let share = spec.per_replica.gpu_milli;
            let shared = r.gpus.iter().filter(|&s| node.shares.get(s as usize).is_some_and(|m| *m > 0));
            let clash = node.taken.union(if share > 0 {
                GpuSet::EMPTY
            } else {
                GpuSet::from_indices(shared).unwrap_or_default()
            });
            let clash = clash.intersection(r.gpus);
            let over =
                r.gpus.iter().find(|&s| share > 0 && node.shares.get(s as usize).is_some_and(|m| m + share > 1000));
            let used = node.used.plus(spec.per_replica);
            let problem = if !outside.is_empty() {
                Some(format!("{id} was given GPUs {outside} that {} does not have", r.node))
            } else if !clash.is_empty() {
                Some(format!("{id} was given GPUs {clash} on {}, which another job still holds", r.node))
            } else if let Some(slot) = over {
                Some(format!("{id}'s share of {share} takes GPU {slot} on {} past 1000 thousandths", r.node))
            } else if !used.without_shares().fits_in(node.spec.capacity) {
                Some(format!("{id} takes {} past its capacity {}", r.node, node.spec.capacity))
            } else {
                None
            };
            if let Some(problem) = problem {
                self.release_replicas(spec, &replicas[..k]);
                return Err(problem);
            }
            if share > 0 {
                r.gpus.iter().for_each(|s| node.shares[s as usize] += share);
            } else {
                node.taken = node.taken.union(r.gpus);
            }
            node.used = used;
        }
        for account in spec.accounts() {
            if let Some(a) = self.account_mut(account) {
                a.held = a.held.plus(total);
            }
        }
        if let Some(m) = self.member_mut(spec.project) {
            m.held = m.held.plus(total);
        }
        self.placed[index] = Some(placement.clone());
        self.placed_count += 1;
        Ok(())
    }

    /// Rule 4 for a preemption, before the driver acts on it.
    pub(crate) fn preempt(
        &self,
        victim: usize,
        victim_spec: &JobSpec,
        preemptor: usize,
        preemptor_spec: &JobSpec,
        cause: PreemptCause,
    ) -> Result<(), String> {
        let (v, p) = (victim_spec, preemptor_spec);
        if self.placed[victim].is_none() {
            return Err(format!("{} preempted, but it does not run", v.id));
        }
        if !v.preemptible {
            return Err(format!("non-preemptible {} preempted for {}", v.id, p.id));
        }
        if v.priority > p.priority || (v.priority == p.priority && !self.reclaimable(v, p)) {
            return Err(format!("{} (priority {}) preempted for {} (priority {})", v.id, v.priority, p.id, p.priority));
        }
        if p.preemption_policy == PreemptionPolicy::Never {
            return Err(format!("{} preempted for {}, whose policy is Never", v.id, p.id));
        }
        if self.placed[preemptor].is_some() {
            return Err(format!("{} preempted for {}, which already runs", v.id, p.id));
        }
        let expected = match v.priority < p.priority {
            true => Some(PreemptCause::Priority),
            false => self.member(p.project).map(|m| PreemptCause::Reclaim { cohort: m.nominal.cohort }),
        };
        if expected != Some(cause) {
            return Err(format!("{} preempted for {} with cause {cause:?}, expected {expected:?}", v.id, p.id));
        }
        Ok(())
    }

    /// The driver reports the job gone: its slots and charges are free again.
    pub(crate) fn exited(&mut self, index: usize, spec: &JobSpec) {
        let placement = self.placed[index].take().expect("only a placed job exits");
        self.placed_count -= 1;
        self.release_replicas(spec, placement.replicas());
        let total = spec.total();
        for account in spec.accounts() {
            if let Some(a) = self.account_mut(account) {
                a.held = a.held.minus(total);
            }
        }
        if let Some(m) = self.member_mut(spec.project) {
            m.held = m.held.minus(total);
        }
    }

    /// Rule 3 for a cohort member's start: within its nominal quota plus borrowing limit,
    /// and its cohort's members beyond their guarantees within what they lend.
    fn check_cohort(&self, spec: &JobSpec) -> Result<(), String> {
        let Some(member) = self.member(spec.project) else { return Ok(()) };
        let cohort = member.nominal.cohort;
        let total = spec.total();
        for kind in ResourceKind::ALL {
            if !self.governs(cohort, kind) {
                continue;
            }
            // In thousandths for GPUs (`ResourceKind::amount`), limits likewise.
            let nominal = kind.amount_of_limit(member.nominal.nominal.limit(kind).unwrap_or(0));
            let held = kind.amount(member.held) + kind.amount(total);
            if let Some(borrow) = member.nominal.borrowing_limit.limit(kind).map(|b| kind.amount_of_limit(b))
                && held > nominal + borrow
            {
                return Err(format!(
                    "{} takes {} to {held} {}, over its nominal quota {nominal} plus borrowing limit {borrow}",
                    spec.id,
                    spec.project,
                    kind.name()
                ));
            }
            let (mut beyond, mut lent) = (0u64, 0u64);
            for m in self.members.iter().filter(|m| m.nominal.cohort == cohort) {
                let nominal = kind.amount_of_limit(m.nominal.nominal.limit(kind).unwrap_or(0));
                let lends =
                    m.nominal.lending_limit.limit(kind).map_or(nominal, |l| kind.amount_of_limit(l).min(nominal));
                let extra = if m.project == spec.project { kind.amount(total) } else { 0 };
                beyond += (kind.amount(m.held) + extra).saturating_sub(nominal - lends);
                lent += lends;
            }
            if beyond > lent {
                return Err(format!(
                    "{} takes cohort {cohort}'s members to {beyond} {} beyond their guarantees, more than the {lent} they lend",
                    spec.id,
                    kind.name()
                ));
            }
        }
        Ok(())
    }

    /// A reclaim: the victim's project is another member of the preemptor's cohort. (Whether
    /// the victim's project borrowed and the preemptor's stays within its nominal quota
    /// count what preemptors hold and what their victims give back as they leave, which the
    /// driver does not see: the core's oracle checks those parts.)
    fn reclaimable(&self, victim: &JobSpec, preemptor: &JobSpec) -> bool {
        let (Some(v), Some(p)) = (self.member(victim.project), self.member(preemptor.project)) else { return false };
        victim.project != preemptor.project && v.nominal.cohort == p.nominal.cohort
    }

    /// Does some member of `cohort` name a nominal quota in `kind`?
    fn governs(&self, cohort: AccountId, kind: ResourceKind) -> bool {
        self.members.iter().any(|m| m.nominal.cohort == cohort && m.nominal.nominal.limit(kind).is_some())
    }

    fn member(&self, project: AccountId) -> Option<&MemberLedger> {
        self.members.binary_search_by_key(&project, |m| m.project).ok().map(|i| &self.members[i])
    }

    fn member_mut(&mut self, project: AccountId) -> Option<&mut MemberLedger> {
        self.members.binary_search_by_key(&project, |m| m.project).ok().map(|i| &mut self.members[i])
    }

    fn release_replicas(&mut self, spec: &JobSpec, replicas: &[fairway_core::ReplicaPlacement]) {
        for r in replicas {
            let node = self.node_mut(r.node).expect("claimed on a known node");
            match spec.per_replica.gpu_milli {
                0 => node.taken = node.taken.minus(r.gpus),
                share => r.gpus.iter().for_each(|s| node.shares[s as usize] -= share),
            }
            node.used = node.used.minus(spec.per_replica);
        }
    }

    fn node(&self, id: NodeId) -> Option<&NodeLedger> {
        self.nodes.binary_search_by_key(&id, |n| n.spec.id).ok().map(|i| &self.nodes[i])
    }

    fn node_mut(&mut self, id: NodeId) -> Option<&mut NodeLedger> {
        self.nodes.binary_search_by_key(&id, |n| n.spec.id).ok().map(|i| &mut self.nodes[i])
    }

    fn account(&self, id: AccountId) -> Option<&AccountLedger> {
        self.accounts.binary_search_by_key(&id, |a| a.id).ok().map(|i| &self.accounts[i])
    }

    fn account_mut(&mut self, id: AccountId) -> Option<&mut AccountLedger> {
        self.accounts.binary_search_by_key(&id, |a| a.id).ok().map(|i| &mut self.accounts[i])
    }
}

#[cfg(test)]
mod tests {
    use fairway_core::{GpuModel, JobId, ReplicaPlacement};

    use super::*;

    const ALICE: AccountId = AccountId(1);

    fn node(id: u32, gpus: u32) -> NodeSpec {
        NodeSpec { id: NodeId(id), gpu_model: GpuModel(0), capacity: Resources::new(gpus, 64_000, 512_000) }
    }

    fn job(id: u64, priority: i32, gpus: u32) -> JobSpec {
        JobSpec { user: ALICE, project: ALICE, ..JobSpec::new(JobId(id), priority, Resources::gpus(gpus)) }
    }

    fn on(node: u32, slots: &[u32]) -> ReplicaPlacement {
        ReplicaPlacement { node: NodeId(node), gpus: GpuSet::from_indices(slots.iter().copied()).unwrap() }
    }

    fn audit() -> Audit {
        Audit::new(&[node(2, 4), node(1, 8)], &[(ALICE, Quota::gpus(6))], &[], 8)
    }

    #[test]
    fn a_slot_in_use_until_its_job_exits_is_refused() {
        let mut a = audit();
        a.start(0, &job(0, 1, 2), &Placement::one(on(1, &[0, 1]))).unwrap();
        let err = a.start(1, &job(1, 1, 2), &Placement::one(on(1, &[1, 2]))).unwrap_err();
        assert!(err.contains("another job still holds"), "{err}");
        // The refused start claimed nothing, and the slots are free once job 0 exits.
        a.start(1, &job(1, 1, 2), &Placement::one(on(1, &[2, 3]))).unwrap();
        a.exited(0, &job(0, 1, 2));
        a.start(2, &job(2, 1, 2), &Placement::one(on(1, &[0, 1]))).unwrap();
        assert_eq!(a.state_size(), 2 + 2);
    }

    #[test]
    fn slots_a_node_lacks_and_past_its_capacity_are_refused() {
        let mut a = audit();
        let err = a.start(0, &job(0, 1, 1), &Placement::one(on(2, &[4]))).unwrap_err();
        assert!(err.contains("does not have"), "{err}");
        let err = a.start(0, &job(0, 1, 1), &Placement::one(on(9, &[0]))).unwrap_err();
        assert!(err.contains("unknown"), "{err}");
        let hungry = JobSpec { per_replica: Resources::new(1, 65_000, 0), ..job(0, 1, 1) };
        let err = a.start(0, &hungry, &Placement::one(on(1, &[0]))).unwrap_err();
        assert!(err.contains("past its capacity"), "{err}");
    }

    #[test]
    fn a_partial_gang_or_a_wrong_replica_size_is_refused() {
        let mut a = audit();
        let gang = JobSpec { replicas: 2, ..job(0, 1, 2) };
        let err = a.start(0, &gang, &Placement::one(on(1, &[0, 1]))).unwrap_err();
        assert!(err.contains("1 of 2 replicas"), "{err}");
        let err = a.start(0, &gang, &Placement::new(vec![on(1, &[0, 1]), on(2, &[0])])).unwrap_err();
        assert!(err.contains("has 1 GPUs, wants 2"), "{err}");
        // Two replicas on one node must not share slots either.
        let err = a.start(0, &gang, &Placement::new(vec![on(1, &[0, 1]), on(1, &[1, 2])])).unwrap_err();
        assert!(err.contains("another job still holds"), "{err}");
        a.start(0, &gang, &Placement::new(vec![on(1, &[0, 1]), on(2, &[0, 1])])).unwrap();
    }

    #[test]
    fn usage_over_a_cap_is_refused_and_counts_until_exit() {
        let mut a = audit();
        a.start(0, &job(0, 1, 4), &Placement::one(on(1, &[0, 1, 2, 3]))).unwrap();
        let err = a.start(1, &job(1, 1, 4), &Placement::one(on(2, &[0, 1, 2, 3]))).unwrap_err();
        assert!(err.contains("over its quota of 6"), "{err}");
        a.exited(0, &job(0, 1, 4));
        a.start(1, &job(1, 1, 4), &Placement::one(on(2, &[0, 1, 2, 3]))).unwrap();
    }

    #[test]
    fn only_lower_priority_preemptible_running_work_is_preempted() {
        let mut a = audit();
        a.start(0, &job(0, 10, 2), &Placement::one(on(1, &[0, 1]))).unwrap();
        let by_priority = PreemptCause::Priority;
        assert!(a.preempt(0, &job(0, 10, 2), 1, &job(1, 100, 2), by_priority).is_ok());
        let equal = a.preempt(0, &job(0, 10, 2), 1, &job(1, 10, 2), by_priority).unwrap_err();
        assert!(equal.contains("priority 10"), "{equal}");
        let protected = JobSpec { preemptible: false, ..job(0, 10, 2) };
        assert!(a.preempt(0, &protected, 1, &job(1, 100, 2), by_priority).is_err());
        let never = JobSpec { preemption_policy: PreemptionPolicy::Never, ..job(1, 100, 2) };
        assert!(a.preempt(0, &job(0, 10, 2), 1, &never, by_priority).is_err());
        assert!(a.preempt(2, &job(2, 1, 2), 1, &job(1, 100, 2), by_priority).is_err(), "job 2 does not run");
        // A lower-priority victim gives way by priority, never to a reclaim.
        let reclaim = PreemptCause::Reclaim { cohort: AccountId(9) };
        let err = a.preempt(0, &job(0, 10, 2), 1, &job(1, 100, 2), reclaim).unwrap_err();
        assert!(err.contains("expected Some(Priority)"), "{err}");
    }

    #[test]
    fn a_reclaim_at_equal_priority_names_the_preemptors_cohort() {
        const VISION: AccountId = AccountId(2);
        const SPEECH: AccountId = AccountId(3);
        const LAB: AccountId = AccountId(9);
        let member = NominalQuota {
            cohort: LAB,
            nominal: Quota::gpus(4),
            borrowing_limit: Quota::default(),
            lending_limit: Quota::default(),
        };
        let mut a = Audit::new(&[node(1, 8)], &[], &[(VISION, member), (SPEECH, member)], 4);
        let of = |id: u64, project: AccountId| JobSpec { user: ALICE, project, ..job(id, 10, 2) };
        a.start(0, &of(0, VISION), &Placement::one(on(1, &[0, 1]))).unwrap();
        a.preempt(0, &of(0, VISION), 1, &of(1, SPEECH), PreemptCause::Reclaim { cohort: LAB }).unwrap();
        let err = a.preempt(0, &of(0, VISION), 1, &of(1, SPEECH), PreemptCause::Priority).unwrap_err();
        assert!(err.contains("expected Some(Reclaim"), "{err}");
        let elsewhere = PreemptCause::Reclaim { cohort: AccountId(8) };
        assert!(a.preempt(0, &of(0, VISION), 1, &of(1, SPEECH), elsewhere).is_err());
    }
}
