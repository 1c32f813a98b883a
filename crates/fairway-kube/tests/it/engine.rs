//! The engine fed watch events built here, checked by the actions it asks for: admission,
//! binding, preemption by suspension, requeue once the victim's pods are gone, occupants,
//! quotas from ResourceQuotas, and a rebuild that admits nothing twice.

use fairway_kube::Settings;
use fairway_kube::engine::{Action, Change, Engine, Input, Stream};
use fairway_kube::workload::{ADMISSION, CHECKPOINTED_AT, Workload};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, ResourceQuota};
use k8s_openapi::api::scheduling::v1::PriorityClass;

fn from_yaml<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

pub fn node(name: &str, gpus: u32) -> Node {
    from_yaml(&format!(
        "metadata: {{ name: {name}, labels: {{ nvidia.com/gpu.product: A100 }} }}\n\
         status:\n  allocatable: {{ nvidia.com/gpu: \"{gpus}\", cpu: \"64\", memory: 512Gi }}\n\
         \x20 conditions: [{{ type: Ready, status: \"True\" }}]\n"
    ))
}

pub fn class(name: &str, value: i32) -> PriorityClass {
    from_yaml(&format!("metadata: {{ name: {name} }}\nvalue: {value}\n"))
}

/// A managed Job (its pods name Fairway's scheduler), suspended unless `admitted_on`.
pub fn job(
    ns: &str,
    name: &str,
    class: &str,
    gpus: u32,
    parallelism: u32,
    created_s: u64,
    admitted_on: Option<&[&str]>,
) -> Job {
    let annotations = match admitted_on {
        Some(nodes) => {
            let list: Vec<String> = nodes.iter().map(|n| format!("\\\"{n}\\\"")).collect();
            format!("annotations: {{ {ADMISSION}: \"{{\\\"nodes\\\":[{}]}}\" }}", list.join(","))
        }
        None => String::new(),
    };
    let created = jiff::Timestamp::from_second(1_800_000_000 + created_s as i64).unwrap();
    from_yaml(&format!(
        "metadata: {{ name: {name}, namespace: {ns}, uid: uid-{name}, creationTimestamp: \"{created}\", {annotations} }}\n\
         spec:\n  suspend: {}\n  parallelism: {parallelism}\n  template:\n    spec:\n      schedulerName: fairway\n\
         \x20     priorityClassName: {class}\n      restartPolicy: Never\n      terminationGracePeriodSeconds: 30\n\
         \x20     containers: [{{ name: c, image: busybox, resources: {{ limits: {{ nvidia.com/gpu: \"{gpus}\" }} }} }}]\n",
        admitted_on.is_none()
    ))
}

pub fn pod(ns: &str, name: &str, owner: &str, gpus: u32, node: Option<&str>, scheduler: &str) -> Pod {
    let node = node.map(|n| format!("  nodeName: {n}\n")).unwrap_or_default();
    from_yaml(&format!(
        "metadata:\n  name: {name}\n  namespace: {ns}\n  uid: pod-{name}\n  ownerReferences: [{{ apiVersion: batch/v1, kind: Job, name: x, uid: {owner}, controller: true }}]\n\
         spec:\n  schedulerName: {scheduler}\n{node}  containers: [{{ name: c, image: busybox, resources: {{ requests: {{ nvidia.com/gpu: \"{gpus}\" }} }} }}]\n\
         status: {{ phase: Running }}\n"
    ))
}

pub struct Harness {
    pub engine: Engine,
    pub now: u64,
    said: Vec<Action>,
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_settings(Settings::default())
    }

    pub fn with_settings(settings: Settings) -> Harness {
        Harness { engine: Engine::new(settings), now: 1_800_000_100_000, said: Vec::new() }
    }

    pub fn feed(&mut self, input: Input) {
        self.engine.apply(input, self.now);
    }

    /// Lists every kind with these objects, as the watches do at start.
    pub fn start(
        &mut self,
        nodes: Vec<Node>,
        classes: Vec<PriorityClass>,
        jobs: Vec<Job>,
        pods: Vec<Pod>,
        quotas: Vec<ResourceQuota>,
    ) {
        for stream in Stream::ALL {
            self.feed(Input::Listing(stream));
        }
        for n in nodes {
            self.feed(Input::Node(Change::Applied(n)));
        }
        for c in classes {
            self.feed(Input::Class(Change::Applied(c)));
        }
        for j in jobs {
            self.feed(Input::Workload(Change::Applied(Workload::from_job(&j).unwrap())));
        }
        for p in pods {
            self.feed(Input::Pod(Change::Applied(p)));
        }
        for q in quotas {
            self.feed(Input::Quota(Change::Applied(q)));
        }
        for stream in Stream::ALL {
            self.feed(Input::Listed(stream));
        }
    }

    /// One cycle; the urgent actions (status and events aside).
    pub fn cycle(&mut self) -> Vec<Action> {
        self.now += 100;
        self.engine.cycle(self.now);
        self.engine.publish_status(self.now);
        let (background, urgent): (Vec<Action>, Vec<Action>) =
            self.engine.take_actions().into_iter().partition(Action::is_background);
        self.said.extend(background);
        urgent
    }

    /// Conditions and events said so far.
    pub fn background(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.said)
    }
}

fn admitted(actions: &[Action]) -> Vec<(String, Vec<String>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Admit { target, nodes, .. } => Some((target.name.clone(), nodes.clone())),
            _ => None,
        })
        .collect()
}

fn suspended(actions: &[Action]) -> Vec<(String, Option<String>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Suspend { target, preemption } => {
                Some((target.name.clone(), preemption.as_ref().map(|p| p.by.clone())))
            }
            _ => None,
        })
        .collect()
}

fn bound(actions: &[Action]) -> Vec<(String, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Bind { pod, node, .. } => Some((pod.clone(), node.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_queued_job_is_admitted_and_its_pods_bound_to_the_chosen_node() {
    let mut h = Harness::new();
    h.start(
        vec![node("n1", 8)],
        vec![class("high", 1_000_000)],
        vec![job("ads", "ctr", "high", 4, 2, 0, None)],
        vec![],
        vec![],
    );
    let actions = h.cycle();
    assert_eq!(admitted(&actions), [("ctr".to_owned(), vec!["n1".to_owned(), "n1".to_owned()])]);
    // The Job controller creates its two pods: each is bound to its replica's node.
    h.feed(Input::Pod(Change::Applied(pod("ads", "ctr-a", "uid-ctr", 4, None, "fairway"))));
    h.feed(Input::Pod(Change::Applied(pod("ads", "ctr-b", "uid-ctr", 4, None, "fairway"))));
    let actions = h.cycle();
    assert_eq!(bound(&actions), [("ctr-a".to_owned(), "n1".to_owned()), ("ctr-b".to_owned(), "n1".to_owned())]);
}

#[test]
fn a_high_job_preempts_by_suspension_and_starts_once_the_victims_pods_are_gone() {
    let mut h = Harness::new();
    let low = job("vision", "nightly", "low", 8, 1, 0, Some(&["n1"]));
    let running = pod("vision", "nightly-x", "uid-nightly", 8, Some("n1"), "fairway");
    h.start(vec![node("n1", 8)], vec![class("high", 1_000_000), class("low", 1000)], vec![low], vec![running], vec![]);
    assert!(h.cycle().is_empty(), "the running job is restored where it runs, not admitted again");
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&job("ads", "ctr", "high", 8, 1, 50, None)).unwrap())));
    let actions = h.cycle();
    assert_eq!(suspended(&actions), [("nightly".to_owned(), Some("ads/ctr".to_owned()))]);
    assert!(admitted(&actions).is_empty(), "the GPUs are held while the victim stops");
    // The Job controller deletes its pod; once it is gone the victim waits again and the
    // preemptor starts.
    let mut victim = job("vision", "nightly", "low", 8, 1, 0, Some(&["n1"]));
    victim.spec.as_mut().unwrap().suspend = Some(true);
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&victim).unwrap())));
    assert!(admitted(&h.cycle()).is_empty(), "its pod still runs");
    h.feed(Input::Pod(Change::Deleted(pod("vision", "nightly-x", "uid-nightly", 8, Some("n1"), "fairway"))));
    let actions = h.cycle();
    assert_eq!(admitted(&actions), [("ctr".to_owned(), vec!["n1".to_owned()])]);
    assert!(actions.iter().any(|a| matches!(a, Action::Release { target } if target.name == "nightly")));
}

#[test]
fn a_preempted_run_loses_the_work_since_its_checkpoint_or_else_its_admission() {
    let hour_ms = 3_600_000;
    let start = Harness::new().now;
    // Created 100 s before the harness's clock starts: admitted 80 s ago, a checkpoint 30 s ago.
    let admitted_at = start - 80_000;
    let checkpoint = start - 30_000;
    let rfc3339 = jiff::Timestamp::from_millisecond(checkpoint as i64).unwrap().to_string();
    // (what the workload says of its last checkpoint, the time the loss counts from)
    let cases = [
        (None, admitted_at),
        (Some(checkpoint.to_string()), checkpoint),
        (Some(rfc3339), checkpoint),
        (Some("yesterday".to_owned()), admitted_at),
    ];
    for (said, saved) in cases {
        let mut h = Harness::new();
        let admission = format!("{{\"nodes\":[\"n1\"],\"at_ms\":{admitted_at}}}");
        let victim = |suspend: bool| {
            let mut j = with_annotation(job("vision", "nightly", "low", 8, 1, 0, None), ADMISSION, Some(&admission));
            j = with_annotation(j, CHECKPOINTED_AT, said.as_deref());
            j.spec.as_mut().unwrap().suspend = Some(suspend);
            j
        };
        let running = pod("vision", "nightly-x", "uid-nightly", 8, Some("n1"), "fairway");
        h.start(
            vec![node("n1", 8)],
            vec![class("high", 1_000_000), class("low", 1000)],
            vec![victim(false)],
            vec![running],
            vec![],
        );
        h.cycle();
        h.feed(workload(&job("ads", "ctr", "high", 8, 1, 50, None)));
        let actions = h.cycle();
        assert_eq!(suspended(&actions).len(), 1, "{actions:?}\n{:?}", h.background());
        h.feed(workload(&victim(true)));
        h.cycle();
        h.feed(Input::Pod(Change::Deleted(pod("vision", "nightly-x", "uid-nightly", 8, Some("n1"), "fairway"))));
        let ended = h.now;
        h.cycle();
        let metrics = fairway_kube::http::KubeMetrics::new();
        fairway_kube::http::refresh_metrics(&mut h.engine, &metrics);
        let text = metrics.encode();
        let lost: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("fairway_queue_gpu_hours_lost_total{tier=\"low\",tenant=\"vision\"} "))
            .unwrap_or_else(|| panic!("no loss counted in\n{text}"))
            .parse()
            .unwrap();
        let want = 8.0 * (ended - saved) as f64 / hour_ms as f64;
        assert!((lost - want).abs() < 1e-9, "checkpoint {said:?}: lost {lost} GPU-h, want {want}");
    }
}

