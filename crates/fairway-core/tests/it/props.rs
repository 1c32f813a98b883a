//! Property tests: random event sequences on small clusters, under random limits (victims,
//! candidates, nodes scored, starts and preemptions per cycle), with driver restarts
//! (`Restore` and `RestoreHold` into a new scheduler). After every cycle the core's own
//! `check_invariants` and the outside checks of [`Oracle`] must hold, every one-replica
//! victim search must choose what a brute-force search over all sets chooses
//! (`search::brute_force_record` for one replica, `search::brute_force_wide` for gangs and
//! jobs over quota); and the same events fed to two schedulers give the same
//! decisions.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use fairway_core::packing::PackPolicy;
use fairway_core::*;

use crate::oracle::Oracle;

/// User accounts are `0..USERS`, projects `PROJECT_BASE..PROJECT_BASE + PROJECTS`.
const USERS: u32 = 3;
const PROJECT_BASE: u32 = 10;
const PROJECTS: u32 = 2;
/// Cohorts are `COHORT_BASE..COHORT_BASE + COHORTS`.
const COHORT_BASE: u32 = 20;
const COHORTS: u32 = 2;
const MODELS: u16 = 2;

#[derive(Clone, Debug)]
struct JobShape {
    priority: Priority,
    gpus: u32,
    replicas: u32,
    model: Option<u16>,
    cpu: u64,
    mem: u64,
    user: u32,
    project: u32,
    preemptible: bool,
    never: bool,
    grace_s: u64,
    ckpt_s: Option<u64>,
    max_runtime_s: Option<u64>,
    max_total_runtime_s: Option<u64>,
    min_run_s: u64,
    per_hour_max: Option<u32>,
    overrides_protection: bool,
    preemption_delay_s: u64,
    /// A share of one GPU in thousandths (then no whole GPU, one replica).
    share: Option<u32>,
    /// The container image it runs (of three), if any.
    image: Option<u32>,
}

#[derive(Clone, Debug)]
struct NodeShape {
    gpus: u32,
    model: u16,
    cpu: u64,
}

/// One step. `pick`s choose among what exists when the step runs (modulo its length).
#[derive(Clone, Debug)]
enum Op {
    Submit(JobShape),
    Cycle {
        dt_s: u64,
    },
    Exit {
        pick: usize,
        outcome: ExitOutcome,
    },
    Cancel {
        pick: usize,
    },
    Checkpoint {
        pick: usize,
    },
    AddNode(NodeShape),
    RemoveNode {
        pick: usize,
    },
    Drain {
        pick: usize,
    },
    Uncordon {
        pick: usize,
    },
    SetQuota {
        account: u32,
        gpus: Option<u32>,
        cpu: Option<u64>,
    },
    /// A project's place in a cohort, or (`None`) out of it.
    SetNominal {
        project: u32,
        member: Option<Member>,
    },
    /// The driver restarts: a new scheduler rebuilt from what the old one knew (`Restore`
    /// and `RestoreHold`, as the daemon and the Kubernetes controller rebuild).
    Restart,
    /// A node reports the images it holds (of three).
    Images {
        pick: usize,
        images: Vec<u32>,
    },
}

/// A project's place in a cohort, as generated: GPUs only, the lending limit at most the
/// nominal quota.
#[derive(Clone, Copy, Debug)]
struct Member {
    cohort: u32,
    gpus: u32,
    borrow: Option<u32>,
    lend: Option<u32>,
}

impl Member {
    fn nominal(self) -> NominalQuota {
        NominalQuota {
            cohort: AccountId(COHORT_BASE + self.cohort),
            nominal: Quota::gpus(self.gpus),
            borrowing_limit: Quota { gpus_max: self.borrow, ..Quota::default() },
            lending_limit: Quota { gpus_max: self.lend.map(|l| l.min(self.gpus)), ..Quota::default() },
        }
    }
}

fn member() -> impl Strategy<Value = Member> {
    (
        // Mostly one cohort, so that members meet.
        prop_oneof![3 => Just(0u32), 1 => 0..COHORTS],
        0..10u32,
        prop::option::weighted(0.4, 0..6u32),
        prop::option::weighted(0.4, 0..8u32),
    )
        .prop_map(|(cohort, gpus, borrow, lend)| Member { cohort, gpus, borrow, lend })
}

#[derive(Clone, Debug)]
struct Case {
    config: Config,
    nodes: Vec<NodeShape>,
    /// GPU caps set before anything else: `(account, gpus)`.
    quotas: Vec<(u32, u32)>,
    /// Fair-share weights, likewise: `(account, weight)`.
    weights: Vec<(u32, u32)>,
    /// Projects' places in cohorts, likewise: `(project, member)`.
    members: Vec<(u32, Member)>,
    ops: Vec<Op>,
}

fn node_shape() -> impl Strategy<Value = NodeShape> {
    (prop_oneof![1 => Just(2u32), 2 => Just(4), 2 => Just(8)], 0..MODELS, prop_oneof![Just(8_000u64), Just(64_000)])
        .prop_map(|(gpus, model, cpu)| NodeShape { gpus, model, cpu })
}

