//! The dashboard, the same in both drivers: a page (HTML, script and style embedded in the
//! binary, served without a token because they hold no data) and one snapshot,
//! `GET /v1/dashboard`, that the page polls. Each driver lists what it knows in the common
//! wire types ([`DashJob`], `NodeList`, `QuotaList`, `CohortList`); [`assemble`] turns that
//! into the page's view (queues, who holds which GPU, the first jobs of the queue, bounded)
//! and [`Dashboard::for_viewer`] cuts it down to what a token may see.

use std::collections::BTreeMap;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::api::{CohortView, NodeList, QuotaView, StartEstimateView};
use crate::auth::Identity;

/// Pending jobs the snapshot lists (the first in queue order); the rest are counted.
pub const PENDING_LISTED_MAX: usize = 500;
/// Placed jobs (running, preempting, stopping) the snapshot lists; the rest are counted.
pub const PLACED_LISTED_MAX: usize = 500;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
const FAVICON_SVG: &str = include_str!("assets/favicon.svg");

/// The page's routes, served without a token.
pub const ASSET_PATHS: &[&str] = &["/ui", "/ui/", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg"];

/// A job as the dashboard shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DashJob {
    pub id: i64,
    pub name: String,
    pub tenant: String,
    pub user: String,
    /// Its priority class, or `custom`.
    pub tier: String,
    pub priority: i32,
    /// `pending`, `running`, `preempting`, `stopping`.
    pub state: String,
    pub gpus: u32,
    /// Pending: how long since it last entered the queue. Placed: 0.
    pub wait_seconds: f64,
    pub preemptions: u32,
    /// Pending: its place in the scheduling order (1 goes first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// Pending: when it is expected to start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_estimate: Option<StartEstimateView>,
    /// Pending: it holds a reservation of the GPUs it needs, from this time (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_from_ms: Option<u64>,
    /// Pending: why it waits (the scheduler's first reason), and its stable code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    /// Placed: where (`node-0: GPUs 0,1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// Preempting: the job it gives way to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptor: Option<i64>,
    /// Whether the viewer may cancel it (set by [`Dashboard::for_viewer`]).
    #[serde(default)]
    pub may_cancel: bool,
}

impl DashJob {
    /// From the API's view of a job (the Kubernetes driver's way in); `position` from the
    /// core's queue order.
    pub fn from_view(v: &crate::api::JobView, position: Option<u64>) -> DashJob {
        let pending = v.state == crate::api::JobState::Pending;
        let first = v.reasons.first();
        DashJob {
            id: v.id,
            name: v.name.clone(),
            tenant: v.project.clone(),
            user: v.user.clone(),
            tier: v.priority_class.clone().unwrap_or_else(|| "custom".into()),
            priority: v.priority,
            state: v.state.as_str().to_owned(),
            gpus: v.gpus_per_replica * v.replicas,
            wait_seconds: if pending { v.wait_seconds } else { 0.0 },
            preemptions: v.preemptions,
            position: position.filter(|_| pending),
            start_estimate: v.start_estimate.clone().filter(|_| pending),
            reserved_from_ms: v.reservation.as_ref().map(|r| r.at_ms).filter(|_| pending),
            reason: first.map(|r| r.message.clone()).filter(|_| pending),
            reason_code: first.map(|r| r.code.clone()).filter(|_| pending),
            placement: (!v.placement.is_empty()).then(|| {
                v.placement.iter().map(|r| format!("{} GPUs {}", r.node, list(&r.gpus))).collect::<Vec<_>>().join("; ")
            }),
            preemptor: v.preemption.as_ref().map(|p| p.preemptor),
            may_cancel: false,
        }
    }
}

fn list(gpus: &[u32]) -> String {
    gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// One queue: a tier and a tenant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DashQueue {
    pub tier: String,
    pub priority: i32,
    pub tenant: String,
    pub pending: u64,
    pub placed: u64,
    pub gpus_allocated: u64,
    pub oldest_wait_seconds: f64,
    /// Its first pending job's expected start, if the forecast reached it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_start_estimate: Option<StartEstimateView>,
}

/// A GPU and who holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DashGpu {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Held for this preemptor while its victims terminate, and its tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_for: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_for_tenant: Option<String>,
    /// Held by a job the viewer may not see.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub other_tenant: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DashNode {
    pub name: String,
    pub gpu_model: String,
    pub schedulable: bool,
    pub gpus: Vec<DashGpu>,
    /// GPUs pending jobs have reserved here: why free GPUs may stay idle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved: Vec<DashReserved>,
}

/// GPUs a pending job has reserved on a node, from when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DashReserved {
    pub gpus: u32,
    pub at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// For a job the viewer may not see.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub other_tenant: bool,
}