#[test]
fn pods_of_other_schedulers_hold_their_gpus() {
    let mut h = Harness::new();
    let other = pod("default", "inference", "uid-deploy", 6, Some("n1"), "default-scheduler");
    h.start(
        vec![node("n1", 8)],
        vec![class("high", 1_000_000)],
        vec![job("ads", "ctr", "high", 4, 1, 0, None)],
        vec![other],
        vec![],
    );
    assert!(admitted(&h.cycle()).is_empty(), "6 of 8 GPUs are taken by a pod Fairway does not manage");
    h.feed(Input::Pod(Change::Deleted(pod("default", "inference", "uid-deploy", 6, Some("n1"), "default-scheduler"))));
    assert_eq!(admitted(&h.cycle()).len(), 1);
}

#[test]
fn a_resource_quota_caps_even_a_high_job_and_says_so() {
    let mut h = Harness::new();
    let quota: ResourceQuota =
        from_yaml("metadata: { name: gpus, namespace: ads }\nspec: { hard: { requests.nvidia.com/gpu: \"4\" } }\n");
    h.start(
        vec![node("n1", 8)],
        vec![class("high", 1_000_000)],
        vec![job("ads", "ctr", "high", 8, 1, 0, None)],
        vec![],
        vec![quota],
    );
    assert!(admitted(&h.cycle()).is_empty());
    let said = h.background();
    let condition = said
        .iter()
        .find_map(|a| match a {
            Action::Condition { reason, message, .. } => Some((reason.clone(), message.clone())),
            _ => None,
        })
        .expect("a condition says why");
    assert_eq!(condition.0, "OverQuota");
    assert!(
        condition.1.contains("namespace ads uses 0 of its 4 nvidia.com/gpu (ResourceQuota); it asks 8"),
        "{}",
        condition.1
    );
}

#[test]
fn a_restart_during_a_preemption_keeps_the_victim_on_its_way_out() {
    let mut h = Harness::new();
    let mut victim = job("vision", "nightly", "low", 8, 1, 0, Some(&["n1"]));
    victim.spec.as_mut().unwrap().suspend = Some(true);
    let annotations = victim.metadata.annotations.as_mut().unwrap();
    annotations.insert("fairway.dev/preempted-by".into(), "ads/ctr".into());
    annotations.insert("fairway.dev/preemption-deadline".into(), "1800000130000".into());
    let still = pod("vision", "nightly-x", "uid-nightly", 8, Some("n1"), "fairway");
    let preemptor = job("ads", "ctr", "high", 8, 1, 50, None);
    h.start(
        vec![node("n1", 8)],
        vec![class("high", 1_000_000), class("low", 1000)],
        vec![victim, preemptor],
        vec![still],
        vec![],
    );
    let actions = h.cycle();
    assert!(admitted(&actions).is_empty() && suspended(&actions).is_empty(), "{actions:?}");
    h.feed(Input::Pod(Change::Deleted(pod("vision", "nightly-x", "uid-nightly", 8, Some("n1"), "fairway"))));
    assert_eq!(admitted(&h.cycle()), [("ctr".to_owned(), vec!["n1".to_owned()])]);
}

#[test]
fn a_job_unsuspended_by_someone_else_is_suspended_until_admitted() {
    let mut h = Harness::new();
    let mut j = job("ads", "eager", "high", 16, 1, 0, None);
    j.spec.as_mut().unwrap().suspend = Some(false);
    h.start(vec![node("n1", 8)], vec![class("high", 1_000_000)], vec![j], vec![], vec![]);
    let actions = h.cycle();
    assert_eq!(suspended(&actions), [("eager".to_owned(), None)]);
}

#[test]
fn a_gang_is_admitted_whole_across_nodes_or_not_at_all() {
    let mut h = Harness::new();
    h.start(
        vec![node("n1", 8), node("n2", 8)],
        vec![class("high", 1_000_000)],
        vec![job("ads", "big", "high", 4, 4, 0, None), job("ads", "huge", "high", 8, 3, 1, None)],
        vec![],
        vec![],
    );
    let actions = h.cycle();
    let admitted = admitted(&actions);
    assert_eq!(admitted.len(), 1, "the 4x4 gang fits; the 3x8 one can never: {admitted:?}");
    let (name, mut nodes) = admitted[0].clone();
    nodes.sort();
    assert_eq!(
        (name.as_str(), nodes),
        ("big", vec!["n1".to_owned(), "n1".to_owned(), "n2".to_owned(), "n2".to_owned()])
    );
}

#[test]
fn a_cordoned_node_takes_no_new_work() {
    let mut h = Harness::new();
    let mut cordoned = node("n1", 8);
    cordoned.spec = Some(k8s_openapi::api::core::v1::NodeSpec { unschedulable: Some(true), ..Default::default() });
    h.start(
        vec![cordoned, node("n2", 4)],
        vec![class("high", 1_000_000)],
        vec![job("ads", "a", "high", 4, 1, 0, None)],
        vec![],
        vec![],
    );
    assert_eq!(admitted(&h.cycle()), [("a".to_owned(), vec!["n2".to_owned()])]);
}

#[test]
fn a_node_lost_mid_run_requeues_the_job_and_its_surviving_pods_hold_their_gpus_until_gone() {
    let mut h = Harness::new();
    let gang = job("ads", "gang", "high", 8, 2, 0, Some(&["n1", "n2"]));
    let p1 = pod("ads", "gang-1", "uid-gang", 8, Some("n1"), "fairway");
    let p2 = pod("ads", "gang-2", "uid-gang", 8, Some("n2"), "fairway");
    let waiting = job("ads", "next", "high", 8, 1, 10, None);
    h.start(
        vec![node("n1", 8), node("n2", 8), node("n3", 8)],
        vec![class("high", 1_000_000)],
        vec![gang, waiting],
        vec![p1, p2],
        vec![],
    );
    assert_eq!(admitted(&h.cycle()), [("next".to_owned(), vec!["n3".to_owned()])]);
    // n1 goes: the gang cannot go on; it is suspended, and its pod on n2 still holds n2's
    // GPUs until it is gone.
    h.feed(Input::Node(Change::Deleted(node("n1", 8))));
    let actions = h.cycle();
    assert_eq!(suspended(&actions), [("gang".to_owned(), None)]);
    assert!(admitted(&actions).is_empty(), "n2 is still held by the gang's pod: {actions:?}");
}

#[test]
fn a_deleted_running_job_leaves_once_its_pods_are_gone() {
    let mut h = Harness::new();
    let running = job("ads", "old", "high", 8, 1, 0, Some(&["n1"]));
    let p = pod("ads", "old-1", "uid-old", 8, Some("n1"), "fairway");
    h.start(
        vec![node("n1", 8)],
        vec![class("high", 1_000_000)],
        vec![running.clone(), job("ads", "new", "high", 8, 1, 5, None)],
        vec![p],
        vec![],
    );
    assert!(admitted(&h.cycle()).is_empty());
    h.feed(Input::Workload(Change::Deleted(Workload::from_job(&running).unwrap())));
    assert!(admitted(&h.cycle()).is_empty(), "its pod is still terminating");
    h.feed(Input::Pod(Change::Deleted(pod("ads", "old-1", "uid-old", 8, Some("n1"), "fairway"))));
    assert_eq!(admitted(&h.cycle()), [("new".to_owned(), vec!["n1".to_owned()])]);
}

#[test]
fn an_unknown_priority_class_is_said_once_and_the_job_waits_for_it() {
    let mut h = Harness::new();
    h.start(vec![node("n1", 8)], vec![], vec![job("ads", "j", "gold", 1, 1, 0, None)], vec![], vec![]);
    assert!(admitted(&h.cycle()).is_empty());
    let said = h.background();
    assert!(
        said.iter().any(|a| matches!(a, Action::Event { warning: true, message, .. } if message.contains("no PriorityClass \"gold\""))),
        "{said:?}"
    );
    h.feed(Input::Class(Change::Applied(class("gold", 10))));
    assert_eq!(admitted(&h.cycle()).len(), 1, "admitted once its class exists");
}

#[test]
fn a_paddle_job_is_one_gang_of_all_its_replicas() {
    let object: kube::api::DynamicObject = serde_saphyr::from_str(
        "apiVersion: kubeflow.org/v1\nkind: PaddleJob\nmetadata: { name: p, namespace: ads, uid: uid-p, creationTimestamp: \"2027-01-01T00:00:00Z\" }\n\
         spec:\n  runPolicy: { suspend: true }\n  paddleReplicaSpecs:\n\
         \x20   Master: { replicas: 1, template: { spec: { schedulerName: fairway, containers: [{ name: m, image: paddle, resources: { limits: { nvidia.com/gpu: \"2\" } } }] } } }\n\
         \x20   Worker: { replicas: 3, template: { spec: { schedulerName: fairway, priorityClassName: high, containers: [{ name: w, image: paddle, resources: { limits: { nvidia.com/gpu: \"4\" } } }] } } }\n",
    )
    .unwrap();
    let w = Workload::from_paddle(&object).unwrap();
    assert!(w.suspended && w.scheduler_name.as_deref() == Some("fairway"));
    let mut h = Harness::new();
    h.start(vec![node("n1", 8), node("n2", 8)], vec![class("high", 1_000_000)], vec![], vec![], vec![]);
    h.feed(Input::Workload(Change::Applied(w)));
    let actions = h.cycle();
    let admitted = admitted(&actions);
    assert_eq!(admitted.len(), 1, "{actions:?}");
    assert_eq!(admitted[0].1.len(), 4, "4 replicas of the largest shape (4 GPUs)");
}