fn job_shape() -> impl Strategy<Value = JobShape> {
    (
        (
            prop::sample::select(vec![0, 10, 20, 30, 40]),
            prop_oneof![2 => Just(0u32), 8 => 1..=2u32, 4 => Just(4u32), 2 => Just(8u32), 1 => Just(16u32)],
            prop_oneof![7 => Just(1u32), 2 => Just(2u32), 1 => Just(3u32)],
            prop_oneof![4 => Just(None), 1 => (0..MODELS).prop_map(Some)],
            prop_oneof![Just(0u64), Just(1_000), Just(4_000)],
            prop_oneof![3 => Just(0u64), 1 => Just(1_000)],
        ),
        (
            0..USERS,
            0..PROJECTS,
            prop::bool::weighted(0.9),
            prop::bool::weighted(0.05),
            prop_oneof![Just(0u64), Just(10), Just(30)],
            // An interval of 0 is no hint, but the core accepts it as given.
            prop_oneof![12 => Just(None), 1 => Just(Some(0)), 4 => (1..40u64).prop_map(Some)],
            prop_oneof![4 => Just(None), 1 => (0..120u64).prop_map(Some)],
            prop_oneof![4 => Just(None), 1 => (0..200u64).prop_map(Some)],
        ),
        (
            prop_oneof![3 => Just(0u64), 1 => 1..30u64],
            prop_oneof![3 => Just(None), 1 => (1..3u32).prop_map(Some)],
            prop::bool::weighted(0.1),
            prop_oneof![3 => Just(0u64), 1 => 1..20u64],
            prop_oneof![3 => Just(None), 1 => prop::sample::select(vec![100u32, 250, 300, 500, 700, 999]).prop_map(Some)],
            prop_oneof![1 => Just(None), 1 => (0..3u32).prop_map(Some)],
        ),
    )
        .prop_map(
            |(
                (priority, gpus, replicas, model, cpu, mem),
                (user, project, preemptible, never, grace_s, ckpt_s, max_runtime_s, max_total_runtime_s),
                (min_run_s, per_hour_max, overrides_protection, preemption_delay_s, share, image),
            )| {
                JobShape {
                    priority,
                    gpus,
                    replicas,
                    model,
                    cpu,
                    mem,
                    user,
                    project: PROJECT_BASE + project,
                    preemptible,
                    never,
                    grace_s,
                    ckpt_s,
                    max_runtime_s,
                    max_total_runtime_s,
                    min_run_s,
                    per_hour_max,
                    overrides_protection,
                    preemption_delay_s,
                    share,
                    image,
                }
            },
        )
}

fn outcome() -> impl Strategy<Value = ExitOutcome> {
    prop_oneof![Just(ExitOutcome::Succeeded), Just(ExitOutcome::Failed), Just(ExitOutcome::Requeue)]
}

fn op() -> impl Strategy<Value = Op> {
    let pick = any::<usize>();
    prop_oneof![
        14 => job_shape().prop_map(Op::Submit),
        7 => (0..40u64).prop_map(|dt_s| Op::Cycle { dt_s }),
        5 => (pick, outcome()).prop_map(|(pick, outcome)| Op::Exit { pick, outcome }),
        1 => pick.prop_map(|pick| Op::Cancel { pick }),
        1 => pick.prop_map(|pick| Op::Checkpoint { pick }),
        2 => node_shape().prop_map(Op::AddNode),
        2 => pick.prop_map(|pick| Op::RemoveNode { pick }),
        1 => pick.prop_map(|pick| Op::Drain { pick }),
        1 => pick.prop_map(|pick| Op::Uncordon { pick }),
        1 => (
            prop_oneof![0..USERS, PROJECT_BASE..PROJECT_BASE + PROJECTS],
            prop::option::weighted(0.8, 0..10u32),
            prop::option::weighted(0.2, prop_oneof![Just(4_000u64), Just(16_000)]),
        )
            .prop_map(|(account, gpus, cpu)| Op::SetQuota { account, gpus, cpu }),
        1 => (PROJECT_BASE..PROJECT_BASE + PROJECTS, prop::option::weighted(0.8, member()))
            .prop_map(|(project, member)| Op::SetNominal { project, member }),
        1 => Just(Op::Restart),
        1 => (pick, prop::collection::vec(0..3u32, 0..=3)).prop_map(|(pick, images)| Op::Images { pick, images }),
    ]
}