/// Who is looking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    pub user: String,
    pub project: String,
    /// `viewer`, `submitter`, `admin`; `read-only` where nothing can be changed from here
    /// (the Kubernetes driver).
    pub role: String,
    pub admin: bool,
}

/// The snapshot the page polls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dashboard {
    pub generated_at_ms: u64,
    /// `server` or `kubernetes`.
    pub driver: String,
    pub viewer: Viewer,
    pub gpus_total: u64,
    pub gpus_allocated: u64,
    /// GPUs promised to a preemptor: free, or still held by a victim that is stopping.
    pub gpus_held: u64,
    pub nodes: Vec<DashNode>,
    pub queues: Vec<DashQueue>,
    /// The first pending jobs in queue order, at most [`PENDING_LISTED_MAX`].
    pub pending: Vec<DashJob>,
    pub pending_total: u64,
    /// Placed jobs by priority then id, at most [`PLACED_LISTED_MAX`].
    pub placed: Vec<DashJob>,
    pub placed_total: u64,
    pub quotas: Vec<QuotaView>,
    pub cohorts: Vec<CohortView>,
}

/// What a driver hands to [`assemble`].
pub struct Inputs {
    pub now_ms: u64,
    pub driver: &'static str,
    /// Every unfinished job; pending ones with their position where known.
    pub jobs: Vec<DashJob>,
    pub nodes: NodeList,
    pub quotas: Vec<QuotaView>,
    pub cohorts: Vec<CohortView>,
}

/// The page's view of everything (an admin's): queues summed over every job, GPUs named by
/// their holders, the first jobs listed.
pub fn assemble(inputs: Inputs) -> Dashboard {
    let Inputs { now_ms, driver, jobs, nodes, quotas, cohorts } = inputs;
    let by_id: BTreeMap<i64, &DashJob> = jobs.iter().map(|j| (j.id, j)).collect();
    let mut gpus_total = 0;
    let mut gpus_allocated = 0;
    let mut gpus_held = 0;
    let nodes: Vec<DashNode> = nodes
        .nodes
        .into_iter()
        .map(|n| DashNode {
            gpus: n
                .gpus
                .iter()
                .map(|g| {
                    gpus_total += 1;
                    gpus_allocated += u64::from(g.job.is_some());
                    gpus_held += u64::from(g.held_for.is_some());
                    let holder = g.job.and_then(|id| by_id.get(&id));
                    DashGpu {
                        index: g.index,
                        job: g.job,
                        job_name: holder.map(|j| j.name.clone()),
                        tenant: holder.map(|j| j.tenant.clone()),
                        tier: holder.map(|j| j.tier.clone()),
                        held_for: g.held_for,
                        held_for_tenant: g.held_for.and_then(|id| by_id.get(&id)).map(|j| j.tenant.clone()),
                        other_tenant: false,
                    }
                })
                .collect(),
            reserved: n
                .reservations
                .iter()
                .map(|r| {
                    let job = by_id.get(&r.job);
                    DashReserved {
                        gpus: r.gpus,
                        at_ms: r.at_ms,
                        job: Some(r.job),
                        job_name: job.map(|j| j.name.clone()),
                        tenant: job.map(|j| j.tenant.clone()),
                        other_tenant: false,
                    }
                })
                .collect(),
            name: n.name,
            gpu_model: n.gpu_model,
            schedulable: n.schedulable,
        })
        .collect();
    let queues = queues_of(&jobs);
    let (mut pending, mut placed): (Vec<DashJob>, Vec<DashJob>) = jobs.into_iter().partition(|j| j.state == "pending");
    pending.sort_by_key(|j| (j.position.unwrap_or(u64::MAX), j.id));
    placed.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.id));
    let (pending_total, placed_total) = (pending.len() as u64, placed.len() as u64);
    pending.truncate(PENDING_LISTED_MAX);
    placed.truncate(PLACED_LISTED_MAX);
    Dashboard {
        generated_at_ms: now_ms,
        driver: driver.to_owned(),
        viewer: Viewer { user: String::new(), project: String::new(), role: "admin".into(), admin: true },
        gpus_total,
        gpus_allocated,
        gpus_held,
        nodes,
        queues,
        pending,
        pending_total,
        placed,
        placed_total,
        quotas,
        cohorts,
    }
}