#[test]
fn a_node_tainted_against_other_work_is_out_of_the_pool_but_the_gpu_taint_is_tolerated() {
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    let tainted = |name: &str, key: &str, effect: &str| {
        let mut n = node(name, 8);
        let taint = Taint { key: key.into(), value: Some("x".into()), effect: effect.into(), time_added: None };
        n.spec = Some(NodeSpec { taints: Some(vec![taint]), ..Default::default() });
        n
    };
    let mut h = Harness::new();
    let nodes = vec![
        tainted("n1", "dedicated", "NoSchedule"),
        tainted("n2", "maintenance", "NoExecute"),
        tainted("n3", "nvidia.com/gpu", "NoSchedule"),
        tainted("n4", "spot", "PreferNoSchedule"),
    ];
    let jobs = vec![
        job("ads", "a", "high", 8, 1, 0, None),
        job("ads", "b", "high", 8, 1, 1, None),
        job("ads", "c", "high", 8, 1, 2, None),
    ];
    h.start(nodes, vec![class("high", 1_000_000)], jobs, vec![], vec![]);
    // Only n3 (the GPU taint) and n4 (a mere preference) take work; c waits.
    let mut got = admitted(&h.cycle());
    got.sort();
    assert_eq!(got, [("a".to_owned(), vec!["n3".to_owned()]), ("b".to_owned(), vec!["n4".to_owned()])]);
}

#[test]
fn node_selectors_select_the_gpu_model_and_other_constraints_are_refused_with_the_field_named() {
    let with_pod_spec = |name: &str, created: u64, extra: &str| {
        let mut j = job("ads", name, "high", 8, 1, created, None);
        let extra: serde_json::Value = serde_saphyr::from_str(extra).unwrap();
        let mut value = serde_json::to_value(&j).unwrap();
        for (k, v) in extra.as_object().unwrap() {
            value["spec"]["template"]["spec"][k] = v.clone();
        }
        j = serde_json::from_value(value).unwrap();
        j
    };
    let mut h100 = node("h1", 8);
    h100.metadata.labels = Some([("cloud.google.com/gke-accelerator".to_owned(), "H100".to_owned())].into());
    let mut h = Harness::new();
    let jobs = vec![
        with_pod_spec("model", 0, "nodeSelector: { cloud.google.com/gke-accelerator: H100 }"),
        with_pod_spec("zone", 1, "nodeSelector: { topology.kubernetes.io/zone: a }"),
        with_pod_spec(
            "affinity",
            2,
            "affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [] } } }",
        ),
        with_pod_spec("tolerant", 3, "tolerations: [{ key: dedicated, operator: Exists }]"),
    ];
    h.start(vec![node("a1", 8), h100], vec![class("high", 1_000_000)], jobs, vec![], vec![]);
    let mut got = admitted(&h.cycle());
    got.sort();
    // The H100 job goes to the H100 node whatever the order; the tolerant job is admitted
    // (tolerations need nothing).
    assert_eq!(got, [("model".to_owned(), vec!["h1".to_owned()]), ("tolerant".to_owned(), vec!["a1".to_owned()])]);
    let refusals: Vec<(String, String)> = h
        .background()
        .into_iter()
        .filter_map(|a| match a {
            Action::Condition { target, admitted: false, reason, message } if reason == "Invalid" => {
                Some((target.name, message))
            }
            _ => None,
        })
        .collect();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    let of = |name: &str| refusals.iter().find(|(n, _)| n == name).map(|(_, m)| m.clone()).unwrap();
    assert!(of("zone").starts_with("spec.template.spec.nodeSelector.topology.kubernetes.io/zone: "), "{}", of("zone"));
    assert!(of("zone").contains("fairway.dev/managed=false"), "{}", of("zone"));
    assert!(of("affinity").contains("requiredDuringSchedulingIgnoredDuringExecution"), "{}", of("affinity"));
}

#[test]
fn two_gpu_model_labels_that_disagree_are_refused() {
    let selector = serde_json::json!({"spec": {"template": {"spec": {"nodeSelector": {
        "nvidia.com/gpu.product": "A100", "cloud.google.com/gke-accelerator": "H100"}}}}});
    let labels = Settings::default().gpu_model_labels;
    let err = fairway_kube::engine::placement_constraints(&selector, &labels).unwrap_err();
    assert!(err.contains("different GPU models"), "{err}");
    let same = serde_json::json!({"spec": {"template": {"spec": {"nodeSelector": {
        "nvidia.com/gpu.product": "A100", "cloud.google.com/gke-accelerator": "A100"}}}}});
    let out = fairway_kube::engine::placement_constraints(&same, &labels).unwrap();
    assert_eq!(out["spec"]["template"]["spec"]["nodeSelector"], serde_json::json!({"nvidia.com/gpu.product": "A100"}));
}

/// The hold recorded on the victims is restored: the pending preemptor waits for its
/// victims and preempts nobody else, although a lower-priority job runs on another node.
#[test]
fn a_restart_during_a_preemption_keeps_the_preemptors_gpus_held() {
    let preempted = |name: &str, hold: &str| {
        let mut j = job("vision", name, "low", 4, 1, 0, Some(&["n1"]));
        j.spec.as_mut().unwrap().suspend = Some(true);
        let annotations = j.metadata.annotations.as_mut().unwrap();
        annotations.insert("fairway.dev/preempted-by".into(), "ads/ctr".into());
        annotations.insert("fairway.dev/preemption-deadline".into(), "1800000130000".into());
        annotations.insert("fairway.dev/preemption-hold".into(), hold.into());
        j
    };
    let run = |hold: &str| {
        let mut h = Harness::new();
        let pods = vec![
            pod("vision", "a-x", "uid-a", 4, Some("n1"), "fairway"),
            pod("vision", "b-x", "uid-b", 4, Some("n1"), "fairway"),
            pod("research", "other-x", "uid-other", 8, Some("n2"), "fairway"),
        ];
        let jobs = vec![
            preempted("a", hold),
            preempted("b", hold),
            job("research", "other", "medium", 8, 1, 10, Some(&["n2"])),
            job("ads", "ctr", "high", 8, 1, 50, None),
        ];
        let classes = vec![class("high", 1_000_000), class("medium", 100_000), class("low", 1000)];
        h.start(vec![node("n1", 8), node("n2", 8)], classes, jobs, pods, vec![]);
        h.cycle()
    };
    // With the hold: nothing happens until the victims' pods are gone.
    let actions = run(r#"["n1"]"#);
    assert!(suspended(&actions).is_empty() && admitted(&actions).is_empty(), "{actions:?}");
    // Without it (a record from before holds were kept), the preemptor would look for GPUs
    // anew: the check above is not vacuous.
    let actions = run("[]");
    assert_eq!(suspended(&actions), [("other".to_owned(), Some("ads/ctr".to_owned()))], "{actions:?}");
}

/// The Job controller makes a replacement while the old pod is still terminating (no slot
/// is free yet): it is bound as soon as the old pod is gone.
#[test]
fn a_replacement_made_while_the_old_pod_terminates_is_bound_when_it_is_gone() {
    let mut h = Harness::new();
    let running = job("ads", "ctr", "high", 8, 1, 0, Some(&["n1"]));
    let mut old = pod("ads", "ctr-old", "uid-ctr", 8, Some("n1"), "fairway");
    old.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::from_second(1_800_000_000).unwrap(),
    ));
    h.start(vec![node("n1", 8)], vec![class("high", 1_000_000)], vec![running], vec![old.clone()], vec![]);
    assert!(h.cycle().is_empty());
    h.feed(Input::Pod(Change::Applied(pod("ads", "ctr-new", "uid-ctr", 8, None, "fairway"))));
    assert!(bound(&h.cycle()).is_empty(), "no slot is free while the old pod terminates");
    h.feed(Input::Pod(Change::Deleted(old)));
    assert_eq!(bound(&h.cycle()), [("ctr-new".to_owned(), "n1".to_owned())]);
}

/// A device plugin restart (the node's GPUs at 0 for a moment, then back) requeues
/// nobody; a node that grows while work runs on it is resized once that work is done.
#[test]
fn a_node_that_changes_size_keeps_its_work_and_is_resized_when_idle() {
    let mut h = Harness::new();
    let running = job("ads", "ctr", "high", 8, 1, 0, Some(&["n1"]));
    let p = pod("ads", "ctr-x", "uid-ctr", 8, Some("n1"), "fairway");
    h.start(vec![node("n1", 8)], vec![class("high", 1_000_000)], vec![running.clone()], vec![p.clone()], vec![]);
    assert!(h.cycle().is_empty());
    h.feed(Input::Node(Change::Applied(node("n1", 0))));
    assert!(suspended(&h.cycle()).is_empty(), "its job keeps running");
    h.feed(Input::Node(Change::Applied(node("n1", 8))));
    assert!(suspended(&h.cycle()).is_empty());
    // It grows to 16 GPUs while the job runs: no new work goes there until it is resized.
    h.feed(Input::Node(Change::Applied(node("n1", 16))));
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&job("ads", "next", "high", 8, 1, 5, None)).unwrap())));
    let actions = h.cycle();
    assert!(suspended(&actions).is_empty() && admitted(&actions).is_empty(), "{actions:?}");
    // The job ends: the node is resized and takes work on its 16 GPUs.
    let mut done = running;
    done.status = Some(serde_saphyr::from_str("conditions: [{ type: Complete, status: \"True\" }]\n").unwrap());
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&done).unwrap())));
    h.feed(Input::Pod(Change::Deleted(p)));
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&job("ads", "third", "high", 8, 1, 6, None)).unwrap())));
    let mut got = admitted(&h.cycle());
    got.sort();
    assert_eq!(got, [("next".to_owned(), vec!["n1".to_owned()]), ("third".to_owned(), vec!["n1".to_owned()])]);
}

