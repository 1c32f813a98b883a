use fairway_core::*;

fn node(id: u32, gpus: u32) -> Event {
    Event::NodeAdded(NodeSpec {
        id: NodeId(id),
        gpu_model: GpuModel(0),
        capacity: Resources::new(gpus, 64_000, 512_000),
    })
}

#[test]
fn high_priority_preempts_low_and_starts_after_grace() {
    let mut s = Scheduler::new(Config::default());
    s.apply(node(1, 8), Time(0)).unwrap();
    for i in 0..4 {
        s.apply(Event::Submit(JobSpec::new(JobId(i), 1000, Resources::gpus(2))), Time(0)).unwrap();
    }
    let out = s.cycle(Time(0));
    assert_eq!(out.stats.started, 4);
    let high = JobSpec::new(JobId(10), 1_000_000, Resources::gpus(4));
    s.apply(Event::Submit(high), Time::from_secs(60)).unwrap();
    let out = s.cycle(Time::from_secs(60));
    let victims: Vec<JobId> = out
        .decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Preempt { victim, .. } => Some(*victim),
            _ => None,
        })
        .collect();
    assert_eq!(victims.len(), 2, "{:?}", out.decisions);
    assert!(matches!(s.why(JobId(10))[0], PendingReason::WaitingForPreemption { .. }));
    for v in &victims {
        s.apply(Event::Exited { job: *v, outcome: ExitOutcome::Requeue }, Time::from_secs(90)).unwrap();
    }
    let out = s.cycle(Time::from_secs(90));
    assert!(matches!(out.decisions[0], Decision::Start { job: JobId(10), .. }), "{:?}", out.decisions);
    assert_eq!(s.pending().collect::<Vec<_>>(), victims);
    s.check_invariants().unwrap();
}
