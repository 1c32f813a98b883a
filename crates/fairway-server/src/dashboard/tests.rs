use super::*;
use crate::api::{GpuView, NodeView, QuotaView};
use fairway_store::Role;

fn job(id: i64, tenant: &str, tier: &str, priority: i32, state: &str, gpus: u32) -> DashJob {
    DashJob {
        id,
        name: format!("job-{id}"),
        tenant: tenant.into(),
        user: format!("{tenant}-user"),
        tier: tier.into(),
        priority,
        state: state.into(),
        gpus,
        wait_seconds: 0.0,
        preemptions: 0,
        position: None,
        start_estimate: None,
        reserved_from_ms: None,
        reason: None,
        reason_code: None,
        placement: None,
        preemptor: None,
        may_cancel: false,
    }
}

fn pending(id: i64, tenant: &str, tier: &str, priority: i32, position: u64, wait_seconds: f64) -> DashJob {
    let eta = StartEstimateView { kind: "at".into(), at_ms: Some(1000 * position) };
    DashJob {
        position: Some(position),
        wait_seconds,
        start_estimate: Some(eta),
        reserved_from_ms: None,
        ..job(id, tenant, tier, priority, "pending", 1)
    }
}

/// One node of four GPUs: 0 and 1 held by job 1 (ads), 2 by job 2 (vision), 3 held for job 3
/// (vision's preemptor).
fn inputs(jobs: Vec<DashJob>) -> Inputs {
    let gpu = |index, job, held_for| GpuView { index, job, held_for, shares: Vec::new() };
    let node = NodeView {
        name: "node-0".into(),
        gpu_model: "A100".into(),
        gpus_total: 4,
        gpus_allocated: 3,
        cpu_millis: 64_000,
        memory_mib: 512_000,
        schedulable: true,
        gpus: vec![gpu(0, Some(1), None), gpu(1, Some(1), None), gpu(2, Some(2), None), gpu(3, None, Some(3))],
        // ads' job 4 and vision's job 3 have reserved GPUs here.
        reservations: vec![
            crate::api::NodeReservationView { job: 4, gpus: 2, at_ms: 5_000 },
            crate::api::NodeReservationView { job: 3, gpus: 1, at_ms: 6_000 },
        ],
    };
    let quota = |kind: &str, account: &str| QuotaView {
        kind: kind.into(),
        account: account.into(),
        gpus_max: Some(4),
        cpu_millis_max: None,
        memory_mib_max: None,
        gpus_used: 2,
        gpu_milli_used: 2000,
        cpu_millis_used: 0,
        memory_mib_used: 0,
        fair_share: None,
        fair_share_weight: None,
    };
    Inputs {
        now_ms: 5000,
        driver: "server",
        jobs,
        nodes: NodeList { nodes: vec![node], gpu_source: "simulated".into() },
        quotas: vec![quota("project", "ads"), quota("project", "vision"), quota("user", "ads-user")],
        cohorts: Vec::new(),
    }
}

fn jobs() -> Vec<DashJob> {
    vec![
        job(1, "ads", "medium", 100, "running", 2),
        job(2, "vision", "low", 1, "preempting", 1),
        pending(3, "vision", "high", 1000, 1, 30.0),
        pending(4, "ads", "medium", 100, 3, 90.0),
        pending(5, "ads", "medium", 100, 2, 10.0),
        job(6, "ads", "medium", 100, "pending", 1),
    ]
}

fn who(role: Role, user: &str, project: &str) -> Identity {
    Identity { token_id: 1, token_name: "t".into(), user: user.into(), project: project.into(), role }
}

#[test]
fn queues_sum_every_job_highest_tier_first_and_name_their_head() {
    let d = assemble(inputs(jobs()));
    let rows: Vec<(&str, &str, u64, u64, u64, f64)> = d
        .queues
        .iter()
        .map(|q| (q.tier.as_str(), q.tenant.as_str(), q.pending, q.placed, q.gpus_allocated, q.oldest_wait_seconds))
        .collect();
    assert_eq!(
        rows,
        [("high", "vision", 1, 0, 0, 30.0), ("medium", "ads", 3, 1, 2, 90.0), ("low", "vision", 0, 1, 1, 0.0)]
    );
    // The head of ads/medium is job 5 (position 2), not the longest-waiting job 4.
    assert_eq!(d.queues[1].head_start_estimate.as_ref().and_then(|e| e.at_ms), Some(2000));
    assert_eq!(d.pending.iter().map(|j| j.id).collect::<Vec<_>>(), [3, 5, 4, 6], "queue order; unranked last");
    assert_eq!(d.placed.iter().map(|j| j.id).collect::<Vec<_>>(), [1, 2], "highest priority first");
    assert_eq!((d.gpus_total, d.gpus_allocated, d.gpus_held), (4, 3, 1));
    let names: Vec<Option<&str>> = d.nodes[0].gpus.iter().map(|g| g.job_name.as_deref()).collect();
    assert_eq!(names, [Some("job-1"), Some("job-1"), Some("job-2"), None]);
    assert_eq!(d.nodes[0].gpus[3].held_for_tenant.as_deref(), Some("vision"));
}

