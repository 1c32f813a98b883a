//! Answers to queries, built from the core's state and its machine-readable reasons, with
//! ids turned back into names.

use std::collections::{BTreeMap, BTreeSet};

use fairway_core::{JobStatus, LimitSource, PendingReason};
use fairway_store::JobState;
use serde_json::json;

use super::{AccountKind, Command, Engine, LiveView, core_id};
use crate::api::{
    FORECAST_JOBS_MAX, GpuView, Health, NodeList, NodeView, PreemptionView, PriorityClassList, PriorityClassView,
    QuotaList, ReasonView, ReservationView, StartEstimateView,
};
use crate::dashboard::{DashJob, Inputs, PENDING_LISTED_MAX};

impl Engine {
    /// Step 7 of the loop.
    pub(crate) fn answer(&mut self, query: Command) {
        match query {
            Command::Live { ids, reply } => {
                let mut views: BTreeMap<i64, LiveView> =
                    ids.into_iter().filter_map(|id| self.live_view(id).map(|v| (id, v))).collect();
                self.fill_queue_positions(&mut views);
                let _ = reply.send(views);
            }
            Command::Nodes { reply } => {
                let _ = reply.send(self.nodes_view());
            }
            Command::Quotas { reply } => {
                let _ = reply.send(self.quotas_view());
            }
            Command::Cohorts { reply } => {
                let _ = reply.send(self.cohorts_view());
            }
            Command::Classes { reply } => {
                let _ = reply.send(self.classes_view());
            }
            Command::Health { reply } => {
                let _ = reply.send(self.health());
            }
            Command::Dashboard { reply } => {
                let _ = reply.send(self.dashboard_inputs());
            }
            Command::Projects { reply } => {
                let _ = reply.send(self.projects_view());
            }
            _ => unreachable!("only queries are deferred"),
        }
    }

    pub(crate) fn live_view(&self, id: i64) -> Option<LiveView> {
        if let Some(at) = self.jobs.get(&id).and_then(|j| j.retry_at_ms) {
            return Some(LiveView { reasons: vec![self.backoff_reason(id, at)], ..LiveView::default() });
        }
        match self.core.job_status(core_id(id))? {
            JobStatus::Pending { reasons, .. } => Some(LiveView {
                reasons: reasons.iter().map(|r| self.reason_view(r)).collect(),
                reservation: ReservationView::of_job(&self.core, core_id(id), |n| self.cluster.node_name(n)),
                fair_share: crate::api::FairShareView::of_job(
                    &self.core,
                    core_id(id),
                    fairway_core::Time(self.now_ms()),
                ),
                ..LiveView::default()
            }),
            JobStatus::Preempting { preemptor, deadline, .. } => Some(LiveView {
                preemption: Some(PreemptionView { preemptor: preemptor.0 as i64, deadline_ms: deadline.millis() }),
                ..LiveView::default()
            }),
            _ => Some(LiveView::default()),
        }
    }

    /// Positions in the core's pending order and expected starts, from one forecast of the
    /// first [`FORECAST_JOBS_MAX`] pending jobs (the queue read no further than the last
    /// pending job asked about).
    fn fill_queue_positions(&self, views: &mut BTreeMap<i64, LiveView>) {
        let wanted: BTreeSet<fairway_core::JobId> =
            views.keys().filter(|id| self.jobs.get(id).is_some_and(|j| !j.in_flight)).map(|&id| core_id(id)).collect();
        if wanted.is_empty() {
            return;
        }
        let now = fairway_core::Time(self.now_ms());
        for e in self.core.forecast_jobs(now, &wanted, FORECAST_JOBS_MAX) {
            if let Some(view) = views.get_mut(&(e.job.0 as i64)) {
                view.queue_position = Some(u64::from(e.position));
                view.start_estimate = Some(StartEstimateView::of(e.start));
            }
        }
    }