/// A GPU Job of `ns` that was never handed to Fairway (no `schedulerName`, not suspended),
/// optionally labelled `fairway.dev/managed: "false"`.
fn unmanaged_job(ns: &str, name: &str, gpus: u32, opted_out: bool) -> Job {
    let labels = if opted_out { "labels: { fairway.dev/managed: \"false\" }, " } else { "" };
    from_yaml(&format!(
        "metadata: {{ name: {name}, namespace: {ns}, uid: uid-{name}, {labels}creationTimestamp: \"2027-01-15T08:00:00Z\" }}\n\
         spec:\n  template:\n    spec:\n      restartPolicy: Never\n\
         \x20     containers: [{{ name: c, image: busybox, resources: {{ limits: {{ nvidia.com/gpu: \"{gpus}\" }} }} }}]\n"
    ))
}

fn namespace(name: &str, managed: bool) -> k8s_openapi::api::core::v1::Namespace {
    from_yaml(&format!("metadata: {{ name: {name}, labels: {{ fairway.dev/managed: \"{managed}\" }} }}\n"))
}

fn not_managed_warnings(said: &[Action]) -> Vec<String> {
    said.iter()
        .filter_map(|a| match a {
            Action::Event { target, warning: true, reason, message } if reason == "NotManaged" => {
                assert!(
                    message.contains("spec.template.spec.schedulerName: fairway and spec.suspend: true"),
                    "{message}"
                );
                Some(target.name.clone())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_gpu_job_that_escaped_the_webhook_in_a_managed_namespace_is_said_once_and_counted() {
    let mut h = Harness::new();
    let jobs = vec![
        unmanaged_job("ads", "escaped", 2, false),
        unmanaged_job("ads", "opted-out", 2, true),
        unmanaged_job("ads", "cpu-only", 0, false),
        unmanaged_job("web", "elsewhere", 2, false),
    ];
    for stream in Stream::ALL {
        h.feed(Input::Listing(stream));
    }
    h.feed(Input::Node(Change::Applied(node("n1", 8))));
    for j in jobs {
        h.feed(Input::Workload(Change::Applied(Workload::from_job(&j).unwrap())));
    }
    // The namespaces are listed after the Jobs: the warning waits for the whole picture.
    h.feed(Input::Namespace(Change::Applied(namespace("ads", true))));
    h.feed(Input::Namespace(Change::Applied(namespace("web", false))));
    for stream in Stream::ALL {
        h.feed(Input::Listed(stream));
    }
    assert!(admitted(&h.cycle()).is_empty(), "Fairway does not take over a Job it was not given");
    assert_eq!(not_managed_warnings(&h.background()), ["escaped"]);
    assert_eq!(h.engine.unmanaged_in_managed_namespaces(), 1);

    // Said once, however often the Job changes.
    h.feed(Input::Workload(Change::Applied(Workload::from_job(&unmanaged_job("ads", "escaped", 2, false)).unwrap())));
    h.cycle();
    assert!(not_managed_warnings(&h.background()).is_empty());

    // The namespace web opts in later: its Job is said then.
    h.feed(Input::Namespace(Change::Applied(namespace("web", true))));
    h.cycle();
    assert_eq!(not_managed_warnings(&h.background()), ["elsewhere"]);
    assert_eq!(h.engine.unmanaged_in_managed_namespaces(), 2);

    // Deleted, or gone from a relist: no longer counted.
    h.feed(Input::Workload(Change::Deleted(Workload::from_job(&unmanaged_job("ads", "escaped", 2, false)).unwrap())));
    assert_eq!(h.engine.unmanaged_in_managed_namespaces(), 1);
    h.feed(Input::Listing(Stream::Jobs));
    h.feed(Input::Listed(Stream::Jobs));
    assert_eq!(h.engine.unmanaged_in_managed_namespaces(), 0);
}

/// Two low Jobs of 4 GPUs running on one node since the admission times recorded on them;
/// a high Job of 4 GPUs arrives after a controller restart: the least-work-lost rule must
/// preempt the one admitted last, whichever of them that is.
#[test]
fn after_a_restart_the_victim_is_the_job_admitted_last_as_its_record_says() {
    let now = Harness::new().now;
    for (early, late) in [("a", "b"), ("b", "a")] {
        let mut h = Harness::new();
        let mut jobs = Vec::new();
        let mut pods = Vec::new();
        for (name, created_s) in [("a", 0), ("b", 10)] {
            let mut j = job("vision", name, "low", 4, 1, created_s, Some(&["n1"]));
            let ran_s = if name == early { 3600 } else { 60 };
            let record = format!("{{\"nodes\":[\"n1\"],\"at_ms\":{}}}", now - ran_s * 1000);
            j.metadata.annotations.as_mut().unwrap().insert(ADMISSION.into(), record);
            jobs.push(j);
            pods.push(pod("vision", &format!("{name}-x"), &format!("uid-{name}"), 4, Some("n1"), "fairway"));
        }
        jobs.push(job("ads", "ctr", "high", 4, 1, 50, None));
        h.start(vec![node("n1", 8)], vec![class("high", 1_000_000), class("low", 1000)], jobs, pods, vec![]);
        let actions = h.cycle();
        assert_eq!(
            suspended(&actions),
            [(late.to_owned(), Some("ads/ctr".to_owned()))],
            "{late} ran 60 s, {early} an hour"
        );
    }
}

/// A new leader does not say again what the Job's `FairwayAdmitted` condition already says
/// (10,000 queued Jobs would otherwise get 10,000 more Events at each failover), and says
/// what changed.
#[test]
fn a_new_leader_does_not_repeat_what_the_condition_already_says() {
    let said_about = |condition: Option<(&str, &str)>, hard_gpus: u32| {
        let mut h = Harness::new();
        let quota: ResourceQuota = from_yaml(&format!(
            "metadata: {{ name: gpus, namespace: ads }}\nspec: {{ hard: {{ requests.nvidia.com/gpu: \"{hard_gpus}\" }} }}\n"
        ));
        let mut ctr = job("ads", "ctr", "high", 8, 1, 0, None);
        if let Some((reason, message)) = condition {
            ctr.status = Some(from_yaml(&format!(
                "conditions: [{{ type: FairwayAdmitted, status: \"False\", reason: {reason}, message: \"{message}\" }}]\n"
            )));
        }
        h.start(vec![node("n1", 8)], vec![class("high", 1_000_000)], vec![ctr], vec![], vec![quota]);
        assert!(admitted(&h.cycle()).is_empty());
        h.background()
            .into_iter()
            .filter_map(|a| match a {
                Action::Condition { message, .. } => Some(format!("condition: {message}")),
                Action::Event { message, .. } => Some(format!("event: {message}")),
                _ => None,
            })
            .collect::<Vec<String>>()
    };
    let over_4 = "over quota: namespace ads uses 0 of its 4 nvidia.com/gpu (ResourceQuota); it asks 8";
    let estimate = "; position 1 in the queue; no start can be estimated: \
                    it could not start even once everything running now has ended";
    // The first leader says it, as a condition (with the estimate) and an Event.
    assert_eq!(said_about(None, 4), [format!("condition: {over_4}{estimate}"), format!("event: {over_4}")]);
    // The next one finds it said.
    assert!(said_about(Some(("OverQuota", &format!("{over_4}{estimate}"))), 4).is_empty());
    // A condition without the estimate (written before there were estimates) gets it, with
    // no Event: the reason is the same.
    assert_eq!(said_about(Some(("OverQuota", over_4)), 4), [format!("condition: {over_4}{estimate}")]);
    // Unless it changed meanwhile (the quota went down to 2).
    let over_2 = "over quota: namespace ads uses 0 of its 2 nvidia.com/gpu (ResourceQuota); it asks 8";
    assert_eq!(
        said_about(Some(("OverQuota", &format!("{over_4}{estimate}"))), 2),
        [format!("condition: {over_2}{estimate}"), format!("event: {over_2}")]
    );
}

fn with_annotation(mut j: Job, key: &str, value: Option<&str>) -> Job {
    let annotations = j.metadata.annotations.get_or_insert_default();
    match value {
        Some(v) => annotations.insert(key.into(), v.into()),
        None => annotations.remove(key),
    };
    j
}

fn workload(j: &Job) -> Input {
    Input::Workload(Change::Applied(Workload::from_job(j).unwrap()))
}

/// The (reason, message) of each condition said about `name`, oldest first.
fn conditions_about<'a>(said: &'a [Action], name: &'a str) -> impl Iterator<Item = (&'a String, &'a String)> {
    said.iter().filter_map(move |a| match a {
        Action::Condition { target, reason, message, .. } if target.name == name => Some((reason, message)),
        _ => None,
    })
}

fn conditions_said(said: &[Action], name: &str) -> Vec<String> {
    conditions_about(said, name).map(|(reason, _)| reason.clone()).collect()
}

/// `fairway.dev/paused: "true"` on a running Job stops it as a victim is stopped and takes it
/// out of the queue, so the next Job gets its GPUs; removing the annotation queues it again.
#[test]
fn a_paused_job_stops_leaves_the_queue_and_comes_back_when_unpaused() {
    let mut h = Harness::new();
    let running = job("vision", "a", "low", 8, 1, 0, Some(&["n1"]));
    h.start(
        vec![node("n1", 8)],
        vec![class("low", 1000)],
        vec![running.clone(), job("vision", "b", "low", 8, 1, 10, None)],
        vec![pod("vision", "a-x", "uid-a", 8, Some("n1"), "fairway")],
        vec![],
    );
    assert!(admitted(&h.cycle()).is_empty(), "a holds the node");
    assert_eq!(conditions_said(&h.background(), "a"), ["Admitted"]);

    let paused = with_annotation(running.clone(), "fairway.dev/paused", Some("true"));
    h.feed(workload(&paused));
    assert_eq!(suspended(&h.cycle()), [("a".to_owned(), None)], "paused: a is suspended, for no preemptor");
    let mut stopped = paused.clone();
    stopped.spec.as_mut().unwrap().suspend = Some(true);
    h.feed(workload(&stopped));
    h.feed(Input::Pod(Change::Deleted(pod("vision", "a-x", "uid-a", 8, Some("n1"), "fairway"))));
    let actions = h.cycle();
    assert_eq!(admitted(&actions), [("b".to_owned(), vec!["n1".to_owned()])], "b takes the GPUs a let go");
    assert!(
        actions.iter().any(|a| matches!(a, Action::Release { target } if target.name == "a")),
        "a's admission record is removed: {actions:?}"
    );
    assert_eq!(conditions_said(&h.background(), "a"), ["Paused"]);

    // Paused and unsuspended by hand: suspended again, not admitted.
    let mut released = stopped.clone();
    released.metadata.annotations.as_mut().unwrap().remove(ADMISSION);
    let mut unsuspended = released.clone();
    unsuspended.spec.as_mut().unwrap().suspend = Some(false);
    h.feed(workload(&unsuspended));
    assert_eq!(suspended(&h.cycle()), [("a".to_owned(), None)]);
    h.feed(workload(&released));

    // Unpaused: it queues again (behind nobody: it is older than b) and waits for b's GPUs.
    h.feed(workload(&with_annotation(released.clone(), "fairway.dev/paused", None)));
    assert!(admitted(&h.cycle()).is_empty());
    assert_eq!(conditions_said(&h.background(), "a"), ["NoFit"]);

    // Paused while it waits: out of the queue, so b's end does not start it.
    h.feed(workload(&released));
    h.cycle();
    assert_eq!(conditions_said(&h.background(), "a"), ["Paused"]);
    h.feed(Input::Workload(Change::Deleted(Workload::from_job(&job("vision", "b", "low", 8, 1, 10, None)).unwrap())));
    assert!(admitted(&h.cycle()).is_empty(), "paused a stays out while n1 is free");
    h.feed(workload(&with_annotation(released, "fairway.dev/paused", Some("false"))));
    assert_eq!(admitted(&h.cycle()), [("a".to_owned(), vec!["n1".to_owned()])], "unpaused, it runs");
}

fn class_with(name: &str, value: i32, annotations: &[(&str, &str)]) -> PriorityClass {
    let mut c = class(name, value);
    c.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    c
}

/// Rule 1 from a PriorityClass's annotations, across a controller restart: the victim's
/// record says it was preempted 10 minutes ago and its class allows one preemption an
/// hour, so a high job waits (and says why) until that hour is over.
#[test]
fn a_class_cap_on_preemptions_an_hour_holds_across_a_restart() {
    let mut h = Harness::new();
    let low = class_with("low", 1000, &[(fairway_spec::PREEMPTIONS_PER_HOUR_ANNOTATION, "1")]);
    let earlier = h.now - 600_000;
    let victim = with_annotation(
        job("vision", "nightly", "low", 8, 1, 0, Some(&["n1"])),
        "fairway.dev/preempted-at",
        Some(&earlier.to_string()),
    );
    let running = pod("vision", "nightly-x", "uid-nightly", 8, Some("n1"), "fairway");
    h.start(vec![node("n1", 8)], vec![class("high", 1_000_000), low], vec![victim], vec![running], vec![]);
    h.cycle();
    h.feed(workload(&job("ads", "ctr", "high", 8, 1, 50, None)));
    assert!(suspended(&h.cycle()).is_empty(), "the victim was preempted once this hour already");
    let said: Vec<String> = h
        .background()
        .into_iter()
        .filter_map(|a| match a {
            Action::Condition { target, message, .. } if target.name == "ctr" => Some(message),
            _ => None,
        })
        .collect();
    // Until the hour since that preemption is over, said as a time people read.
    let until = fairway_server::clock::time_text(earlier + 3_600_000);
    assert!(said.iter().any(|m| m.contains(&format!("protected from preemption until {until}"))), "{said:?}");
    h.now = earlier + 3_600_000;
    let actions = h.cycle();
    assert_eq!(suspended(&actions), [("nightly".to_owned(), Some("ads/ctr".to_owned()))]);
    let history = actions.iter().find_map(|a| match a {
        Action::Suspend { preemption: Some(p), .. } => Some(p.history.clone()),
        _ => None,
    });
    assert_eq!(history, Some(vec![h.now]), "the record keeps the last hour only");
}

#[test]
fn a_class_with_a_bad_protection_annotation_refuses_its_jobs_and_names_the_annotation() {
    let mut h = Harness::new();
    let bad = class_with("gold", 10, &[(fairway_spec::MIN_RUN_ANNOTATION, "ten minutes")]);
    h.start(vec![node("n1", 8)], vec![bad], vec![job("ads", "j", "gold", 1, 1, 0, None)], vec![], vec![]);
    assert!(admitted(&h.cycle()).is_empty());
    let said = h.background();
    let refused = said.iter().find_map(|a| match a {
        Action::Event { warning: true, message, .. } => Some(message.clone()),
        _ => None,
    });
    let refused = refused.expect("the refusal is said");
    assert!(
        refused.contains("fairway.dev/min-run-before-preemption-seconds") && refused.contains("ten minutes"),
        "{refused}"
    );
}

/// Fair sharing between namespaces (`fair_share` in the settings): with one GPU free, the
/// Job of the namespace holding nothing is admitted before an older Job of the namespace
/// already holding a GPU; without the setting, the older one goes first.
#[test]
fn fair_sharing_admits_the_namespace_holding_least_first() {
    let admitted_with = |settings: Settings| {
        let mut h = Harness::with_settings(settings);
        let jobs = vec![
            job("sweep", "s1", "medium", 1, 1, 0, Some(&["n1"])),
            job("sweep", "s2", "medium", 1, 1, 1, None),
            job("nlp", "n-1", "medium", 1, 1, 2, None),
        ];
        let running = pod("sweep", "s1-x", "uid-s1", 1, Some("n1"), "fairway");
        h.start(vec![node("n1", 2)], vec![class("medium", 1000)], jobs, vec![running], vec![]);
        admitted(&h.cycle()).into_iter().map(|(name, _)| name).collect::<Vec<_>>()
    };
    assert_eq!(admitted_with(Settings::default()), ["s2"]);
    let fair = Settings::parse("fair_share: { half_life_seconds: 0 }\n").expect("valid settings");
    assert_eq!(admitted_with(fair), ["n-1"]);
}

/// Fair sharing's memory across leaders (`recent_usage.rs`). A leader with a half-life of an
/// hour runs sweep's Job on the one GPU: its first cycle hands out the recent averages to
/// save, the next ones within the minute do not, and an hour later sweep's recent average
/// is half a GPU, as the formula says (held for one half-life from nothing). A new leader
/// given that document admits nlp's Job before sweep's older one; a new leader without it
/// admits sweep's, the older.
#[test]
fn fair_sharings_recent_averages_are_saved_and_read_back_by_a_new_leader() {
    use fairway_kube::recent_usage::SavedRecentUsage;
    let settings = Settings::parse("fair_share: { half_life_seconds: 3600 }\n").expect("valid settings");
    let saves = |actions: Vec<Action>| -> Vec<(String, SavedRecentUsage)> {
        let saves = actions.into_iter().filter_map(|a| match a {
            Action::SaveRecentUsage { namespace, json } => Some((namespace, SavedRecentUsage::parse(&json).unwrap())),
            _ => None,
        });
        saves.collect()
    };
    let mut first = Harness::with_settings(settings.clone());
    let running = pod("sweep", "burst-x", "uid-burst", 1, Some("n1"), "fairway");
    let burst = job("sweep", "burst", "medium", 1, 1, 0, Some(&["n1"]));
    first.start(vec![node("n1", 1)], vec![class("medium", 1000)], vec![burst], vec![running], vec![]);
    first.cycle();
    let at_start = saves(first.background());
    assert_eq!(at_start.len(), 1, "saved at the first cycle");
    assert_eq!(at_start[0].0, "fairway-system", "in the controller's namespace");
    first.now += 30_000;
    first.cycle();
    assert!(saves(first.background()).is_empty(), "not again within the minute");
    first.now += 3_600_000 - 30_000;
    first.cycle();
    let [(_, saved)] = saves(first.background()).try_into().expect("one save an hour later");
    assert_eq!(saved.as_of_ms, first.now);
    let sweep = saved.accounts.iter().find(|a| a.kind == "project" && a.account == "sweep").expect("sweep is saved");
    assert_eq!(sweep.gpu_milli, 500, "{saved:?}");

    let admitted_by_new_leader = |saved: Option<SavedRecentUsage>| {
        let mut h = Harness::with_settings(settings.clone());
        h.now = first.now + 1_000;
        if let Some(saved) = saved {
            h.engine.set_saved_recent_usage(saved);
        }
        let jobs =
            vec![job("sweep", "queued", "medium", 1, 1, 10, None), job("nlp", "light", "medium", 1, 1, 20, None)];
        h.start(vec![node("n1", 1)], vec![class("medium", 1000)], jobs, vec![], vec![]);
        admitted(&h.cycle()).into_iter().map(|(name, _)| name).collect::<Vec<_>>()
    };
    // A namespace with no Job left is still listed with its share: its recent average is
    // what ranks its next Job.
    let mut idle = Harness::with_settings(settings.clone());
    idle.engine.set_saved_recent_usage(saved.clone());
    idle.start(vec![node("n1", 1)], vec![], vec![], vec![], vec![]);
    idle.cycle();
    let metrics = fairway_kube::http::KubeMetrics::new();
    fairway_kube::http::refresh_metrics(&mut idle.engine, &metrics);
    let text = metrics.encode();
    let share: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("fairway_quota_fair_share{kind=\"project\",account=\"sweep\"} "))
        .unwrap_or_else(|| panic!("sweep's share is not listed in\n{text}"))
        .parse()
        .unwrap();
    assert!(share > 0.0, "{share}");

    assert_eq!(admitted_by_new_leader(Some(saved)), ["light"]);
    assert_eq!(admitted_by_new_leader(None), ["queued"]);
}

/// The saved document is read back whole or refused with the field named.
#[test]
fn a_saved_recent_usage_document_is_refused_with_the_field_named() {
    use fairway_kube::recent_usage::SavedRecentUsage;
    let good = r#"{"as_of_ms": 5, "accounts": [{"kind": "user", "account": "ana", "gpu_milli": 250}]}"#;
    let saved = SavedRecentUsage::parse(good).unwrap();
    assert_eq!((saved.as_of_ms, saved.accounts[0].recent().gpu_milli), (5, 250));
    assert_eq!(SavedRecentUsage::parse(&saved.to_json()), Ok(saved));
    let bad_kind = r#"{"as_of_ms": 5, "accounts": [{"kind": "cohort", "account": "lab", "gpu_milli": 1}]}"#;
    let err = SavedRecentUsage::parse(bad_kind).unwrap_err();
    assert!(err.contains("accounts[0].kind") && err.contains("cohort"), "{err}");
    let err = SavedRecentUsage::parse(r#"{"as_of_ms": 5, "accounts": [], "extra": 1}"#).unwrap_err();
    assert!(err.contains("extra"), "{err}");
    let err = SavedRecentUsage::parse(r#"{"accounts": []}"#).unwrap_err();
    assert!(err.contains("as_of_ms"), "{err}");
}

/// Users' weights from the settings (`fair_share.user_weights`): in one namespace alice holds
/// 2 GPUs and bob 1 of 4; with one GPU free and a Job of each waiting, bob's (newer) goes
/// first, as he holds less; weighted 3, alice is served as if she held a third of hers, and
/// her older Job goes first.
#[test]
fn a_users_weight_in_the_settings_ranks_her_jobs_in_her_namespace() {
    let by = |mut j: Job, user: &str| {
        j.metadata.labels = Some([("fairway.dev/user".to_owned(), user.to_owned())].into());
        j
    };
    let admitted_with = |settings: &str| {
        let mut h = Harness::with_settings(Settings::parse(settings).expect("valid settings"));
        let jobs = vec![
            by(job("ads", "a1", "medium", 2, 1, 0, Some(&["n1"])), "alice"),
            by(job("ads", "b1", "medium", 1, 1, 1, Some(&["n1"])), "bob"),
            by(job("ads", "a2", "medium", 1, 1, 10, None), "alice"),
            by(job("ads", "b2", "medium", 1, 1, 20, None), "bob"),
        ];
        let pods = vec![
            pod("ads", "a1-x", "uid-a1", 2, Some("n1"), "fairway"),
            pod("ads", "b1-x", "uid-b1", 1, Some("n1"), "fairway"),
        ];
        h.start(vec![node("n1", 4)], vec![class("medium", 1000)], jobs, pods, vec![]);
        admitted(&h.cycle()).into_iter().map(|(name, _)| name).collect::<Vec<_>>()
    };
    assert_eq!(admitted_with("fair_share: { half_life_seconds: 0 }\n"), ["b2"]);
    let weighted = "fair_share: { half_life_seconds: 0, user_weights: [{ user: alice, weight: 3 }] }\n";
    assert_eq!(admitted_with(weighted), ["a2"]);
}

#[test]
fn a_namespace_fair_share_weight_annotation_is_read_or_refused_by_name() {
    use fairway_kube::workload::{FAIR_SHARE_WEIGHT, fair_share_weight};
    let with = |v: &str| Some(std::collections::BTreeMap::from([(FAIR_SHARE_WEIGHT.to_string(), v.to_string())]));
    assert_eq!(fair_share_weight(None), Ok(1));
    assert_eq!(fair_share_weight(with("3").as_ref()), Ok(3));
    for bad in ["0", "two", "-1", "99999999999"] {
        let err = fair_share_weight(with(bad).as_ref()).expect_err(bad);
        assert!(err.contains(FAIR_SHARE_WEIGHT) && err.contains(bad), "{err}");
    }
}

fn cohort_namespace(name: &str, annotations: &[(&str, &str)]) -> k8s_openapi::api::core::v1::Namespace {
    let list: Vec<String> = annotations.iter().map(|(k, v)| format!("{k}: \"{v}\"")).collect();
    from_yaml(&format!("metadata: {{ name: {name}, annotations: {{ {} }} }}\n", list.join(", ")))
}

/// Cohorts from Namespace annotations: vision and speech (nominal 1 GPU each, cohort lab)
/// share 2 GPUs. Vision's two Jobs both run (one on speech's idle GPU); speech's Job, of the
/// same class and within speech's nominal quota, reclaims it: one of vision's Jobs is
/// suspended for it. Without the cohort, speech's Job would have to wait (same priority).
/// A listed cluster of one node of 2 GPUs, the class `medium`, namespaces vision and speech
/// annotated with `lab`, and `jobs` (namespace, name, created) of one GPU each at `medium`.
fn vision_and_speech_on_two_gpus(lab: &[(&str, &str)], jobs: &[(&str, &str, u64)]) -> Harness {
    let mut h = Harness::new();
    for stream in Stream::ALL {
        h.feed(Input::Listing(stream));
    }
    h.feed(Input::Namespace(Change::Applied(cohort_namespace("vision", lab))));
    h.feed(Input::Namespace(Change::Applied(cohort_namespace("speech", lab))));
    h.feed(Input::Node(Change::Applied(node("n1", 2))));
    h.feed(Input::Class(Change::Applied(class("medium", 1000))));
    for &(namespace, name, created) in jobs {
        let j = job(namespace, name, "medium", 1, 1, created, None);
        h.feed(Input::Workload(Change::Applied(Workload::from_job(&j).unwrap())));
    }
    for stream in Stream::ALL {
        h.feed(Input::Listed(stream));
    }
    h
}

#[test]
fn namespace_annotations_put_projects_in_a_cohort_that_lends_and_reclaims() {
    use fairway_kube::workload::{COHORT, NOMINAL_GPUS};
    let run = |annotated: bool| {
        let lab: &[(&str, &str)] = if annotated { &[(COHORT, "lab"), (NOMINAL_GPUS, "1")] } else { &[] };
        let mut h = vision_and_speech_on_two_gpus(lab, &[("vision", "v1", 0), ("vision", "v2", 1)]);
        assert_eq!(admitted(&h.cycle()).len(), 2, "vision borrows speech's idle GPU");
        // The cohort gauges say so: vision uses 2 GPUs of its nominal 1, borrowing 1.
        let metrics = fairway_kube::http::KubeMetrics::new();
        fairway_kube::http::refresh_metrics(&mut h.engine, &metrics);
        let text = metrics.encode();
        let borrowed = "fairway_cohort_member_gpus_borrowed{cohort=\"lab\",project=\"vision\"} 1";
        let used = "fairway_cohort_member_gpus_used{cohort=\"lab\",project=\"vision\"} 2";
        for line in [borrowed, used] {
            assert_eq!(text.lines().any(|l| l == line), annotated, "{line} in\n{text}");
        }
        let j = job("speech", "s1", "medium", 1, 1, 2, None);
        h.feed(Input::Workload(Change::Applied(Workload::from_job(&j).unwrap())));
        suspended(&h.cycle())
    };
    let reclaimed = run(true);
    assert_eq!(reclaimed.len(), 1, "{reclaimed:?}");
    assert_eq!(reclaimed[0].1.as_deref(), Some("speech/s1"));
    assert!(run(false).is_empty(), "without the cohort nothing is preempted at the same priority");
}

/// Preemption rule 8 in the controller: a Job one cycle would admit and then suspend for a
/// reclaimer of the same cycle is not admitted at all. Vision and speech lend one GPU each
/// on a node of 2. In one cycle vision's v1 and v2 would be admitted, one of them borrowing
/// speech's idle GPU, and speech's s1, within its nominal quota, would reclaim one: that
/// admission is taken back (the Job is never unsuspended, nor suspended again) and s1 is
/// admitted at once.
#[test]
fn a_job_one_cycle_would_admit_and_reclaim_is_not_admitted() {
    use fairway_kube::workload::{COHORT, NOMINAL_GPUS};
    let lab: &[(&str, &str)] = &[(COHORT, "lab"), (NOMINAL_GPUS, "1")];
    let jobs = [("vision", "v1", 0), ("vision", "v2", 1), ("speech", "s1", 2)];
    let mut h = vision_and_speech_on_two_gpus(lab, &jobs);
    let actions = h.cycle();
    // Which of vision's two is taken back is rule 5's tie-break, by id (here a hash of the
    // Job's uid): one of them, and s1.
    let names: Vec<String> = admitted(&actions).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names.len(), 2, "{actions:?}");
    assert!(names.contains(&"s1".to_string()) && names.iter().any(|n| n.starts_with('v')), "{actions:?}");
    assert!(suspended(&actions).is_empty(), "{actions:?}");
    let stats = h.engine.stats();
    assert_eq!((stats.starts_taken_back, stats.preemptions, stats.admissions), (1, 0, 2));
    let metrics = fairway_kube::http::KubeMetrics::new();
    fairway_kube::http::refresh_metrics(&mut h.engine, &metrics);
    let text = metrics.encode();
    assert!(text.lines().any(|l| l == "fairway_starts_taken_back_total 1"), "{text}");
}

/// A namespace whose annotations make a place that does not hold with its cohort's other
/// members (a lending limit above its nominal quota) is in no cohort, and the cohort list,
/// which its owner can read where the controller's log is out of reach, says so and why;
/// fixed, it joins.
#[test]
fn a_namespace_left_out_of_its_cohort_is_listed_with_why() {
    use fairway_kube::workload::{COHORT, LENDING_LIMIT_GPUS, NOMINAL_GPUS};
    let mut h = Harness::new();
    h.start(vec![node("n1", 4)], vec![class("medium", 1000)], vec![], vec![], vec![]);
    h.feed(Input::Namespace(Change::Applied(cohort_namespace("vision", &[(COHORT, "lab"), (NOMINAL_GPUS, "2")]))));
    let bad = [(COHORT, "lab"), (NOMINAL_GPUS, "1"), (LENDING_LIMIT_GPUS, "3")];
    h.feed(Input::Namespace(Change::Applied(cohort_namespace("speech", &bad))));
    let members = |h: &Harness| -> Vec<(String, Option<String>)> {
        let list = fairway_kube::http::cohort_list(&h.engine);
        list.cohorts
            .iter()
            .flat_map(|c| c.members.iter().map(|m| (m.member.project.clone(), m.left_out.clone())))
            .collect()
    };
    let listed = members(&h);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed.iter().find(|(p, _)| p == "vision").map(|(_, why)| why.clone()), Some(None), "{listed:?}");
    let why = listed
        .iter()
        .find(|(p, _)| p == "speech")
        .and_then(|(_, why)| why.clone())
        .expect("speech said to be left out");
    assert!(why.contains("more than the nominal quota 1"), "{why}");
    let lab = fairway_kube::http::cohort_list(&h.engine).cohorts.into_iter().find(|c| c.name == "lab").unwrap();
    assert_eq!(lab.capacity.gpus, Some(2), "only vision's nominal quota is lent in lab");
    let fixed = [(COHORT, "lab"), (NOMINAL_GPUS, "1"), (LENDING_LIMIT_GPUS, "1")];
    h.feed(Input::Namespace(Change::Applied(cohort_namespace("speech", &fixed))));
    assert!(members(&h).iter().all(|(_, why)| why.is_none()), "{:?}", members(&h));
    let lab = fairway_kube::http::cohort_list(&h.engine).cohorts.into_iter().find(|c| c.name == "lab").unwrap();
    assert_eq!(lab.capacity.gpus, Some(3));
    // Annotations that cannot be read are listed under the cohort they name too, with the
    // annotation and why, and nothing of the place; fixed, the namespace is in again.
    let unreadable = [(COHORT, "lab"), (NOMINAL_GPUS, "four")];
    h.feed(Input::Namespace(Change::Applied(cohort_namespace("speech", &unreadable))));
    let lab = fairway_kube::http::cohort_list(&h.engine).cohorts.into_iter().find(|c| c.name == "lab").unwrap();
    let speech = lab.members.iter().find(|m| m.member.project == "speech").expect("speech listed under lab");
    assert_eq!(
        speech.left_out.as_deref(),
        Some("fairway.dev/nominal-gpus: must be a whole number of GPUs, got \"four\"")
    );
    assert_eq!(speech.member.nominal, fairway_spec::LimitsDoc::default());
    assert_eq!(lab.capacity.gpus, Some(2), "only vision's nominal quota is lent in lab");
    h.feed(Input::Namespace(Change::Applied(cohort_namespace("speech", &fixed))));
    assert!(members(&h).iter().all(|(_, why)| why.is_none()), "{:?}", members(&h));
    assert_eq!(members(&h).len(), 2, "speech listed once: {:?}", members(&h));
    // A namespace deleted is listed nowhere, readable or not.
    h.feed(Input::Namespace(Change::Applied(cohort_namespace("speech", &unreadable))));
    h.feed(Input::Namespace(Change::Deleted(cohort_namespace("speech", &unreadable))));
    assert_eq!(members(&h), [("vision".to_string(), None)]);
}

/// A namespace over its cohort's borrowing limit is told so, naming the cohort and the
/// annotations: not "(ResourceQuota)", which it may not have. Vision (nominal 1 GPU,
/// borrowing limit 1, no ResourceQuota) runs two Jobs on the idle 4-GPU node; its third
/// waits over the borrowing limit. With a ResourceQuota of 1 GPU, the quota is what binds.
#[test]
fn a_job_over_its_borrowing_limit_is_told_which_limit() {
    use fairway_kube::workload::{BORROWING_LIMIT_GPUS, COHORT, NOMINAL_GPUS};
    let said_to_v3 = |quota: Option<ResourceQuota>| {
        let mut h = Harness::new();
        let jobs =
            [("v1", 0), ("v2", 1), ("v3", 2)].map(|(name, created)| job("vision", name, "medium", 1, 1, created, None));
        h.start(vec![node("n1", 4)], vec![class("medium", 1000)], jobs.to_vec(), vec![], quota.into_iter().collect());
        let vision = [(COHORT, "lab"), (NOMINAL_GPUS, "1"), (BORROWING_LIMIT_GPUS, "1")];
        h.feed(Input::Namespace(Change::Applied(cohort_namespace("vision", &vision))));
        h.feed(Input::Namespace(Change::Applied(cohort_namespace("speech", &[(COHORT, "lab"), (NOMINAL_GPUS, "3")]))));
        let started = admitted(&h.cycle()).len();
        let said: Vec<String> = h
            .background()
            .into_iter()
            .filter_map(|a| match a {
                Action::Condition { target, message, .. } if target.name == "v3" => Some(message),
                _ => None,
            })
            .collect();
        (started, said)
    };
    let (started, said) = said_to_v3(None);
    assert_eq!(started, 2, "{said:?}");
    let borrowing = "over its borrowing limit: namespace vision uses 2 of the 2 nvidia.com/gpu it may use in \
                     cohort lab (its fairway.dev/nominal-gpus plus fairway.dev/borrowing-limit-gpus); it asks 1";
    assert!(said.len() == 1 && said[0].starts_with(borrowing), "{said:?}");
    let quota =
        from_yaml("metadata: { name: gpus, namespace: vision }\nspec: { hard: { requests.nvidia.com/gpu: \"1\" } }\n");
    let (started, said) = said_to_v3(Some(quota));
    assert_eq!(started, 1, "{said:?}");
    let quota = "over quota: namespace vision uses 1 of its 1 nvidia.com/gpu (ResourceQuota); it asks 1";
    assert!(said.len() == 1 && said[0].starts_with(quota), "{said:?}");
}

/// A Job asking more than its namespace can ever hold in its cohort is told so, in the
/// ResourceQuota's names: speech keeps 1 of its 2 GPUs unlent, so vision can hold at most 3
/// of lab's 4 however idle the node is.
#[test]
fn a_job_larger_than_its_cohort_can_ever_lend_is_told_so() {
    use fairway_kube::workload::{COHORT, LENDING_LIMIT_GPUS, NOMINAL_GPUS};
    let mut h = Harness::new();
    let jobs = vec![job("vision", "huge", "medium", 4, 1, 0, None)];
    h.start(vec![node("n1", 8)], vec![class("medium", 1000)], jobs, vec![], vec![]);
    h.feed(Input::Namespace(Change::Applied(cohort_namespace("vision", &[(COHORT, "lab"), (NOMINAL_GPUS, "2")]))));
    let speech = [(COHORT, "lab"), (NOMINAL_GPUS, "2"), (LENDING_LIMIT_GPUS, "1")];
    h.feed(Input::Namespace(Change::Applied(cohort_namespace("speech", &speech))));
    assert!(admitted(&h.cycle()).is_empty());
    let said: Vec<String> = h
        .background()
        .into_iter()
        .filter_map(|a| match a {
            Action::Condition { target, message, .. } if target.name == "huge" => Some(message),
            _ => None,
        })
        .collect();
    let expected = "cohort lab lends no more: 1 of its 4 nvidia.com/gpu are in use or kept for their owners \
                    (namespaces' fairway.dev/cohort annotations); it asks 4; namespace vision can never hold more \
                    than 3 nvidia.com/gpu in cohort lab (the members' nominal quotas, less what the others keep \
                    unlent), so it waits until the cohort changes";
    assert!(said.len() == 1 && said[0].starts_with(expected), "{said:?}");
}

#[test]
fn cohort_annotations_are_read_or_refused_by_name() {
    use fairway_kube::workload::{
        BORROWING_LIMIT_GPUS, COHORT, LENDING_LIMIT_GPUS, NOMINAL_CPU, NOMINAL_GPUS, cohort_member,
    };
    let with = |pairs: &[(&str, &str)]| {
        Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<std::collections::BTreeMap<_, _>>())
    };
    assert_eq!(cohort_member("ads", None), Ok(None));
    let (cohort, member) = cohort_member(
        "ads",
        with(&[
            (COHORT, "lab"),
            (NOMINAL_GPUS, "4"),
            (NOMINAL_CPU, "16"),
            (BORROWING_LIMIT_GPUS, "2"),
            (LENDING_LIMIT_GPUS, "1"),
        ])
        .as_ref(),
    )
    .unwrap()
    .expect("a member");
    assert_eq!(
        (cohort.as_str(), member.project.as_str(), member.nominal.gpus, member.nominal.cpu_millis),
        ("lab", "ads", Some(4), Some(16_000))
    );
    assert_eq!((member.borrowing_limit.unwrap().gpus, member.lending_limit.unwrap().gpus), (Some(2), Some(1)));
    let cases: [(&[(&str, &str)], &str); 5] = [
        (&[(NOMINAL_GPUS, "4")], COHORT),
        // The cohort name rule of every driver, said with the annotation's key.
        (&[(COHORT, "my lab"), (NOMINAL_GPUS, "4")], "fairway.dev/cohort: must not contain whitespace"),
        (&[(COHORT, "lab")], NOMINAL_GPUS),
        (&[(COHORT, "lab"), (NOMINAL_GPUS, "four")], NOMINAL_GPUS),
        (&[(COHORT, "lab"), (NOMINAL_GPUS, "4"), (NOMINAL_CPU, "lots")], NOMINAL_CPU),
    ];
    for (pairs, named) in cases {
        let err = cohort_member("ads", with(pairs).as_ref()).expect_err(named);
        assert!(err.contains(named), "{pairs:?}: {err}");
    }
}

/// The condition messages said about `name`, oldest first.
fn condition_messages(said: &[Action], name: &str) -> Vec<String> {
    conditions_about(said, name).map(|(_, message)| message.clone()).collect()
}

fn with_deadline(mut j: Job, seconds: i64) -> Job {
    j.spec.as_mut().unwrap().active_deadline_seconds = Some(seconds);
    j
}

/// A pending Job's condition says where it is in the queue and when it is expected to
/// start: `train` holds the only node from 08:10 for at most its activeDeadlineSeconds (an
/// hour), so `eval`, first in line, is expected at 09:10, and `report` behind it once
/// `eval`'s half hour is over, at 09:40. Nothing is written again while the estimates hold;
/// when `eval` leaves, `report` moves up, in its condition only (its reason is the same, so
/// no Event).
#[test]
fn a_pending_jobs_condition_gives_its_place_in_the_queue_and_its_expected_start() {
    let mut h = Harness::new();
    // The first cycle runs at 2027-01-15T08:10:00Z.
    h.now = 1_800_000_600_000 - 100;
    let train = with_deadline(job("ml", "train", "low", 8, 1, 0, None), 3600);
    h.start(vec![node("n1", 8)], vec![class("low", 1000)], vec![train], vec![], vec![]);
    assert_eq!(admitted(&h.cycle()), [("train".to_owned(), vec!["n1".to_owned()])]);
    assert_eq!(condition_messages(&h.background(), "train"), ["admitted by Fairway; runs on n1"]);

    let eval = with_deadline(job("ml", "eval", "low", 8, 1, 10, None), 1800);
    h.feed(workload(&eval));
    h.feed(workload(&job("ml", "report", "low", 8, 1, 20, None)));
    assert!(admitted(&h.cycle()).is_empty(), "train holds the node");
    let said = h.background();
    let eval_said = condition_messages(&said, "eval");
    assert_eq!(eval_said.len(), 1, "{said:?}");
    assert!(
        eval_said[0].ends_with("; position 1 in the queue, expected to start at 2027-01-15T09:10Z"),
        "{eval_said:?}"
    );
    let report_said = condition_messages(&said, "report");
    assert_eq!(report_said.len(), 1, "{said:?}");
    assert!(
        report_said[0].ends_with("; position 2 in the queue, expected to start at 2027-01-15T09:40Z"),
        "{report_said:?}"
    );
    // The Events say the reasons, without the estimates.
    let events: Vec<&String> = said
        .iter()
        .filter_map(|a| match a {
            Action::Event { target, message, .. } if target.name != "train" => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(events.len(), 2, "{said:?}");
    assert!(events.iter().all(|m| !m.contains("position")), "{events:?}");

    // A sweep later, the same estimates: nothing is written.
    h.now += 20_000;
    h.cycle();
    assert_eq!(h.background(), [], "nothing changed");

    // `eval` is deleted: at the next sweep `report` is first, expected when `train` ends.
    h.feed(Input::Workload(Change::Deleted(Workload::from_job(&eval).unwrap())));
    h.now += 20_000;
    h.cycle();
    let said = h.background();
    let report_said = condition_messages(&said, "report");
    assert_eq!(report_said.len(), 1, "{said:?}");
    assert!(
        report_said[0].ends_with("; position 1 in the queue, expected to start at 2027-01-15T09:10Z"),
        "{report_said:?}"
    );
    assert!(
        !said.iter().any(|a| matches!(a, Action::Event { target, .. } if target.name == "report")),
        "the same reason: no Event ({said:?})"
    );
}

/// With reservations on, the condition of the Job that holds one also says where its GPUs
/// are reserved; a Job ranked below it says only its place and expected start.
#[test]
fn the_condition_of_a_job_holding_a_reservation_names_its_nodes() {
    let settings = Settings::parse("reservations: { count: 1, default_runtime_seconds: 3600 }\n").unwrap();
    let mut h = Harness::with_settings(settings);
    h.now = 1_800_000_600_000 - 100;
    let train = with_deadline(job("ml", "train", "low", 8, 1, 0, None), 3600);
    h.start(vec![node("n1", 8), node("n2", 4)], vec![class("low", 1000)], vec![train], vec![], vec![]);
    assert_eq!(admitted(&h.cycle()).len(), 1);
    h.background();
    h.feed(workload(&with_deadline(job("ml", "eval", "low", 8, 1, 10, None), 1800)));
    h.feed(workload(&job("ml", "report", "low", 8, 1, 20, None)));
    assert!(admitted(&h.cycle()).is_empty(), "train holds the only node of 8 GPUs");
    let said = h.background();
    let eval_said = condition_messages(&said, "eval");
    assert!(
        eval_said.len() == 1
            && eval_said[0].ends_with(
                "; position 1 in the queue, expected to start at 2027-01-15T09:10Z; \
                 the GPUs it needs are reserved for it on n1"
            ),
        "{eval_said:?}"
    );
    let report_said = condition_messages(&said, "report");
    assert!(
        report_said.len() == 1 && report_said[0].ends_with("expected to start at 2027-01-15T09:40Z"),
        "{report_said:?}"
    );
}

/// A managed Job of one pod asking `nvidia.com/gpu: 1` and `cores` of HAMi's
/// `nvidia.com/gpucores` (a percentage of one GPU).
fn share_job(name: &str, cores: u32, gpus: u32, parallelism: u32, created_s: u64) -> Job {
    let created = jiff::Timestamp::from_second(1_800_000_000 + created_s as i64).unwrap();
    from_yaml(&format!(
        "metadata: {{ name: {name}, namespace: ads, uid: uid-{name}, creationTimestamp: \"{created}\" }}\n\
         spec:\n  suspend: true\n  parallelism: {parallelism}\n  template:\n    spec:\n      schedulerName: fairway\n\
         \x20     priorityClassName: medium\n      restartPolicy: Never\n\
         \x20     containers: [{{ name: c, image: busybox, resources: {{ limits: {{ nvidia.com/gpu: \"{gpus}\", nvidia.com/gpucores: \"{cores}\" }} }} }}]\n"
    ))
}

fn refusals(said: &[Action]) -> Vec<String> {
    said.iter()
        .filter_map(|a| match a {
            Action::Event { warning: true, message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// With `gpu_share` set to HAMi's convention, `nvidia.com/gpucores: 60` beside
/// `nvidia.com/gpu: 1` is a share of 600 thousandths: shares of 60 and 40 go on the one GPU
/// of a node that reports it ten times (`splits_per_gpu: 10`); one of 30 waits; 100 cores is
/// a whole GPU. A share with 2 GPUs, or of a 2-pod Job, is refused by field.
#[test]
fn shares_are_read_from_the_configured_share_resource() {
    let settings =
        Settings::parse("gpu_share: { resource: nvidia.com/gpucores, units_per_gpu: 100, splits_per_gpu: 10 }\n")
            .expect("valid settings");
    let mut h = Harness::with_settings(settings);
    let jobs = vec![
        share_job("a", 60, 1, 1, 0),
        share_job("b", 40, 1, 1, 1),
        share_job("c", 30, 1, 1, 2),
        share_job("two-gpus", 30, 2, 1, 3),
        share_job("gang", 30, 1, 2, 4),
    ];
    h.start(vec![node("n1", 10)], vec![class("medium", 1000)], jobs, vec![], vec![]);
    let mut got = admitted(&h.cycle());
    got.sort();
    assert_eq!(got, [("a".to_owned(), vec!["n1".to_owned()]), ("b".to_owned(), vec!["n1".to_owned()])]);
    let said = refusals(&h.background());
    assert!(
        said.iter().any(|m| m.contains("nvidia.com/gpucores") && m.contains("with nvidia.com/gpu 1, got 2")),
        "{said:?}"
    );
    assert!(said.iter().any(|m| m.contains("one-pod Jobs")), "{said:?}");
}

/// Without `gpu_share`, a Job asking for part of a GPU by a sharing device plugin's resource
/// (or a sharing scheduler's annotation) is refused, the reason naming the setting; it is not
/// given a whole GPU it did not ask for.
#[test]
fn a_share_is_refused_where_the_controller_shares_no_gpu() {
    let mut h = Harness::new();
    h.start(vec![node("n1", 8)], vec![class("medium", 1000)], vec![share_job("a", 50, 1, 1, 0)], vec![], vec![]);
    assert!(admitted(&h.cycle()).is_empty());
    let said = refusals(&h.background());
    assert!(said.iter().any(|m| m.contains("nvidia.com/gpucores") && m.contains("set gpu_share")), "{said:?}");
    for bad in [
        "gpu_share: { resource: nvidia.com/gpu }\n",
        "gpu_share: { resource: nvidia.com/gpucores, units_per_gpu: 1 }\n",
        "gpu_share: { resource: nvidia.com/gpucores, splits_per_gpu: 0 }\n",
    ] {
        let err = Settings::parse(bad).expect_err(bad);
        assert!(err.starts_with("gpu_share."), "{err}");
    }
}

/// A node whose `status.images` lists these names.
fn node_with_images(name: &str, gpus: u32, images: &[&str]) -> Node {
    let list: Vec<String> = images.iter().map(|i| format!("{{ names: [\"{i}\"], sizeBytes: 1000 }}")).collect();
    from_yaml(&format!(
        "metadata: {{ name: {name}, labels: {{ nvidia.com/gpu.product: A100 }} }}\n\
         status:\n  allocatable: {{ nvidia.com/gpu: \"{gpus}\", cpu: \"64\", memory: 512Gi }}\n\
         \x20 conditions: [{{ type: Ready, status: \"True\" }}]\n\
         \x20 images: [{}]\n",
        list.join(", ")
    ))
}

/// Image locality from `node.status.images`: of two equal nodes, the Job (image `busybox`)
/// goes to the one that holds `docker.io/library/busybox:latest` (the same image, written
/// out), not to the lower name; without it, to the lower name.
#[test]
fn a_job_goes_to_the_node_that_holds_its_image() {
    let placed_on = |nodes: Vec<Node>| {
        let mut h = Harness::new();
        h.start(nodes, vec![class("medium", 1000)], vec![job("ads", "j", "medium", 1, 1, 0, None)], vec![], vec![]);
        admitted(&h.cycle())
    };
    let with = placed_on(vec![
        node("n1", 8),
        node_with_images("n2", 8, &["docker.io/library/busybox:latest", "nvcr.io/nvidia/pytorch:24.05-py3"]),
    ]);
    assert_eq!(with, [("j".to_owned(), vec!["n2".to_owned()])]);
    let without = placed_on(vec![node("n1", 8), node_with_images("n2", 8, &["docker.io/library/ubuntu:24.04"])]);
    assert_eq!(without, [("j".to_owned(), vec!["n1".to_owned()])]);
}
