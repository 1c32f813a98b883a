//! Reservations learnt from one computation to the next are the reservations computed from
//! nothing, on clusters larger than the property test's (one to three nodes): there a
//! reservation rarely outlives a change to a node that does not host it by its time, which
//! is when a computation is kept and the node's steps are read only at the next one.

use std::collections::BTreeMap;

use fairway_core::*;

/// A small generator of its own: the run must be the same on every machine.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}

/// One random run: 12 nodes of 8 GPUs, one-GPU jobs to whole-node gangs at three
/// priorities, run-time limits or not, exits before their expected end or after it, and
/// preemption on; on odd seeds, fair sharing between three projects of two users each
/// (holders then move in rank as shares change, and the plan is put back in order). Before
/// every cycle, `check_kept_plan` compares each reservation computed from what was learnt
/// with one computed from nothing.
fn run(seed: u64) -> Result<usize, String> {
    let mut rng = Lcg(seed);
    let mut config = Config::default();
    config.policy.reservations = Some(Reservations { count_max: 1 + (seed % 3) as u32 });
    config.policy.estimates.default_runtime_ms = 3_600_000;
    let fair = seed % 2 == 1;
    config.policy.fair_share = fair.then_some(FairSharing { half_life_ms: 1_800_000 });
    let mut s = Scheduler::new(config);
    for id in 0..12 {
        let spec = NodeSpec { id: NodeId(id), gpu_model: GpuModel(0), capacity: Resources::new(8, 64_000, 512_000) };
        s.apply(Event::NodeAdded(spec), Time(0)).map_err(|e| e.to_string())?;
    }
    // Placed jobs and when the driver ends them (preempted and stopped ones as soon as
    // their grace allows).
    let mut ends: BTreeMap<JobId, Time> = BTreeMap::new();
    let (mut now, mut next_job, mut reserved_cycles) = (Time(0), 0u64, 0usize);
    for _ in 0..300 {
        for _ in 0..rng.below(4) {
            let (gpus, replicas) = match rng.below(10) {
                0..=3 => (1, 1),
                4 | 5 => (2, 1),
                6 => (4, 1),
                7 => (8, 1),
                _ => (8, 2 + rng.below(3) as u32),
            };
            let mut spec = JobSpec::new(JobId(next_job), [0, 10, 20][rng.below(3) as usize], Resources::gpus(gpus));
            spec.replicas = replicas;
            spec.max_runtime_ms = (rng.below(3) > 0).then(|| 600_000 + rng.below(20) * 600_000);
            if fair {
                spec.project = AccountId(1 + rng.below(3) as u32);
                spec.user = AccountId(10 * spec.project.0 + rng.below(2) as u32);
            }
            next_job += 1;
            s.apply(Event::Submit(spec), now).map_err(|e| e.to_string())?;
        }
        let due: Vec<JobId> = ends.iter().filter(|(_, at)| **at <= now).map(|(id, _)| *id).collect();
        for job in due {
            ends.remove(&job);
            s.apply(Event::Exited { job, outcome: ExitOutcome::Requeue }, now).map_err(|e| e.to_string())?;
        }
        s.check_kept_plan(now).map_err(|e| format!("seed {seed}: {e}"))?;
        let out = s.cycle(now);
        for d in &out.decisions {
            match d {
                // Some end well before their limit, some after the default estimate.
                Decision::Start { job, .. } => {
                    ends.insert(*job, now.plus_ms(60_000 + rng.below(24) * 600_000));
                }
                Decision::Preempt { victim, deadline, .. } => {
                    ends.insert(*victim, *deadline);
                }
                Decision::Stop { job, .. } => {
                    ends.insert(*job, now);
                }
                Decision::Requeued { .. } => {}
            }
        }
        s.check_invariants().map_err(|e| format!("seed {seed}: {e}"))?;
        reserved_cycles += usize::from(!s.reservations().is_empty());
        now = now.plus_ms(rng.below(900) * 1_000);
    }
    Ok(reserved_cycles)
}

#[test]
fn learnt_reservations_are_fresh_ones_on_a_busy_cluster() {
    let mut reserved_cycles = 0;
    for seed in 0..40 {
        reserved_cycles += run(seed).unwrap();
    }
    // The runs do what they are for: most cycles have a reservation to keep or redo.
    assert!(reserved_cycles > 40 * 300 / 2, "{reserved_cycles} cycles with a reservation");
}