    /// A job waiting out a retry's backoff: when it returns to the queue, and why.
    fn backoff_reason(&self, id: i64, retry_at_ms: u64) -> ReasonView {
        let job = &self.jobs[&id];
        let in_s = retry_at_ms.saturating_sub(self.now_ms()).div_ceil(1000);
        let retries = job.resolved.doc.retries;
        let message = format!(
            "its last run failed; it returns to the queue in {in_s}s (failure {} of {} allowed before it is marked failed)",
            job.failures,
            retries + 1
        );
        let data = json!({"retry_at_ms": retry_at_ms, "failures": job.failures, "retries": retries});
        let data = match data {
            serde_json::Value::Object(map) => map.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        ReasonView { code: "retry_backoff".into(), message, data }
    }

    /// A reason with names instead of the core's ids.
    pub(crate) fn reason_view(&self, reason: &PendingReason) -> ReasonView {
        let model = |m: Option<fairway_core::GpuModel>| m.and_then(|m| self.interner.name_of(m)).map(str::to_owned);
        let (message, data) = match reason {
            PendingReason::OverQuota { account, resource, requested, used, limit, limit_from } => {
                let (kind, name) = self.account_name(*account);
                let [requested, used, limit] = [requested, used, limit].map(|a| amount_value(*resource, *a));
                let unit = unit_text(*resource);
                match limit_from {
                    LimitSource::Quota => (
                        format!(
                            "over quota: {kind} {name} uses {used} of its {limit} {unit}; the job asks {requested}"
                        ),
                        json!({"account_kind": kind, "account": name, "resource": resource.name(), "requested": requested, "used": used, "limit": limit, "limit_from": "quota"}),
                    ),
                    LimitSource::BorrowingLimit { cohort } => {
                        let (_, cohort) = self.account_name(*cohort);
                        (
                            format!(
                                "over its borrowing limit: {kind} {name} uses {used} of the {limit} {unit} it may use in cohort {cohort} (its nominal quota plus borrowing limit); the job asks {requested}"
                            ),
                            json!({"account_kind": kind, "account": name, "resource": resource.name(), "requested": requested, "used": used, "limit": limit, "limit_from": "borrowing_limit", "cohort": cohort}),
                        )
                    }
                }
            }
            PendingReason::CohortExhausted { cohort, project, resource, requested, used, limit } => {
                let (_, name) = self.account_name(*cohort);
                let (_, project_name) = self.account_name(*project);
                let most = self.core.cohort_most(*project, *resource);
                // Asking more than the project can ever hold there is not a wait for work
                // to end, and says so.
                let never = match most {
                    Some(most) if most < *requested => format!(
                        "; project {project_name} can never hold more than {} {} in cohort {name} (its members' nominal quotas, less what the others keep unlent), so it waits until the cohort changes",
                        amount_value(*resource, most),
                        unit_text(*resource)
                    ),
                    _ => String::new(),
                };
                let most = most.map(|m| amount_value(*resource, m));
                let [requested, used, limit] = [requested, used, limit].map(|a| amount_value(*resource, *a));
                (
                    format!(
                        "cohort {name} lends no more: {used} of its {limit} {} are in use or kept for their owners; the job asks {requested}{never}",
                        unit_text(*resource)
                    ),
                    json!({"cohort": name, "resource": resource.name(), "requested": requested, "used": used, "limit": limit, "most": most}),
                )
            }
            PendingReason::NeverFits {
                gpus_per_replica,
                gpu_model,
                resource,
                requested,
                largest,
                replicas,
                replicas_max,
            } => {
                let of_model = model(*gpu_model).map(|m| format!(" of {m}")).unwrap_or_default();
                let message = match resource {
                    None if *replicas_max > 0 => format!(
                        "the nodes{of_model} can never hold its {replicas} replicas of {gpus_per_replica} GPUs at once: at most {replicas_max} when empty"
                    ),
                    Some(fairway_core::ResourceKind::Gpu) => format!(
                        "no node{of_model} can ever hold a replica of {gpus_per_replica} GPUs (the largest has {largest})"
                    ),
                    Some(kind) => format!(
                        "no node{of_model} can ever hold a replica: it asks {requested} {}, the largest node has {largest}",
                        unit_text(*kind)
                    ),
                    None => format!("no node{of_model} has at once all that a replica asks"),
                };
                let data = json!({
                    "gpus_per_replica": gpus_per_replica,
                    "gpu_model": model(*gpu_model),
                    "resource": resource.map(|k| k.name()),
                    "requested": requested,
                    "largest": largest,
                    "replicas": replicas,
                    "replicas_max": replicas_max,
                });
                (message, data)
            }
            PendingReason::NoFit { gpus_per_replica, replicas, gpu_model, gpus_free_max, nodes_matching } => (
                format!(
                    "no room: needs {replicas}x{gpus_per_replica} GPUs{}; the most free on one node is {gpus_free_max} (of {nodes_matching} nodes)",
                    model(*gpu_model).map(|m| format!(" of {m}")).unwrap_or_default()
                ),
                json!({"gpus_per_replica": gpus_per_replica, "replicas": replicas, "gpu_model": model(*gpu_model), "gpus_free_max": gpus_free_max, "nodes_matching": nodes_matching}),
            ),
            PendingReason::NoShareFit { gpu_milli, gpu_model, share_free_max, nodes_matching } => (
                format!(
                    "no room: needs {gpu_milli}/1000 of one GPU{}; the most free on one GPU is {share_free_max}/1000 (of {nodes_matching} nodes)",
                    model(*gpu_model).map(|m| format!(" of {m}")).unwrap_or_default()
                ),
                json!({"gpu_milli": gpu_milli, "gpu_model": model(*gpu_model), "share_free_max": share_free_max, "nodes_matching": nodes_matching}),
            ),
            PendingReason::WaitingForPreemption { victims } => {
                let ids: Vec<i64> = victims.iter().map(|v| v.0 as i64).collect();
                (
                    format!(
                        "waiting for the preemption of {}; their GPUs are held for this job",
                        self.names_of(&ids).join(", ")
                    ),
                    json!({"victims": ids}),
                )
            }
            PendingReason::HeldForReservation { job, at } => (
                format!(
                    "held for the reservation of {}, ranked above it and expected to start at {}: this job would run past then on the GPUs it needs",
                    self.name_of(job.0 as i64),
                    crate::clock::time_text(at.millis())
                ),
                json!({"job": job.0, "at_ms": at.millis()}),
            ),
            PendingReason::BlockedBehind { job, priority } => (
                format!(
                    "blocked behind {} (priority {priority}), which is waiting for GPUs",
                    self.name_of(job.0 as i64)
                ),
                json!({"job": job.0, "priority": priority}),
            ),
            PendingReason::VictimsProtected { until } => (
                format!(
                    "the lower-priority work that would make room is protected from preemption (its class's minimum run or hourly limit); the first protection ends at {}",
                    crate::clock::time_text(until.millis())
                ),
                json!({"until_ms": until.millis()}),
            ),
            PendingReason::PreemptionDelayed { until } => (
                format!(
                    "waits for free GPUs before preempting (its class's preemption delay, or that of the job ahead of it with the same tier, tenant and shape); it may preempt from {}",
                    crate::clock::time_text(until.millis())
                ),
                json!({"until_ms": until.millis()}),
            ),
            other => (other.to_string(), json!({})),
        };
        let data = match data {
            serde_json::Value::Object(map) => map.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        ReasonView { code: reason.label().into(), message, data }
    }

    /// Every unfinished job as the dashboard lists it: pending ones with their place in the
    /// queue, and for the first [`PENDING_LISTED_MAX`] their reason and expected start;
    /// placed ones with where they run.
    fn dashboard_inputs(&mut self) -> Inputs {
        let now = self.now_ms();
        let order = self.core.pending_by_rank(fairway_core::Time(now));
        let positions: BTreeMap<i64, u64> =
            order.iter().enumerate().map(|(i, id)| (id.0 as i64, i as u64 + 1)).collect();
        let listed: BTreeSet<fairway_core::JobId> =
            order.iter().take(PENDING_LISTED_MAX.min(FORECAST_JOBS_MAX)).copied().collect();
        let estimates: BTreeMap<i64, StartEstimateView> = self
            .core
            .forecast_jobs(fairway_core::Time(now), &listed, FORECAST_JOBS_MAX)
            .into_iter()
            .map(|e| (e.job.0 as i64, StartEstimateView::of(e.start)))
            .collect();
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for (&id, job) in &self.jobs {
            let gpus = self.core.job_spec(core_id(id)).map_or(0, |s| s.total().gpus);
            let mut view = DashJob {
                id,
                name: job.resolved.doc.name.clone(),
                tenant: job.resolved.doc.project.clone(),
                user: job.resolved.doc.user.clone(),
                tier: super::tier_name(&job.resolved).to_owned(),
                priority: job.resolved.priority,
                state: job.state.as_str().to_owned(),
                gpus,
                wait_seconds: 0.0,
                preemptions: job.preemptions,
                position: positions.get(&id).copied(),
                start_estimate: estimates.get(&id).cloned(),
                reserved_from_ms: None,
                reason: None,
                reason_code: None,
                placement: None,
                preemptor: None,
                may_cancel: false,
            };
            if job.state == JobState::Pending {
                view.wait_seconds = job.pending_since_ms.map_or(0, |since| now.saturating_sub(since)) as f64 / 1000.0;
                let first = job.retry_at_ms.is_some() || listed.contains(&core_id(id));
                if let Some(reason) = self.live_view(id).filter(|_| first).and_then(|v| v.reasons.into_iter().next()) {
                    view.reason = Some(reason.message);
                    view.reason_code = Some(reason.code);
                }
                view.reserved_from_ms = self.core.reservation_of(core_id(id)).map(|r| r.at.millis());
            }
            match self.core.job_status(core_id(id)) {
                Some(JobStatus::Running { placement, .. } | JobStatus::Stopping { placement, .. }) => {
                    view.placement = Some(self.placement_text(placement));
                }
                Some(JobStatus::Preempting { placement, preemptor, .. }) => {
                    view.placement = Some(self.placement_text(placement));
                    view.preemptor = Some(preemptor.0 as i64);
                }
                _ => {}
            }
            jobs.push(view);
        }
        Inputs {
            now_ms: now,
            driver: "server",
            jobs,
            nodes: self.nodes_view(),
            quotas: self.quotas_view().quotas,
            cohorts: self.cohorts_view().cohorts,
        }
    }

    fn nodes_view(&self) -> NodeList {
        let mut nodes: Vec<NodeView> = self
            .cluster
            .layout
            .nodes
            .iter()
            .map(|n| NodeView {
                name: n.name.clone(),
                gpu_model: n.gpu_model.clone(),
                gpus_total: n.gpus.len() as u32,
                gpus_allocated: 0,
                cpu_millis: n.cpu_millis,
                memory_mib: n.memory_mib,
                schedulable: true,
                gpus: n.gpus.iter().map(|g| GpuView::free(g.index)).collect(),
                reservations: Vec::new(),
            })
            .collect();
        for (node, reservations) in crate::api::node_reservations(&self.core) {
            if let Some(view) = nodes.get_mut(node.0 as usize) {
                view.reservations = reservations;
            }
        }
        for (&id, job) in &self.jobs {
            let (placement, held) = match self.core.job_status(core_id(id)) {
                Some(
                    JobStatus::Running { placement, .. }
                    | JobStatus::Preempting { placement, .. }
                    | JobStatus::Stopping { placement, .. },
                ) => (placement, false),
                Some(JobStatus::Pending { reserved: Some(placement), .. }) => (placement, true),
                _ => continue,
            };
            let share = job.resolved.doc.resources.gpu_milli;
            for replica in placement.replicas() {
                let Some(node) = nodes.get_mut(replica.node.0 as usize) else { continue };
                for g in replica.gpus.iter() {
                    let Some(gpu) = node.gpus.get_mut(g as usize) else { continue };
                    gpu.occupy(id, held, share);
                }
            }
        }
        for node in &mut nodes {
            node.gpus_allocated = node.gpus.iter().filter(|g| g.job.is_some()).count() as u32;
        }
        let source = match self.cluster.source {
            fairway_exec::GpuSource::Nvml => "nvml",
            fairway_exec::GpuSource::Simulated => "simulated",
        };
        NodeList { nodes, gpu_source: source.into() }
    }

    pub(crate) fn quotas_view(&mut self) -> QuotaList {
        let mut accounts: BTreeSet<(String, String)> = BTreeSet::new();
        if let Ok(rows) = self.store.quotas() {
            accounts.extend(rows.into_iter().map(|r| (r.account_kind, r.account)));
        }
        if self.config.file.fair_share.is_some()
            && let Ok(rows) = self.store.fair_share_weights()
        {
            accounts.extend(rows.into_iter().map(|r| (r.account_kind, r.account)));
        }
        for job in self.jobs.values().filter(|j| j.in_flight) {
            accounts.insert(("project".into(), job.resolved.doc.project.clone()));
            accounts.insert(("user".into(), job.resolved.doc.user.clone()));
        }
        // With fair sharing, a tenant that holds nothing now but did lately: its recent
        // average is what ranks its next job behind others'.
        for (account, _) in self.core.recent_usage(fairway_core::Time(self.now_ms())) {
            if let Some((kind @ (AccountKind::User | AccountKind::Project), name)) = self.interner.account_name(account)
            {
                accounts.insert((kind.as_str().to_owned(), name.to_owned()));
            }
        }
        let mut quotas = Vec::new();
        for (kind, name) in accounts {
            let Some(k) = AccountKind::parse(&kind) else { continue };
            let Ok(id) = self.account(k, &name) else { continue };
            quotas.push(self.quota_view(k, &name, id));
        }
        QuotaList { quotas }
    }

    fn classes_view(&self) -> PriorityClassList {
        PriorityClassList {
            priority_classes: self
                .classes
                .iter()
                .map(|c| PriorityClassView {
                    name: c.name.clone(),
                    value: c.value,
                    preemption_policy: format!("{:?}", c.preemption_policy),
                    global_default: c.global_default,
                    min_run_before_preemption_seconds: c.protection.min_run_seconds,
                    preemptions_per_hour_max: c.protection.preemptions_per_hour_max,
                    overrides_preemption_protection: c.protection.overrides_protection,
                    preemption_delay_seconds: c.protection.preemption_delay_seconds,
                    description: Some(c.description.clone()).filter(|d| !d.is_empty()),
                })
                .collect(),
        }
    }

    fn health(&self) -> Health {
        let (total, allocated) = self.core.gpu_totals();
        let pending = self.jobs.values().filter(|j| j.state == JobState::Pending).count() as u64;
        Health {
            status: if self.degraded.is_some() { "degraded" } else { "ok" }.into(),
            problem: self.degraded.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            jobs_pending: pending,
            jobs_running: self.jobs.len() as u64 - pending,
            gpus_total: total,
            gpus_allocated: allocated,
            container_runtime: self.runtime.as_ref().map(|r| r.kind.program().to_owned()),
            images: self.images.read().map(|i| i.clone()).unwrap_or_default(),
        }
    }
}

/// A reason's amount (`ResourceKind::amount`) as the API gives it: GPUs in GPUs, an integer
/// when whole and a decimal for shares (`0.6`); CPU and memory as they are.
/// A resource's unit as a message names it (the data keeps `ResourceKind::name`).
fn unit_text(kind: fairway_core::ResourceKind) -> &'static str {
    match kind {
        fairway_core::ResourceKind::Gpu => "GPUs",
        fairway_core::ResourceKind::Cpu => "CPU millicores",
        fairway_core::ResourceKind::Memory => "MiB of memory",
    }
}

fn amount_value(kind: fairway_core::ResourceKind, amount: u64) -> serde_json::Value {
    match kind {
        fairway_core::ResourceKind::Gpu if !amount.is_multiple_of(1000) => json!(amount as f64 / 1000.0),
        fairway_core::ResourceKind::Gpu => json!(amount / 1000),
        _ => json!(amount),
    }
}

#[cfg(test)]
mod tests {
    use fairway_core::ResourceKind;

    #[test]
    fn reason_amounts_are_gpus_integers_when_whole_decimals_for_shares() {
        assert_eq!(super::amount_value(ResourceKind::Gpu, 4000).to_string(), "4");
        assert_eq!(super::amount_value(ResourceKind::Gpu, 600).to_string(), "0.6");
        assert_eq!(super::amount_value(ResourceKind::Memory, 600).to_string(), "600");
    }
}