/// Per (tier, tenant): counts, GPUs, the longest wait, the head's estimate; highest tier
/// first, then by tenant.
fn queues_of(jobs: &[DashJob]) -> Vec<DashQueue> {
    /// Highest priority first, then tier and tenant by name.
    type QueueKey = (std::cmp::Reverse<i32>, String, String);
    // Each queue with its head's position so far.
    let mut queues: BTreeMap<QueueKey, (DashQueue, Option<u64>)> = BTreeMap::new();
    for j in jobs {
        let key = (std::cmp::Reverse(j.priority), j.tier.clone(), j.tenant.clone());
        let (q, head) = queues.entry(key).or_insert_with(|| {
            let q = DashQueue {
                tier: j.tier.clone(),
                priority: j.priority,
                tenant: j.tenant.clone(),
                pending: 0,
                placed: 0,
                gpus_allocated: 0,
                oldest_wait_seconds: 0.0,
                head_start_estimate: None,
            };
            (q, None)
        });
        if j.state == "pending" {
            q.pending += 1;
            q.oldest_wait_seconds = q.oldest_wait_seconds.max(j.wait_seconds);
            let position = j.position.unwrap_or(u64::MAX);
            if head.is_none_or(|h| position < h) {
                *head = Some(position);
                q.head_start_estimate = j.start_estimate.clone();
            }
        } else {
            q.placed += 1;
            q.gpus_allocated += u64::from(j.gpus);
        }
    }
    queues.into_values().map(|(q, _)| q).collect()
}

impl Dashboard {
    /// What `who` may see: an admin everything; anyone else its own project's jobs and
    /// queues, its own quotas and cohorts, and the GPUs of other projects as taken, without
    /// names. Cancel buttons where `who` may cancel.
    pub fn for_viewer(mut self, who: &Identity) -> Dashboard {
        self.viewer = Viewer {
            user: who.user.clone(),
            project: who.project.clone(),
            role: who.role.as_str().to_owned(),
            admin: who.is_admin(),
        };
        let owns = |j: &DashJob| who.owns(&j.user, &j.tenant);
        for j in self.pending.iter_mut().chain(self.placed.iter_mut()) {
            j.may_cancel = owns(j);
        }
        if who.is_admin() {
            return self;
        }
        let mine = |tenant: &str| tenant == who.project;
        for gpu in self.nodes.iter_mut().flat_map(|n| n.gpus.iter_mut()) {
            let held_mine = gpu.held_for_tenant.as_deref().is_some_and(mine);
            let held_other = gpu.held_for.is_some() && !held_mine;
            let holder_other = gpu.job.is_some() && !gpu.tenant.as_deref().is_some_and(mine);
            if holder_other {
                (gpu.job, gpu.job_name, gpu.tenant, gpu.tier) = (None, None, None, None);
            }
            if held_other {
                (gpu.held_for, gpu.held_for_tenant) = (None, None);
            }
            gpu.other_tenant = holder_other || held_other;
        }
        for r in self.nodes.iter_mut().flat_map(|n| n.reserved.iter_mut()) {
            if !r.tenant.as_deref().is_some_and(mine) {
                (r.job, r.job_name, r.tenant, r.other_tenant) = (None, None, None, true);
            }
        }
        self.queues.retain(|q| mine(&q.tenant));
        self.pending.retain(|j| mine(&j.tenant));
        self.placed.retain(|j| mine(&j.tenant));
        self.pending_total = self.queues.iter().map(|q| q.pending).sum();
        self.placed_total = self.queues.iter().map(|q| q.placed).sum();
        self.quotas.retain(|q| match q.kind.as_str() {
            "user" => q.account == who.user,
            _ => q.account == who.project,
        });
        self.cohorts.retain(|c| c.members.iter().any(|m| m.member.project == who.project));
        self
    }

    /// The Kubernetes driver's viewer: everyone who reaches it sees everything, and nothing
    /// can be changed from the page (the cluster is the source of truth).
    pub fn read_only(mut self) -> Dashboard {
        self.viewer = Viewer { user: String::new(), project: String::new(), role: "read-only".into(), admin: false };
        for j in self.pending.iter_mut().chain(self.placed.iter_mut()) {
            j.may_cancel = false;
        }
        self
    }
}

/// The page's asset at `path` (one of [`ASSET_PATHS`]), with headers that keep it from
/// being framed, sniffed or made to load anything from elsewhere.
pub fn asset(path: &str) -> Response {
    let (body, content_type) = match path {
        "/ui" => {
            return (StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, HeaderValue::from_static("/ui/"))])
                .into_response();
        }
        "/ui/" => (INDEX_HTML, "text/html; charset=utf-8"),
        "/ui/app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "/ui/app.css" => (APP_CSS, "text/css; charset=utf-8"),
        "/ui/favicon.svg" => (FAVICON_SVG, "image/svg+xml"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let headers = [
        (header::CONTENT_TYPE, content_type),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; \
             frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    (headers, body).into_response()
}

#[cfg(test)]
mod tests;