#[test]
fn the_lists_are_bounded_and_the_totals_count_the_rest() {
    let many: Vec<DashJob> =
        (0..PENDING_LISTED_MAX as i64 + 20).map(|i| pending(i + 10, "ads", "low", 1, i as u64 + 1, 1.0)).collect();
    let d = assemble(inputs(many));
    assert_eq!(d.pending.len(), PENDING_LISTED_MAX);
    assert_eq!(d.pending_total, PENDING_LISTED_MAX as u64 + 20);
    assert_eq!(d.queues[0].pending, PENDING_LISTED_MAX as u64 + 20);
    assert_eq!(d.pending[0].position, Some(1));
}

#[test]
fn a_viewer_sees_its_own_project_and_others_gpus_only_as_taken() {
    let d = assemble(inputs(jobs())).for_viewer(&who(Role::Submitter, "ads-user", "ads"));
    assert!(!d.viewer.admin);
    assert_eq!(d.pending.iter().map(|j| j.id).collect::<Vec<_>>(), [5, 4, 6]);
    assert_eq!(d.placed.iter().map(|j| j.id).collect::<Vec<_>>(), [1]);
    assert_eq!((d.pending_total, d.placed_total), (3, 1));
    assert!(d.queues.iter().all(|q| q.tenant == "ads"));
    assert!(d.pending.iter().chain(&d.placed).all(|j| j.may_cancel), "a submitter cancels its own jobs");
    let gpus = &d.nodes[0].gpus;
    assert_eq!(gpus[0].job_name.as_deref(), Some("job-1"));
    for g in &gpus[2..] {
        assert!(
            g.other_tenant && g.job.is_none() && g.job_name.is_none() && g.tenant.is_none() && g.held_for.is_none(),
            "{g:?}"
        );
    }
    // Its own reservation by name; another project's as GPUs reserved, no more.
    let reserved: Vec<(Option<&str>, u32, bool)> =
        d.nodes[0].reserved.iter().map(|r| (r.job_name.as_deref(), r.gpus, r.other_tenant)).collect();
    assert_eq!(reserved, [(Some("job-4"), 2, false), (None, 1, true)]);
    assert!(d.nodes[0].reserved[1].job.is_none() && d.nodes[0].reserved[1].tenant.is_none());
    let accounts: Vec<&str> = d.quotas.iter().map(|q| q.account.as_str()).collect();
    assert_eq!(accounts, ["ads", "ads-user"]);
    // Its totals still count every GPU: taken is taken.
    assert_eq!((d.gpus_total, d.gpus_allocated, d.gpus_held), (4, 3, 1));
    let json = serde_json::to_string(&d).unwrap();
    assert!(!json.contains("vision"), "nothing of another project leaks: {json}");
}

#[test]
fn an_admin_sees_every_reservation_on_a_node_by_job_and_tenant() {
    let d = assemble(inputs(jobs()));
    let reserved: Vec<String> = d.nodes[0]
        .reserved
        .iter()
        .map(|r| format!("{:?} {:?} {:?} {} {}", r.job, r.job_name, r.tenant, r.gpus, r.at_ms))
        .collect();
    assert_eq!(
        reserved,
        [r#"Some(4) Some("job-4") Some("ads") 2 5000"#, r#"Some(3) Some("job-3") Some("vision") 1 6000"#]
    );
}

#[test]
fn a_viewer_role_may_not_cancel_and_an_admin_sees_and_may_cancel_everything() {
    let viewer = assemble(inputs(jobs())).for_viewer(&who(Role::Viewer, "ads-user", "ads"));
    assert!(viewer.pending.iter().chain(&viewer.placed).all(|j| !j.may_cancel));
    let admin = assemble(inputs(jobs())).for_viewer(&who(Role::Admin, "root", "ops"));
    assert_eq!(admin.pending.len() + admin.placed.len(), 6);
    assert!(admin.pending.iter().chain(&admin.placed).all(|j| j.may_cancel));
    assert!(admin.nodes[0].gpus.iter().all(|g| !g.other_tenant));
    let read_only = assemble(inputs(jobs())).read_only();
    assert_eq!(read_only.viewer.role, "read-only");
    assert!(read_only.pending.iter().chain(&read_only.placed).all(|j| !j.may_cancel));
}

#[test]
fn the_page_is_served_with_headers_that_keep_it_to_itself() {
    for path in &ASSET_PATHS[1..] {
        let response = asset(path);
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let csp = response.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(response.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
    assert_eq!(asset("/ui").status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(asset("/ui/other").status(), StatusCode::NOT_FOUND);
    // No inline script or style: the policy above would block it.
    assert!(!INDEX_HTML.contains("<script>") && !INDEX_HTML.contains("style="), "{INDEX_HTML}");
    assert!(!APP_JS.contains("innerHTML"), "text goes in through textContent, never as markup");
}
