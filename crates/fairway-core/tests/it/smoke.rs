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

/// `Scheduler::cohort_most` (the most a member can ever hold in its cohort) against what the
/// scheduler itself admits: on an empty node larger than the cohort, with the other members
/// idle, a member's 1-GPU jobs start until the cohort lends no more. Every cohort of three
/// members with nominal quotas of 0, 2 or 4 GPUs, each lending all, none or one.
#[test]
fn cohort_most_is_what_a_member_can_hold_with_the_others_idle() {
    let cohort = AccountId(100);
    let per_gpu = ResourceKind::Gpu.amount(Resources::gpus(1));
    let lends = [None, Some(0), Some(1)];
    for config in 0..(3u32 * 3).pow(3) {
        let mut digits = config;
        let mut members = Vec::new();
        for project in 0..3u32 {
            let (nominal, lend) = ([0, 2, 4][(digits % 3) as usize], lends[(digits / 3 % 3) as usize]);
            digits /= 9;
            members.push((AccountId(project), nominal, lend));
        }
        for &(project, ..) in &members {
            let mut s = Scheduler::new(Config::default());
            s.apply(node(1, 64), Time(0)).unwrap();
            for &(member, nominal, lend) in &members {
                let place = NominalQuota {
                    cohort,
                    nominal: Quota::gpus(nominal),
                    borrowing_limit: Quota::default(),
                    lending_limit: Quota { gpus_max: lend.map(|l: u32| l.min(nominal)), ..Quota::default() },
                };
                s.apply(Event::SetNominalQuota { project: member, nominal: Some(place) }, Time(0)).unwrap();
            }
            for i in 0..20 {
                let mut job = JobSpec::new(JobId(i), 1000, Resources::gpus(1));
                job.project = project;
                job.user = AccountId(50);
                s.apply(Event::Submit(job), Time(0)).unwrap();
            }
            let started = s.cycle(Time(0)).stats.started as u64;
            let most = s.cohort_most(project, ResourceKind::Gpu).expect("a member of a cohort");
            assert_eq!(most, started * per_gpu, "{members:?}, project {project:?}");
        }
    }
    let s = Scheduler::new(Config::default());
    assert_eq!(s.cohort_most(AccountId(7), ResourceKind::Gpu), None, "in no cohort");
}