fn config() -> impl Strategy<Value = Config> {
    (
        prop_oneof![1 => Just(Policy::fifo()), 1 => Just(Policy::priority()), 4 => Just(Policy::fairway())],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![3 => Just(32u32), 1 => 1..4u32],
        prop_oneof![3 => Just(64u32), 1 => 1..3u32],
        (
            prop_oneof![3 => Just(Limits::default().victim_candidates_max), 1 => 1..4u32],
            prop_oneof![3 => Just(Limits::default().candidate_nodes_scored_max), 1 => 1..3u32],
            prop_oneof![3 => Just(Limits::default().starts_per_cycle_max), 1 => 1..3u32],
            prop_oneof![3 => Just(Limits::default().victims_per_cycle_max), 1 => 1..4u32],
            prop_oneof![2 => Just(None), 1 => (0..3u64).prop_map(|h| Some(FairSharing { half_life_ms: h * 60_000 }))],
            prop_oneof![
                2 => Just(None),
                1 => (1..3u32, 1..60u64)
                    .prop_map(|(count_max, s)| Some((Reservations { count_max }, s * 1000))),
            ],
            prop_oneof![3 => Just(0u32), 1 => Just(4u32)],
            prop_oneof![
                2 => Just(Some(PackPolicy::Fairway)),
                1 => Just(None),
                1 => prop::sample::select(PackPolicy::ALL.to_vec()).prop_map(Some)
            ],
            // Few steps, so that wide searches run out of them and take the better of the
            // set found so far and the fallback's.
            prop_oneof![3 => Just(Limits::default().wide_search_steps_max), 1 => 0..6u32],
        ),
    )
        .prop_map(
            |(
                mut policy,
                flip_backfill,
                spread,
                victims_max,
                attempts_max,
                (
                    candidates,
                    scored,
                    starts,
                    cycle_victims,
                    fair_share,
                    reservations,
                    history_runs_max,
                    packing,
                    wide_steps,
                ),
            )| {
                if flip_backfill {
                    policy.backfill = !policy.backfill;
                }
                if spread {
                    policy.scoring = ScoringPolicy::Spread;
                }
                policy.fair_share = fair_share;
                policy.packing = packing;
                policy.reservations = reservations.map(|(r, _)| r);
                // The oracle's expected ends follow rules 1, 2 and 4 of `estimate.rs`; with
                // a history (rule 3, which has its own tests) it checks reservations only
                // while every running job has a limit.
                policy.estimates = RuntimeEstimates {
                    default_runtime_ms: reservations.map_or(3_600_000, |(_, ms)| ms),
                    history_runs_max,
                };
                let limits = Limits {
                    victims_per_preemption_max: victims_max,
                    preemption_attempts_per_cycle_max: attempts_max,
                    victim_candidates_max: candidates,
                    candidate_nodes_scored_max: scored,
                    starts_per_cycle_max: starts,
                    victims_per_cycle_max: cycle_victims,
                    wide_search_steps_max: wide_steps,
                    ..Limits::default()
                };
                Config { policy, limits }
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    let quota = (prop_oneof![0..USERS, PROJECT_BASE..PROJECT_BASE + PROJECTS], 2..12u32);
    (
        config(),
        prop::collection::vec(node_shape(), 1..=3),
        prop::collection::vec(quota, 0..=1),
        prop::collection::vec((prop_oneof![0..USERS, PROJECT_BASE..PROJECT_BASE + PROJECTS], 1..4u32), 0..=2),
        prop_oneof![
            1 => Just(Vec::new()),
            1 => prop::collection::vec((PROJECT_BASE..PROJECT_BASE + PROJECTS, member()), 1..=2),
        ],
        prop::collection::vec(op(), 10..=40),
    )
        .prop_map(|(config, nodes, quotas, weights, members, ops)| Case {
            config,
            nodes,
            quotas,
            weights,
            members,
            ops,
        })
}

/// Drives one or two schedulers through a case and checks every cycle.
struct Driver {
    s: Scheduler,
    /// Fed the same events; it runs its cycles through `cycle_into` with one reused buffer,
    /// so the twins also show that the two entry points decide alike.
    twin: Option<Scheduler>,
    twin_out: CycleOutcome,
    oracle: Oracle,
    now: Time,
    next_job: u64,
    next_node: u32,
    jobs: Vec<JobId>,
    nodes: Vec<NodeId>,
    /// What a restart needs and the scheduler does not say: each job's spec and submit time,
    /// the nodes as added and which are drained, the quotas as set.
    specs: BTreeMap<JobId, (JobSpec, Time)>,
    node_specs: BTreeMap<NodeId, NodeSpec>,
    drained: BTreeSet<NodeId>,
    quotas: BTreeMap<AccountId, Quota>,
    weights: BTreeMap<AccountId, u32>,
    nominals: BTreeMap<AccountId, NominalQuota>,
    /// The events so far as a scenario script (see `dsl.rs`), printed when a check fails.
    script: Vec<String>,
}

impl Driver {
    fn new(config: &Config, twin: bool) -> Driver {
        let mut s = Scheduler::new(config.clone());
        s.record_searches();
        Driver {
            s,
            twin: twin.then(|| Scheduler::new(config.clone())),
            twin_out: CycleOutcome::default(),
            oracle: Oracle::new(),
            now: Time::ZERO,
            next_job: 0,
            next_node: 0,
            jobs: Vec::new(),
            nodes: Vec::new(),
            specs: BTreeMap::new(),
            node_specs: BTreeMap::new(),
            drained: BTreeSet::new(),
            quotas: BTreeMap::new(),
            weights: BTreeMap::new(),
            nominals: BTreeMap::new(),
            script: vec![script_config(config)],
        }
    }

    fn apply(&mut self, event: Event) -> Result<(), String> {
        let line = script_line(&event, self.now);
        self.script.push(line);
        match &event {
            Event::Submit(spec) => {
                self.specs.insert(spec.id, (spec.clone(), self.now));
            }
            Event::NodeAdded(n) => {
                self.node_specs.insert(n.id, n.clone());
                self.drained.remove(&n.id);
            }
            Event::NodeRemoved(n) => {
                self.node_specs.remove(n);
                self.drained.remove(n);
            }
            Event::NodeDrained(n) => {
                self.drained.insert(*n);
            }
            Event::NodeUncordoned(n) => {
                self.drained.remove(n);
            }
            Event::SetFairShareWeight { account, weight } => {
                self.weights.insert(*account, *weight);
            }
            Event::SetQuota { account, quota } => match quota {
                Some(q) => {
                    self.quotas.insert(*account, *q);
                }
                None => {
                    self.quotas.remove(account);
                }
            },
            Event::SetNominalQuota { project, nominal } => match nominal {
                Some(n) => {
                    self.nominals.insert(*project, *n);
                }
                None => {
                    self.nominals.remove(project);
                }
            },
            _ => {}
        }
        let result = self.s.apply(event.clone(), self.now);
        if let Some(t) = &mut self.twin {
            let twin_result = t.apply(event.clone(), self.now);
            if twin_result != result {
                return Err(format!("twins disagree on {event:?}: {result:?} vs {twin_result:?}"));
            }
        }
        result.map_err(|e| format!("{event:?} refused: {e}"))?;
        self.oracle.applied(&self.s, &event, self.now)
    }

    fn add_node(&mut self, n: &NodeShape) -> Result<(), String> {
        let id = NodeId(self.next_node);
        self.next_node += 1;
        self.nodes.push(id);
        self.apply(Event::NodeAdded(NodeSpec {
            id,
            gpu_model: GpuModel(n.model),
            capacity: Resources::new(n.gpus, n.cpu, 256_000),
        }))
    }

    /// Jobs holding GPUs (running, or asked to stop and not gone yet).
    fn placed(&self) -> Vec<JobId> {
        self.jobs
            .iter()
            .copied()
            .filter(|id| {
                matches!(
                    self.s.job_status(*id),
                    Some(JobStatus::Running { .. } | JobStatus::Preempting { .. } | JobStatus::Stopping { .. })
                )
            })
            .collect()
    }

    fn known(&self) -> Vec<JobId> {
        self.jobs.iter().copied().filter(|id| self.s.job_status(*id).is_some()).collect()
    }

    fn cycle(&mut self) -> Result<(), String> {
        self.script.push(format!("cycle at={}ms", self.now.millis()));
        self.oracle.before_cycle(&self.s, self.now)?;
        // The core asserts its invariants in debug builds: a panic becomes a failure that
        // prints the script.
        let now = self.now;
        let s = &mut self.s;
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.cycle(now))).map_err(|panic| {
            let text =
                panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            format!("the core panicked: {}", text.unwrap_or_default())
        })?;
        // The oracle asks the core's read-only queries (the forecast among them), which
        // assert in debug builds too.
        let (oracle, s) = (&mut self.oracle, &self.s);
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| oracle.after_cycle(s, &out))).map_err(|panic| {
            let text =
                panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            format!("the core panicked in a query: {}", text.unwrap_or_default())
        })??;
        // Every one-replica victim search of the cycle against the brute-force reference.
        for record in self.s.take_search_records() {
            let reference = crate::search::brute_force_record(&record);
            if record.chosen != reference {
                return Err(format!(
                    "victim search for {} at {}: the core chose {:?}, the rules rank first {:?}\n{record:#?}",
                    record.preemptor, self.now, record.chosen, reference
                ));
            }
        }
        // Every gang's and quota-bound job's search against its brute-force reference.
        for record in self.s.take_wide_search_records() {
            let small = record.search.candidates.len() <= 16;
            if record.exactness != fairway_core::search::Exactness::Exact {
                let steps_bound_lowered = record.search.steps_max < Limits::default().wide_search_steps_max;
                if small && !steps_bound_lowered {
                    return Err(format!("the search for {} ran out of steps on a small case", record.preemptor));
                }
                if small {
                    check_taken_past_the_step_bound(&record).map_err(|e| {
                        format!("victim search for {} at {} out of steps: {e}\n{record:#?}", record.preemptor, self.now)
                    })?;
                }
                continue;
            }
            if record.taken != record.chosen {
                return Err(format!(
                    "victim search for {} at {}: the search chose {:?}, the core took {:?}",
                    record.preemptor, self.now, record.chosen, record.taken
                ));
            }
            if !small {
                continue;
            }
            let reference = crate::search::brute_force_wide(&record.search);
            if record.chosen != reference {
                return Err(format!(
                    "victim search for {} at {}: the core chose {:?}, the rules rank first {:?}\n{record:#?}",
                    record.preemptor, self.now, record.chosen, reference
                ));
            }
        }
        if let Some(t) = &mut self.twin {
            t.cycle_into(self.now, &mut self.twin_out);
            let twin_out = &self.twin_out;
            if *twin_out != out {
                return Err(format!("twins decided differently at {}:\n{out:?}\n{twin_out:?}", self.now));
            }
            for &id in &self.jobs {
                if self.s.job_status(id) != t.job_status(id) {
                    return Err(format!("twins disagree on the state of {id}"));
                }
            }
            if self.s.counters() != t.counters() {
                return Err("twins disagree on counters".into());
            }
        }
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::Submit(j) => {
                let id = JobId(self.next_job);
                self.next_job += 1;
                self.jobs.push(id);
                let per_replica = match j.share {
                    Some(milli) => Resources::share(milli, j.cpu, j.mem),
                    None => Resources::new(j.gpus, j.cpu, j.mem),
                };
                let mut spec = JobSpec::new(id, j.priority, per_replica);
                spec.replicas = if j.share.is_some() { 1 } else { j.replicas };
                spec.gpu_model = j.model.map(GpuModel);
                spec.image = j.image.map(ImageId);
                spec.user = AccountId(j.user);
                spec.project = AccountId(j.project);
                spec.preemptible = j.preemptible;
                if j.never {
                    spec.preemption_policy = PreemptionPolicy::Never;
                }
                spec.grace_ms = j.grace_s * 1000;
                spec.checkpoint_interval_ms = j.ckpt_s.map(|s| s * 1000);
                spec.max_runtime_ms = j.max_runtime_s.map(|s| s * 1000);
                spec.max_total_runtime_ms = j.max_total_runtime_s.map(|s| s * 1000);
                spec.min_run_before_preemption_ms = j.min_run_s * 1000;
                spec.preemptions_per_hour_max = j.per_hour_max;
                spec.overrides_protection = j.overrides_protection;
                spec.preemption_delay_ms = j.preemption_delay_s * 1000;
                self.apply(Event::Submit(spec))
            }
            Op::Cycle { dt_s } => {
                self.now = self.now.plus_ms(dt_s * 1000);
                self.cycle()
            }
            Op::Exit { pick, outcome } => {
                // Half the time, one of the jobs asked to stop: they are the ones expected to exit.
                let leaving: Vec<JobId> = self
                    .placed()
                    .into_iter()
                    .filter(|id| {
                        matches!(
                            self.s.job_status(*id),
                            Some(JobStatus::Preempting { .. } | JobStatus::Stopping { .. })
                        )
                    })
                    .collect();
                let placed = if pick % 2 == 0 && !leaving.is_empty() { leaving } else { self.placed() };
                if placed.is_empty() {
                    return Ok(());
                }
                let job = placed[(pick / 2) % placed.len()];
                self.apply(Event::Exited { job, outcome: *outcome })
            }
            Op::Cancel { pick } => {
                let known = self.known();
                if known.is_empty() {
                    return Ok(());
                }
                self.apply(Event::Cancel(known[pick % known.len()]))
            }
            Op::Checkpoint { pick } => {
                let placed = self.placed();
                if placed.is_empty() {
                    return Ok(());
                }
                let at = self.now;
                self.apply(Event::CheckpointReported { job: placed[pick % placed.len()], at })
            }
            Op::AddNode(n) => self.add_node(n),
            Op::RemoveNode { pick } => {
                if self.nodes.is_empty() {
                    return Ok(());
                }
                let node = self.nodes.remove(pick % self.nodes.len());
                self.apply(Event::NodeRemoved(node))
            }
            Op::Images { pick, images } => {
                if self.nodes.is_empty() {
                    return Ok(());
                }
                let node = self.nodes[pick % self.nodes.len()];
                self.apply(Event::NodeImages { node, images: images.iter().copied().map(ImageId).collect() })
            }
            Op::Drain { pick } | Op::Uncordon { pick } => {
                if self.nodes.is_empty() {
                    return Ok(());
                }
                let node = self.nodes[pick % self.nodes.len()];
                let event =
                    if matches!(op, Op::Drain { .. }) { Event::NodeDrained(node) } else { Event::NodeUncordoned(node) };
                self.apply(event)
            }
            Op::Restart => self.restart(),
            Op::SetQuota { account, gpus, cpu } => {
                let quota = (gpus.is_some() || cpu.is_some()).then_some(Quota {
                    gpus_max: *gpus,
                    cpu_millis_max: *cpu,
                    memory_mib_max: None,
                });
                self.apply(Event::SetQuota { account: AccountId(*account), quota })
            }
            Op::SetNominal { project, member } => {
                let nominal = member.map(Member::nominal);
                self.apply(Event::SetNominalQuota { project: AccountId(*project), nominal })
            }
        }
    }

    /// A new scheduler (and twin, and oracle) fed what the old one knew: nodes, drains,
    /// quotas, every job where it was (running, on its way out, or queued at its original
    /// place), then the holds of preemptors. The failure script starts again here, so that
    /// it stays a scenario that runs as written.
    fn restart(&mut self) -> Result<(), String> {
        let config = self.s.config().clone();
        let old = std::mem::replace(&mut self.s, Scheduler::new(config));
        self.s.record_searches();
        if let Some(t) = &mut self.twin {
            *t = Scheduler::new(old.config().clone());
        }
        // The driver remembers when each job was chosen as a victim (rule 1's hourly cap
        // counts them across the restart), and so does the new oracle.
        let history = self.oracle.preemption_history();
        self.oracle = Oracle::with_preemption_history(history.clone());
        self.script = vec![script_config(old.config())];
        let nodes: Vec<NodeSpec> = self.node_specs.values().cloned().collect();
        let drained: Vec<NodeId> = self.drained.iter().copied().collect();
        let quotas: Vec<(AccountId, Quota)> = self.quotas.iter().map(|(a, q)| (*a, *q)).collect();
        for n in nodes {
            self.apply(Event::NodeAdded(n))?;
        }
        for n in drained {
            self.apply(Event::NodeDrained(n))?;
        }
        for (account, quota) in quotas {
            self.apply(Event::SetQuota { account, quota: Some(quota) })?;
        }
        let weights: Vec<(AccountId, u32)> = self.weights.iter().map(|(a, w)| (*a, *w)).collect();
        for (account, weight) in weights {
            self.apply(Event::SetFairShareWeight { account, weight })?;
        }
        let nominals: Vec<(AccountId, NominalQuota)> = self.nominals.iter().map(|(a, n)| (*a, *n)).collect();
        for (project, nominal) in nominals {
            self.apply(Event::SetNominalQuota { project, nominal: Some(nominal) })?;
        }
        let mut holds = Vec::new();
        let mut restored = Vec::new();
        for &id in &self.jobs {
            let Some(status) = old.job_status(id) else { continue };
            let (spec, submitted_at) = self.specs[&id].clone();
            let running = match status {
                JobStatus::Pending { reserved, .. } => {
                    if let Some(p) = reserved {
                        holds.push((id, p.clone()));
                    }
                    None
                }
                JobStatus::Running { placement, started_at } => {
                    Some(RestoredRun { placement: placement.clone(), started_at, stopping: None })
                }
                JobStatus::Preempting { placement, preemptor, deadline } => Some(RestoredRun {
                    placement: placement.clone(),
                    started_at: self.now,
                    stopping: Some(RestoredStop::Preempted { preemptor, deadline }),
                }),
                JobStatus::Stopping { placement, cause } => Some(RestoredRun {
                    placement: placement.clone(),
                    started_at: self.now,
                    stopping: Some(RestoredStop::Stopped(cause)),
                }),
            };
            restored.push(RestoredJob {
                spec,
                submitted_at,
                runtime_done_ms: 0,
                preemptions: 0,
                preempted_at: history.get(&id).cloned().unwrap_or_default(),
                last_checkpoint: None,
                running,
            });
        }
        let victims_of = |preemptor: JobId| -> Vec<JobId> {
            self.jobs
                .iter()
                .copied()
                .filter(|v| matches!(old.job_status(*v), Some(JobStatus::Preempting { preemptor: p, .. }) if p == preemptor))
                .collect()
        };
        let holds: Vec<RestoredHold> = holds
            .into_iter()
            .map(|(preemptor, placement)| RestoredHold { preemptor, placement, victims: victims_of(preemptor) })
            .collect();
        // Queued jobs first: a victim's record names its preemptor, which must be known.
        restored.sort_by_key(|job| job.running.is_some());
        for job in restored {
            self.apply(Event::Restore(job))?;
        }
        for hold in holds {
            self.apply(Event::RestoreHold(hold))?;
        }
        // What each account held lately, as a driver saves it: the new core's shares are
        // the old one's, up to the thousandth of a GPU the saved figures are rounded to.
        for (account, recent) in old.recent_usage(self.now) {
            self.apply(Event::RestoreRecentUsage { account, recent, as_of: self.now })?;
        }
        // Half a unit of rounding in each resource, over its capacity (a weight only divides).
        let capacity = self.node_specs.values().fold(Resources::ZERO, |sum, n| sum.plus(n.capacity));
        let rounding = [capacity.gpus as f64 * 1000.0, capacity.cpu_millis as f64, capacity.memory_mib as f64]
            .into_iter()
            .filter(|c| *c > 0.0)
            .map(|c| 0.5 / c)
            .fold(0.0, f64::max);
        for (account, _) in old.recent_usage(self.now) {
            let (before, after) = (old.fair_share(account, self.now), self.s.fair_share(account, self.now));
            let close = match (before, after) {
                (Some(b), Some(a)) => (a - b).abs() <= rounding + 1e-9,
                (b, a) => b == a,
            };
            if !close {
                return Err(format!("after a restart {account}'s share is {after:?}, before {before:?}"));
            }
        }
        Ok(())
    }

    fn run(case: &Case, twin: bool) -> Result<(), String> {
        let mut d = Driver::new(&case.config, twin);
        for n in &case.nodes {
            d.add_node(n)?;
        }
        for &(account, gpus) in &case.quotas {
            d.apply(Event::SetQuota { account: AccountId(account), quota: Some(Quota::gpus(gpus)) })?;
        }
        for &(account, weight) in &case.weights {
            d.apply(Event::SetFairShareWeight { account: AccountId(account), weight })?;
        }
        for &(project, member) in &case.members {
            d.apply(Event::SetNominalQuota { project: AccountId(project), nominal: Some(member.nominal()) })?;
        }
        let mut result = Ok(());
        for (i, op) in case.ops.iter().enumerate() {
            result = d.step(op).map_err(|e| format!("step {i} ({op:?}) at {}: {e}", d.now));
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            d.now = d.now.plus_ms(1000);
            result = d.cycle().map_err(|e| format!("final cycle: {e}"));
        }
        result.map_err(|e| format!("{e}\nas a scenario (tests/scenarios/*.txt):\n{}\n", d.script.join("\n")))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Invariants and outside checks hold after every cycle of any event sequence.
    #[test]
    fn random_events_keep_invariants(case in case()) {
        if let Err(e) = Driver::run(&case, false) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// `case()` with fair sharing and reservations both on (few of its cases have both): shares
/// move as jobs start and end, and with them which jobs a reservation binds.
fn fair_reservations_case() -> impl Strategy<Value = Case> {
    (case(), prop::collection::vec(op(), 0..=40), 1..3u32, 1..60u64, 0..3u64).prop_map(
        |(mut case, more, count_max, runtime_s, half_life_min)| {
            case.ops.extend(more);
            let policy = &mut case.config.policy;
            policy.backfill = true;
            policy.fair_share = Some(FairSharing { half_life_ms: half_life_min * 60_000 });
            policy.reservations = Some(Reservations { count_max });
            policy.estimates.default_runtime_ms = runtime_s * 1000;
            // Two tiers, so that tenants meet inside one more often than across them.
            for op in &mut case.ops {
                if let Op::Submit(shape) = op {
                    shape.priority = if shape.priority >= 30 { 20 } else { 10 };
                }
            }
            case
        },
    )
}

/// `case()` with three projects, all members of one cohort, jobs of two tiers: a member within
/// its nominal quota then reclaims from two borrowers at once, one of them perhaps started
/// in the same cycle (preemption rule 8 beside another project's reclaim, scenario 181),
/// which `case()`'s two projects cannot make. Its own test, so that `case()`'s persisted
/// failures keep meaning what they did.
fn three_members_case() -> impl Strategy<Value = Case> {
    let place = (0..6u32, prop::option::weighted(0.3, 0..4u32), prop::option::weighted(0.3, 0..4u32));
    (case(), prop::collection::vec(0..3u32, 40), prop::collection::vec(place, 3)).prop_map(
        |(mut case, projects, places)| {
            case.members = places
                .iter()
                .enumerate()
                .map(|(i, &(gpus, borrow, lend))| (PROJECT_BASE + i as u32, Member { cohort: 0, gpus, borrow, lend }))
                .collect();
            let submits = case.ops.iter_mut().filter_map(|op| match op {
                Op::Submit(shape) => Some(shape),
                _ => None,
            });
            for (shape, &project) in submits.zip(projects.iter().cycle()) {
                shape.project = PROJECT_BASE + project;
                shape.priority = if shape.priority >= 30 { 20 } else { 10 };
            }
            case
        },
    )
}

/// `case()` with its first node larger than the packing policies model (more than 16 GPUs:
/// the core's scoring places there), so that some job fits only on it.
fn large_node_case() -> impl Strategy<Value = Case> {
    (case(), prop_oneof![Just(17u32), Just(24), Just(32)]).prop_map(|(mut case, gpus)| {
        case.nodes[0].gpus = gpus;
        case
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Invariants and outside checks hold with a node of more GPUs than packing models.
    #[test]
    fn a_node_beyond_packing_keeps_invariants(case in large_node_case()) {
        if let Err(e) = Driver::run(&case, false) {
            prop_assert!(false, "{}", e);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Invariants and outside checks hold in a cohort of three members.
    #[test]
    fn three_cohort_members_keep_invariants(case in three_members_case()) {
        if let Err(e) = Driver::run(&case, false) {
            prop_assert!(false, "{}", e);
        }
    }

    /// Invariants and outside checks hold under fair sharing with reservations.
    #[test]
    fn fair_sharing_with_reservations_keeps_invariants(case in fair_reservations_case()) {
        if let Err(e) = Driver::run(&case, false) {
            prop_assert!(false, "{}", e);
        }
    }

    /// The same events applied to two schedulers yield identical decisions and states.
    #[test]
    fn same_events_same_decisions(case in case()) {
        if let Err(e) = Driver::run(&case, true) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// The config as a scenario `config` line.
fn script_config(c: &Config) -> String {
    let order = match c.policy.order {
        QueueOrder::Fifo => "fifo",
        QueueOrder::Priority => "priority",
        QueueOrder::PriorityShortestFirst => "priority-shortest-first",
    };
    let on = |b: bool| if b { "on" } else { "off" };
    format!(
        "config order={order} preemption={} backfill={} scoring={} victims-max={} attempts-max={} \
         candidates-max={} starts-max={} nodes-scored-max={} cycle-victims-max={} fair-half-life={}{} \
         default-runtime={}ms history={}",
        on(c.policy.preemption),
        on(c.policy.backfill),
        c.policy.scoring.name(),
        c.limits.victims_per_preemption_max,
        c.limits.preemption_attempts_per_cycle_max,
        c.limits.victim_candidates_max,
        c.limits.starts_per_cycle_max,
        c.limits.candidate_nodes_scored_max,
        c.limits.victims_per_cycle_max,
        c.policy.fair_share.map_or("off".to_string(), |f| format!("{}ms", f.half_life_ms)),
        c.policy.reservations.map_or(String::new(), |r| format!(" reservations={}", r.count_max)),
        c.policy.estimates.default_runtime_ms,
        c.policy.estimates.history_runs_max,
    )
}

/// An event as a scenario line. Names: `j<id>`, `n<id>`, `m<model>`, accounts `u<id>` for
/// users and `p<id>` for projects.
fn script_line(event: &Event, now: Time) -> String {
    let at = format!("at={}ms", now.millis());
    let acct = |a: AccountId| if a.0 >= PROJECT_BASE { format!("p{}", a.0) } else { format!("u{}", a.0) };
    match event {
        Event::SetNominalQuota { project, nominal: None } => format!("member {} none {at}", acct(*project)),
        Event::SetNominalQuota { project, nominal: Some(n) } => {
            let mut line = format!("member {} {at} cohort=c{}", acct(*project), n.cohort.0);
            if let Some(g) = n.nominal.gpus_max {
                line += &format!(" gpus={g}");
            }
            if let Some(b) = n.borrowing_limit.gpus_max {
                line += &format!(" borrow={b}");
            }
            if let Some(l) = n.lending_limit.gpus_max {
                line += &format!(" lend={l}");
            }
            line
        }
        Event::RestoreHold(h) => {
            let victims: Vec<String> = h.victims.iter().map(|v| format!("j{}", v.0)).collect();
            format!("restore-hold j{} {} victims={}", h.preemptor.0, placement_text(&h.placement), victims.join(","))
        }
        Event::Restore(r) => {
            let mut line = spec_line("restore", &r.spec, now);
            line += &format!(" submitted={}ms", r.submitted_at.millis());
            if !r.preempted_at.is_empty() {
                let times: Vec<String> = r.preempted_at.iter().map(|t| format!("{}ms", t.millis())).collect();
                line += &format!(" preempted={}", times.join(","));
            }
            if let Some(run) = &r.running {
                line += &format!(" running={} started={}ms", placement_text(&run.placement), run.started_at.millis());
                match run.stopping {
                    None => {}
                    Some(RestoredStop::Preempted { preemptor, deadline }) => {
                        line += &format!(" stopping=j{} deadline={}ms", preemptor.0, deadline.millis());
                    }
                    Some(RestoredStop::Stopped(cause)) => {
                        let cause = match cause {
                            StopCause::Cancelled => "cancelled",
                            StopCause::RuntimeLimit => "runtime-limit",
                        };
                        line += &format!(" stopping={cause} deadline=0ms");
                    }
                }
            }
            line
        }
        Event::Submit(j) => spec_line("submit", j, now),

        Event::Cancel(j) => format!("cancel j{} {at}", j.0),
        Event::Exited { job, outcome } => {
            let outcome = match outcome {
                ExitOutcome::Succeeded => "succeeded",
                ExitOutcome::Failed => "failed",
                ExitOutcome::Requeue => "requeue",
            };
            format!("exit j{} {at} outcome={outcome}", job.0)
        }
        Event::CheckpointReported { job, .. } => format!("checkpoint j{} {at}", job.0),
        Event::NodeAdded(n) => format!(
            "node add n{} {at} gpus={} model=m{} cpu={} mem={}",
            n.id.0, n.capacity.gpus, n.gpu_model.0, n.capacity.cpu_millis, n.capacity.memory_mib
        ),
        Event::NodeRemoved(n) => format!("node remove n{} {at}", n.0),
        Event::NodeDrained(n) => format!("node drain n{} {at}", n.0),
        Event::NodeUncordoned(n) => format!("node uncordon n{} {at}", n.0),
        Event::NodeImages { node, images } => {
            let list: Vec<String> = images.iter().map(|i| format!("i{}", i.0)).collect();
            format!("images n{} {} {at}", node.0, list.join(","))
        }
        Event::SetQuota { account, quota: None } => format!("quota {} none {at}", acct(*account)),
        Event::SetFairShareWeight { account, weight } => format!("weight {} {weight}", acct(*account)),
        Event::RestoreRecentUsage { account, recent, as_of } => format!(
            "recent {} gpu-milli={} cpu={} mem={} as-of={}ms",
            acct(*account),
            recent.gpu_milli,
            recent.cpu_millis,
            recent.memory_mib,
            as_of.millis()
        ),
        Event::SetQuota { account, quota: Some(q) } => {
            let mut line = format!("quota {} {at}", acct(*account));
            if let Some(g) = q.gpus_max {
                line += &format!(" gpus={g}");
            }
            if let Some(c) = q.cpu_millis_max {
                line += &format!(" cpu={c}");
            }
            if let Some(m) = q.memory_mib_max {
                line += &format!(" mem={m}");
            }
            line
        }
    }
}

/// A job's spec as `submit`/`restore` keys (see `dsl.rs`).
fn spec_line(verb: &str, j: &JobSpec, now: Time) -> String {
    let acct = |a: AccountId| if a.0 >= PROJECT_BASE { format!("p{}", a.0) } else { format!("u{}", a.0) };
    let mut line = format!(
        "{verb} j{id} id={id} at={}ms prio={} gpus={} cpu={} mem={} replicas={} user={} project={} grace={}ms",
        now.millis(),
        j.priority,
        j.per_replica.gpus,
        j.per_replica.cpu_millis,
        j.per_replica.memory_mib,
        j.replicas,
        acct(j.user),
        acct(j.project),
        j.grace_ms,
        id = j.id.0,
    );
    if let Some(m) = j.gpu_model {
        line += &format!(" model=m{}", m.0);
    }
    if j.per_replica.gpu_milli > 0 {
        line += &format!(" share={}", j.per_replica.gpu_milli);
    }
    if let Some(i) = j.image {
        line += &format!(" image=i{}", i.0);
    }
    if !j.preemptible {
        line += " preemptible=no";
    }
    if j.preemption_policy == PreemptionPolicy::Never {
        line += " policy=never";
    }
    if let Some(c) = j.checkpoint_interval_ms {
        line += &format!(" ckpt={c}ms");
    }
    if let Some(r) = j.max_runtime_ms {
        line += &format!(" max-runtime={r}ms");
    }
    if let Some(r) = j.max_total_runtime_ms {
        line += &format!(" max-total-runtime={r}ms");
    }
    if j.min_run_before_preemption_ms > 0 {
        line += &format!(" min-run={}ms", j.min_run_before_preemption_ms);
    }
    if j.overrides_protection {
        line += " overrides-protection=yes";
    }
    if let Some(n) = j.preemptions_per_hour_max {
        line += &format!(" preemptions-per-hour={n}");
    }
    if j.preemption_delay_ms > 0 {
        line += &format!(" preemption-delay={}ms", j.preemption_delay_ms);
    }
    line
}

/// `n1:0,1+n2:2,3`, as `dsl.rs` reads placements.
fn placement_text(p: &Placement) -> String {
    let replicas: Vec<String> = p
        .replicas()
        .iter()
        .map(|r| {
            let gpus: Vec<String> = r.gpus.iter().map(|g| g.to_string()).collect();
            format!("n{}:{}", r.node.0, gpus.join(","))
        })
        .collect();
    replicas.join("+")
}

/// A wide search that ran out of steps: if it had found a set, the core takes one; what it
/// takes makes room by the brute force's own test, stays within the victim bound, and is
/// minimal (without any one of its victims it no longer makes room).
fn check_taken_past_the_step_bound(record: &fairway_core::search::WideSearchRecord) -> Result<(), String> {
    use crate::search::wide_set_makes_room;
    let Some(taken) = &record.taken else {
        return match &record.chosen {
            Some(set) => Err(format!("the search found {set:?} but the core took no set")),
            None => Ok(()),
        };
    };
    if taken.len() > record.search.victims_max {
        return Err(format!("{taken:?} is over the victim bound"));
    }
    if !wide_set_makes_room(&record.search, taken) {
        return Err(format!("{taken:?} does not make room"));
    }
    for i in 0..taken.len() {
        let mut fewer = taken.clone();
        let dropped = fewer.remove(i);
        if wide_set_makes_room(&record.search, &fewer) {
            return Err(format!("{taken:?} is not minimal: without {dropped} it still makes room"));
        }
    }
    Ok(())
}
