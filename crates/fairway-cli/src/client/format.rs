//! Pure formatting of API answers for people: tables, ages, quantities, `describe` text. Every
//! function takes the current time as a parameter, so the output is a function of its input.

use std::fmt::Write;

use fairway_server::api::{
    EventView, GpuView, JobDetail, JobState, JobView, NodeView, PriorityClassView, ProjectView, QuotaView, ReasonView,
    ReplicaView, ReservationView, StartEstimateView, SubmitResponse, TokenView, WhyView,
};

/// Longest reason message the narrow job table shows; `-o wide` shows it whole.
const REASON_CHARS_MAX: usize = 60;

/// An empty cell.
const NONE: &str = "-";

/// Left-aligned columns, three spaces apart, no trailing spaces (kubectl's layout).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        debug_assert_eq!(row.len(), headers.len());
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("   ");
            }
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A duration as one rounded-down unit: `5s`, `3m`, `47h`, `4d` (hours up to two days, like
/// kubectl's ages).
pub fn duration(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3_600 => format!("{}m", seconds / 60),
        3_600..172_800 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// How long ago `at_ms` was (never negative, whatever the clocks say).
pub fn age(at_ms: u64, now_ms: u64) -> String {
    duration(now_ms.saturating_sub(at_ms) / 1_000)
}

/// A point in time as `2026-01-01T12:00:00Z` (whole seconds, UTC).
pub fn timestamp(at_ms: u64) -> String {
    let seconds = i64::try_from(at_ms / 1_000).unwrap_or(i64::MAX);
    match jiff::Timestamp::from_second(seconds) {
        Ok(ts) => ts.to_string(),
        Err(_) => format!("{at_ms} ms"),
    }
}

/// A point in time with how far it is from now: `2026-01-01T12:00:00Z (5m ago)` or `(in 25s)`.
pub fn timestamp_relative(at_ms: u64, now_ms: u64) -> String {
    if at_ms > now_ms {
        format!("{} (in {})", timestamp(at_ms), duration((at_ms - now_ms) / 1_000))
    } else {
        format!("{} ({} ago)", timestamp(at_ms), age(at_ms, now_ms))
    }
}

/// CPU in cores (`64`) or millicores (`2500m`), as Kubernetes writes quantities.
pub fn cpu(millis: u64) -> String {
    if millis.is_multiple_of(1_000) { format!("{}", millis / 1_000) } else { format!("{millis}m") }
}

/// Memory in `Gi` when it is whole gibibytes, else `Mi`.
pub fn memory(mib: u64) -> String {
    if mib != 0 && mib.is_multiple_of(1_024) { format!("{}Gi", mib / 1_024) } else { format!("{mib}Mi") }
}

/// `used/max`, with `-` for an unlimited max.
fn used_of(used: String, max: Option<String>) -> String {
    format!("{used}/{}", max.as_deref().unwrap_or(NONE))
}

fn yes_no(b: bool) -> String {
    if b { "true" } else { "false" }.to_string()
}

/// `high` when the priority came from a class, else the number.
fn priority(job: &JobView) -> String {
    job.priority_class.clone().unwrap_or_else(|| job.priority.to_string())
}

/// `4`, or `2x4` for a gang of two replicas of four GPUs, or `0.25` for a share of one GPU.
fn gpus(job: &JobView) -> String {
    if let Some(milli) = job.gpu_milli {
        return share(milli);
    }
    if job.replicas == 1 {
        job.gpus_per_replica.to_string()
    } else {
        format!("{}x{}", job.replicas, job.gpus_per_replica)
    }
}

/// Thousandths of one GPU as a decimal: `500` is `0.5`, `125` is `0.125`.
fn share(milli: u32) -> String {
    let text = format!("0.{milli:03}");
    text.trim_end_matches('0').to_owned()
}

fn gpu_list(gpus: &[u32]) -> String {
    gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// `node-a[0,1],node-b[2,3]`.
fn placement(replicas: &[ReplicaView]) -> String {
    if replicas.is_empty() {
        return NONE.to_string();
    }
    replicas.iter().map(|r| format!("{}[{}]", r.node, gpu_list(&r.gpus))).collect::<Vec<_>>().join(",")
}

fn truncate(s: &str, chars_max: usize) -> String {
    if s.chars().count() <= chars_max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(chars_max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// The REASON column, like squeue's NODELIST(REASON): why a pending job waits, who preempts
/// a preempting one, how a failed one ended.
fn reason_cell(job: &JobView, wide: bool) -> String {
    match job.state {
        JobState::Pending => match job.reasons.first() {
            Some(first) => {
                let message = if wide { first.message.clone() } else { truncate(&first.message, REASON_CHARS_MAX) };
                let more = job.reasons.len() - 1;
                if more > 0 {
                    format!("{}: {message} (+{more} more)", first.code)
                } else {
                    format!("{}: {message}", first.code)
                }
            }
            None => NONE.to_string(),
        },
        JobState::Preempting => match &job.preemption {
            Some(p) => format!("preempted for job {}", p.preemptor),
            None => NONE.to_string(),
        },
        JobState::Failed => exit_text(job).unwrap_or_else(|| NONE.to_string()),
        _ => NONE.to_string(),
    }
}

/// The ETA column: when a pending job is expected to start, from now (`now`: at the next
/// cycle, or as soon as its victims are gone; `>2h`: not before then; `?`: no estimate).
fn eta_cell(job: &JobView, now_ms: u64) -> String {
    let Some(e) = job.start_estimate.as_ref().filter(|_| job.state == JobState::Pending) else {
        return NONE.to_string();
    };
    let in_s = |at_ms: u64| at_ms.saturating_sub(now_ms) / 1000;
    let eta = match (e.kind.as_str(), e.at_ms) {
        ("at", Some(at)) if in_s(at) == 0 => "now".to_string(),
        ("at", Some(at)) => duration(in_s(at)),
        ("not_before", Some(at)) => format!(">{}", duration(in_s(at))),
        _ => "?".to_string(),
    };
    // The GPUs it waits for are kept for it (`fairway describe` says where).
    if job.reservation.is_some() { format!("{eta} (reserved)") } else { eta }
}

/// Why a job has no expected start: the forecast's `not_placeable`.
const NOT_PLACEABLE: &str = "no node it may use can hold it, or it asks more than a quota allows";

/// The expected start in words, for `describe`.
fn start_estimate_text(e: &StartEstimateView, now_ms: u64) -> String {
    match (e.kind.as_str(), e.at_ms) {
        ("at", Some(at)) => timestamp_relative(at, now_ms),
        ("not_before", Some(at)) => format!("not before {}", timestamp_relative(at, now_ms)),
        ("not_placeable", _) => format!("none: {NOT_PLACEABLE}"),
        _ => "not estimated: it is ranked beyond the jobs forecast".to_string(),
    }
}

/// `exit code 1` or `signal 9`, if the job has exited.
fn exit_text(job: &JobView) -> Option<String> {
    match (job.exit_code, job.exit_signal) {
        (_, Some(signal)) => Some(format!("signal {signal}")),
        (Some(code), None) => Some(format!("exit code {code}")),
        (None, None) => None,
    }
}

/// `fairway ls`: one row per job; `wide` adds the model, restarts, preemptions and placement.
pub fn jobs_table(jobs: &[JobView], now_ms: u64, wide: bool) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            let mut row = vec![
                job.id.to_string(),
                job.name.clone(),
                job.project.clone(),
                job.user.clone(),
                priority(job),
                job.state.as_str().to_string(),
                gpus(job),
            ];
            if wide {
                row.push(job.gpu_model.clone().unwrap_or_else(|| NONE.to_string()));
            }
            row.push(age(job.submitted_at_ms, now_ms));
            row.push(duration(job.wait_seconds.max(0.0) as u64));
            row.push(eta_cell(job, now_ms));
            if wide {
                row.push(job.restart_count.to_string());
                row.push(job.preemptions.to_string());
                row.push(placement(&job.placement));
            }
            row.push(reason_cell(job, wide));
            row
        })
        .collect();
    if wide {
        let headers = [
            "ID",
            "NAME",
            "PROJECT",
            "USER",
            "PRIORITY",
            "STATE",
            "GPUS",
            "MODEL",
            "AGE",
            "WAIT",
            "ETA",
            "RESTARTS",
            "PREEMPTIONS",
            "PLACEMENT",
            "REASON",
        ];
        table(&headers, &rows)
    } else {
        table(&["ID", "NAME", "PROJECT", "USER", "PRIORITY", "STATE", "GPUS", "AGE", "WAIT", "ETA", "REASON"], &rows)
    }
}

/// `fairway nodes`; `wide` adds what runs on each GPU.
pub fn nodes_table(nodes: &[NodeView], wide: bool, now_ms: u64) -> String {
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|node| {
            let mut row = vec![
                node.name.clone(),
                node.gpu_model.clone(),
                node.gpus_total.to_string(),
                node.gpus_allocated.to_string(),
                cpu(node.cpu_millis),
                memory(node.memory_mib),
                yes_no(node.schedulable),
                reserved_cell(&node.reservations, now_ms),
            ];
            if wide {
                row.push(gpu_jobs(&node.gpus));
            }
            row
        })
        .collect();
    let mut headers = vec!["NODE", "MODEL", "GPUS", "ALLOCATED", "CPU", "MEMORY", "SCHEDULABLE", "RESERVED"];
    if wide {
        headers.push("GPU JOBS");
    }
    table(&headers, &rows)
}

/// `4 for job 19 in 5m`: the GPUs each pending job has reserved on the node, from when
/// (`now` once that time has come: the job starts when the GPUs free); `-` for none.
fn reserved_cell(reservations: &[fairway_server::api::NodeReservationView], now_ms: u64) -> String {
    if reservations.is_empty() {
        return NONE.to_string();
    }
    let cells: Vec<String> = reservations
        .iter()
        .map(|r| {
            let when = match r.at_ms.saturating_sub(now_ms) / 1000 {
                0 => "now".to_string(),
                s => format!("in {}", duration(s)),
            };
            format!("{} for job {} {when}", r.gpus, r.job)
        })
        .collect();
    cells.join(", ")
}

/// `0:12 1:12 2:- 3:-(held-for-14) 4:15+16`: each GPU's job (a shared GPU's jobs joined by
/// `+`), `-` when free.
fn gpu_jobs(gpus: &[GpuView]) -> String {
    if gpus.is_empty() {
        return NONE.to_string();
    }
    let cells: Vec<String> = gpus
        .iter()
        .map(|g| {
            let job = if g.shares.is_empty() {
                g.job.map_or_else(|| NONE.to_string(), |j| j.to_string())
            } else {
                g.shares.iter().map(|s| s.job.to_string()).collect::<Vec<_>>().join("+")
            };
            match g.held_for {
                Some(preemptor) => format!("{}:{job}(held-for-{preemptor})", g.index),
                None => format!("{}:{job}", g.index),
            }
        })
        .collect();
    cells.join(" ")
}

/// GPUs held, exact (`0.6`) from the thousandths a server gives, else its whole GPUs (a
/// server that predates shares).
fn gpus_held(gpus: u32, gpu_milli: u64) -> String {
    if gpu_milli > 0 { fairway_core::ResourceKind::Gpu.format_amount(gpu_milli) } else { gpus.to_string() }
}

/// `fairway quota`: usage against caps.
/// `fairway quota`: one row per account; with fair sharing on, its share (`FAIR SHARE`,
/// docs/fair-sharing.md: what orders the tenants of a tier, least first; 2 for a tenant that
/// has held the whole cluster for long, as it counts what is held now and its recent average)
/// and its weight (`WEIGHT`, which divides the share).
pub fn quotas_table(quotas: &[QuotaView]) -> String {
    let fair = quotas.iter().any(|q| q.fair_share.is_some());
    let rows: Vec<Vec<String>> = quotas
        .iter()
        .map(|q| {
            let mut row = vec![
                q.kind.clone(),
                q.account.clone(),
                used_of(gpus_held(q.gpus_used, q.gpu_milli_used), q.gpus_max.map(|m| m.to_string())),
                used_of(cpu(q.cpu_millis_used), q.cpu_millis_max.map(cpu)),
                used_of(memory(q.memory_mib_used), q.memory_mib_max.map(memory)),
            ];
            if fair {
                row.push(q.fair_share.map_or("-".to_string(), |s| format!("{s:.3}")));
                row.push(q.fair_share_weight.map_or("-".to_string(), |w| w.to_string()));
            }
            row
        })
        .collect();
    let headers = ["KIND", "ACCOUNT", "GPUS", "CPU", "MEMORY", "FAIR SHARE", "WEIGHT"];
    table(&headers[..if fair { 7 } else { 5 }], &rows)
}

/// `yes` or `no`; and how far above its borrowing limit a member is, which it can be after
/// the limit was lowered (running jobs are not stopped for it, docs/cohorts.md): its
/// owner's next job waits until that much has drained.
fn borrowing_text(m: &fairway_server::api::CohortMemberView) -> String {
    if !m.borrowing {
        return "no".into();
    }
    let cap = m.member.nominal.gpus.zip(m.member.borrowing_limit.and_then(|b| b.gpus)).map(|(n, b)| u64::from(n + b));
    let used_milli = if m.gpu_milli_used > 0 { m.gpu_milli_used } else { u64::from(m.gpus_used) * 1000 };
    match cap.map(|cap| used_milli.saturating_sub(cap * 1000)) {
        Some(over @ 1..) => format!("yes, {} over its limit", fairway_core::ResourceKind::Gpu.format_amount(over)),
        _ => "yes".into(),
    }
}

/// `fairway quota cohorts`: one row per member; GPUs as used/nominal, the limits as `+N`
/// (may borrow N) and `-N` (lends at most N), `-` where there is none. The cohort's GPUs
/// are "taken", not "used": a member's guarantee (nominal less lending limit) counts whole
/// though it runs nothing, since no one else may borrow it.
pub fn cohorts_table(cohorts: &[fairway_server::api::CohortView]) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for c in cohorts {
        let in_use = used_of(gpus_held(c.gpus_in_use, c.gpu_milli_in_use), c.capacity.gpus.map(|g| g.to_string()));
        for m in &c.members {
            let limit = |l: Option<fairway_spec::LimitsDoc>, sign: &str| {
                l.and_then(|l| l.gpus).map_or("-".to_string(), |g| format!("{sign}{g}"))
            };
            rows.push(vec![
                if c.left_out.is_some() { format!("{} (left out)", c.name) } else { c.name.clone() },
                in_use.clone(),
                if m.left_out.is_some() {
                    format!("{} (left out)", m.member.project)
                } else {
                    m.member.project.clone()
                },
                used_of(gpus_held(m.gpus_used, m.gpu_milli_used), m.member.nominal.gpus.map(|g| g.to_string())),
                limit(m.member.borrowing_limit, "+"),
                limit(m.member.lending_limit, "-"),
                borrowing_text(m),
            ]);
        }
    }
    let mut out = table(&["COHORT", "COHORT TAKEN", "PROJECT", "GPUS/NOMINAL", "BORROW", "LEND", "BORROWING"], &rows);
    for c in cohorts {
        for m in &c.members {
            if let Some(why) = &m.left_out {
                out.push_str(&format!(
                    "{} is in no cohort: its place in {} does not hold ({why})\n",
                    m.member.project, c.name
                ));
            }
        }
        if let Some(why) = &c.left_out {
            out.push_str(&format!(
                "cohort {} is stored but not in effect ({why}); `fairway quota cohort set` it so that it holds, or delete it\n",
                c.name
            ));
        }
    }
    out
}

/// `gpus 8, cpu unlimited, memory 64Gi`.
pub fn quota_caps(gpus_max: Option<u32>, cpu_millis_max: Option<u64>, memory_mib_max: Option<u64>) -> String {
    let or_unlimited = |v: Option<String>| v.unwrap_or_else(|| "unlimited".to_string());
    format!(
        "gpus {}, cpu {}, memory {}",
        or_unlimited(gpus_max.map(|g| g.to_string())),
        or_unlimited(cpu_millis_max.map(cpu)),
        or_unlimited(memory_mib_max.map(memory))
    )
}

/// `fairway priority-classes`.
/// For a list that shows only part of what matches: how much, and how to see the rest.
pub fn partial_list_note(list: &fairway_server::api::JobList) -> Option<String> {
    let cursor = list.next_cursor?;
    Some(format!(
        "showing {} of {} matching jobs, newest first; `--cursor {cursor}` lists the next ones, `--limit N` more at once",
        list.jobs.len(),
        list.total
    ))
}

pub fn tokens_table(tokens: &[TokenView], now_ms: u64) -> String {
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let status = match (t.revoked_at_ms, t.expires_at_ms) {
                (Some(at), _) => format!("revoked {}", timestamp_relative(at, now_ms)),
                (None, Some(at)) if at <= now_ms => format!("expired {}", timestamp_relative(at, now_ms)),
                (None, Some(at)) => format!("expires {}", timestamp(at)),
                (None, None) => "active".into(),
            };
            vec![
                t.id.to_string(),
                t.name.clone(),
                t.user.clone(),
                t.project.clone(),
                t.role.as_str().into(),
                age(t.created_at_ms, now_ms),
                status,
            ]
        })
        .collect();
    table(&["ID", "NAME", "USER", "PROJECT", "ROLE", "AGE", "STATUS"], &rows)
}

pub fn projects_table(projects: &[ProjectView]) -> String {
    let rows: Vec<Vec<String>> = projects
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                format!("{} ({})", p.priority_class_max, p.priority_class_max_source),
                p.run_as.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    table(&["PROJECT", "PRIORITY CLASS MAX", "RUN AS"], &rows)
}

pub fn priority_classes_table(classes: &[PriorityClassView]) -> String {
    let rows: Vec<Vec<String>> = classes
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                c.value.to_string(),
                c.preemption_policy.clone(),
                protection(c),
                yes_no(c.global_default),
                c.description.clone().unwrap_or_else(|| NONE.to_string()),
            ]
        })
        .collect();
    table(&["NAME", "VALUE", "PREEMPTION", "PROTECTION", "GLOBAL-DEFAULT", "DESCRIPTION"], &rows)
}

/// Rule 1 of a class, short: `min-run 300s, 3/h, delay 20s`, or `-`.
fn protection(c: &PriorityClassView) -> String {
    let min_run =
        (c.min_run_before_preemption_seconds > 0).then(|| format!("min-run {}s", c.min_run_before_preemption_seconds));
    let per_hour = c.preemptions_per_hour_max.map(|n| format!("{n}/h"));
    let overrides = c.overrides_preemption_protection.then(|| "overrides".to_owned());
    let delay = (c.preemption_delay_seconds > 0).then(|| format!("delay {}s", c.preemption_delay_seconds));
    let parts: Vec<String> = [min_run, per_hour, overrides, delay].into_iter().flatten().collect();
    if parts.is_empty() { NONE.to_string() } else { parts.join(", ") }
}

/// `fairway submit`: one line per job and class.
pub fn submitted(response: &SubmitResponse) -> String {
    let mut out = String::new();
    for job in &response.jobs {
        let _ = writeln!(out, "job/{} submitted (id {})", job.name, job.id);
    }
    for class in &response.priority_classes {
        let _ = writeln!(out, "priorityclass/{class} configured");
    }
    out
}

/// Reasons as an indented table, or `<none>`.
fn reasons_block(out: &mut String, reasons: &[ReasonView]) {
    if reasons.is_empty() {
        out.push_str("  <none>\n");
        return;
    }
    let rows: Vec<Vec<String>> = reasons.iter().map(|r| vec![r.code.clone(), r.message.clone()]).collect();
    indent(out, &table(&["CODE", "MESSAGE"], &rows));
}

fn indent(out: &mut String, text: &str) {
    for line in text.lines() {
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "  {line}");
        }
    }
}

/// `fairway why`: the job's state and the reasons it waits.
pub fn why(view: &WhyView, now_ms: u64) -> String {
    let mut out = String::new();
    match (view.state, view.reasons.is_empty()) {
        (JobState::Pending, true) => {
            let _ = writeln!(out, "job {} is pending; the scheduler has not given a reason yet", view.id);
        }
        (state, true) => {
            let _ = writeln!(out, "job {} is {}; nothing keeps it waiting", view.id, state.as_str());
        }
        (state, false) => {
            let _ = writeln!(out, "job {} is {}:", view.id, state.as_str());
            for reason in &view.reasons {
                let _ = writeln!(out, "  {}: {}", reason.code, reason.message);
            }
        }
    }
    if let Some(reservation) = &view.reservation {
        let _ = writeln!(
            out,
            "it has reserved the GPUs it needs from {}: jobs ranked below it start before then only where they would end by then",
            reservation_text(reservation, now_ms)
        );
    }
    if view.state == JobState::Pending
        && let Some(position) = view.queue_position
    {
        let _ = write!(out, "it is number {position} in the queue");
        match &view.fair_share {
            Some(f) => {
                let _ = writeln!(
                    out,
                    "; fair sharing ranks it by its project's share {:.4}, then its user's {:.4} (within its priority the least goes first)",
                    f.project, f.user
                );
            }
            None => out.push('\n'),
        }
    }
    if view.state == JobState::Pending
        && let Some(text) = view.start_estimate.as_ref().and_then(|e| why_start_text(e, now_ms))
    {
        let _ = writeln!(out, "{text}");
    }
    out
}

/// The expected start, for `why`: with what it counts on (`describe`'s words).
fn why_start_text(e: &StartEstimateView, now_ms: u64) -> Option<String> {
    Some(match (e.kind.as_str(), e.at_ms) {
        ("at", Some(at)) if at <= now_ms => "it is expected to start at the next cycle".to_string(),
        ("at" | "not_before", Some(_)) => format!(
            "it is expected to start {}, if running jobs end as expected and nothing ranked above it arrives",
            start_estimate_text(e, now_ms)
        ),
        ("not_placeable", _) => format!("it cannot start even once everything running has ended: {NOT_PLACEABLE}"),
        _ => return None,
    })
}

/// The width of the field labels in `describe`.
const LABEL_WIDTH: usize = 17;

fn field(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let label = format!("{label}:");
    let _ = writeln!(out, "{label:<LABEL_WIDTH$}{value}");
}

/// `fairway describe`: kubectl-describe sections. `spec_yaml` is the spec already rendered.
pub fn describe(detail: &JobDetail, spec_yaml: Option<&str>, now_ms: u64) -> String {
    let job = &detail.job;
    let mut out = String::new();
    describe_fields(&mut out, job, now_ms);

    out.push_str("Placement:\n");
    if job.placement.is_empty() {
        out.push_str("  <none>\n");
    } else {
        let rows: Vec<Vec<String>> = job.placement.iter().map(|r| vec![r.node.clone(), gpu_list(&r.gpus)]).collect();
        indent(&mut out, &table(&["NODE", "GPUS"], &rows));
    }
    if job.state == JobState::Pending || !job.reasons.is_empty() {
        out.push_str("Reasons:\n");
        reasons_block(&mut out, &job.reasons);
    }
    if let Some(p) = &job.preemption {
        out.push_str("Preemption:\n");
        let _ = writeln!(out, "  Preemptor:     job {}", p.preemptor);
        let _ = writeln!(out, "  Kill deadline: {}", timestamp_relative(p.deadline_ms, now_ms));
    }
    if let Some(spec) = spec_yaml {
        out.push_str("Spec:\n");
        indent(&mut out, spec.trim_start_matches("---\n"));
    }
    out.push_str("Events:\n");
    events_block(&mut out, &detail.events, now_ms);
    out
}

fn describe_fields(out: &mut String, job: &JobView, now_ms: u64) {
    field(out, "Name", &job.name);
    field(out, "ID", job.id);
    field(out, "Project", &job.project);
    field(out, "User", &job.user);
    match &job.priority_class {
        Some(class) => field(out, "Priority", format!("{} (class {class})", job.priority)),
        None => field(out, "Priority", job.priority),
    }
    field(out, "State", job.state.as_str());
    let model = job.gpu_model.as_deref().unwrap_or("any model");
    if let Some(milli) = job.gpu_milli {
        field(out, "GPUs", format!("{} of one GPU, shared ({model})", share(milli)));
    } else if job.replicas == 1 {
        field(out, "GPUs", format!("{} ({model})", job.gpus_per_replica));
    } else {
        let total = u64::from(job.replicas) * u64::from(job.gpus_per_replica);
        field(out, "GPUs", format!("{total} ({} replicas x {}, {model})", job.replicas, job.gpus_per_replica));
    }
    field(out, "Submitted", timestamp_relative(job.submitted_at_ms, now_ms));
    let times = [
        ("First started", job.first_started_at_ms),
        ("Started", job.started_at_ms),
        ("Finished", job.finished_at_ms),
        ("Last checkpoint", job.last_checkpoint_ms),
    ];
    for (label, at_ms) in times {
        if let Some(at_ms) = at_ms {
            field(out, label, timestamp_relative(at_ms, now_ms));
        }
    }
    field(out, "Wait", duration(job.wait_seconds.max(0.0) as u64));
    if let Some(position) = job.queue_position {
        field(out, "Queue position", position);
    }
    if let Some(start) =
        job.start_estimate.as_ref().filter(|_| job.state == JobState::Pending).map(|e| start_estimate_text(e, now_ms))
    {
        field(out, "Expected start", start);
    }
    if let Some(share) = &job.fair_share {
        let text = format!(
            "project {} {:.4}, user {} {:.4} (within its priority the least goes first)",
            job.project, share.project, job.user, share.user
        );
        field(out, "Fair share", text);
    }
    if let Some(reservation) = &job.reservation {
        let mut text = reservation_text(reservation, now_ms);
        // The forecast lets a reservation give way to a job ranked above it that takes its
        // room first (docs/estimates.md, step 4): say so where the two times part.
        let later = job.start_estimate.as_ref().and_then(|e| e.at_ms).is_some_and(|at| at > reservation.at_ms);
        if later && job.state == JobState::Pending {
            text.push_str("; a job ranked above it is expected to take this room first");
        }
        field(out, "Reservation", text);
    }
    field(out, "Restarts", job.restart_count);
    field(out, "Preemptions", job.preemptions);
    field(out, "Failures", format!("{} (retries allowed: {})", job.failures, job.retries));
    if let Some(exit) = exit_text(job) {
        field(out, "Exit", exit);
    }
}

/// When a reservation's GPUs are expected free, and what it holds on each node.
fn reservation_text(reservation: &ReservationView, now_ms: u64) -> String {
    let nodes: Vec<String> = reservation
        .nodes
        .iter()
        .map(|n| {
            let plural = |n: u32, what: &str| if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") };
            format!("{} ({}, {})", n.node, plural(n.replicas, "replica"), plural(n.gpus, "GPU"))
        })
        .collect();
    format!("{} on {}", timestamp_relative(reservation.at_ms, now_ms), nodes.join(", "))
}

fn events_block(out: &mut String, events: &[EventView], now_ms: u64) {
    if events.is_empty() {
        out.push_str("  <none>\n");
        return;
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                age(e.at_ms, now_ms),
                timestamp(e.at_ms),
                e.kind.clone(),
                e.reason.clone().unwrap_or_else(|| NONE.to_string()),
                e.message.clone(),
            ]
        })
        .collect();
    indent(out, &table(&["AGE", "TIME", "KIND", "REASON", "MESSAGE"], &rows));
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use fairway_server::api::{
        FairShareView, FieldError, PreemptionView, ReservationView, ReservedNodeView, StartEstimateView, SubmittedJob,
    };

    use super::*;

    /// 2026-01-01T00:00:00Z.
    const T0: u64 = 1_767_225_600_000;

    fn job(id: i64, name: &str, state: JobState) -> JobView {
        JobView {
            id,
            name: name.to_string(),
            user: "alice".to_string(),
            project: "ads".to_string(),
            priority: 1000,
            priority_class: Some("high".to_string()),
            state,
            gpus_per_replica: 2,
            gpu_milli: None,
            replicas: 1,
            gpu_model: Some("A100".to_string()),
            submitted_at_ms: T0,
            first_started_at_ms: None,
            started_at_ms: None,
            finished_at_ms: None,
            wait_seconds: 0.0,
            restart_count: 0,
            preemptions: 0,
            failures: 0,
            retries: 0,
            last_checkpoint_ms: None,
            exit_code: None,
            exit_signal: None,
            placement: vec![],
            reasons: vec![],
            preemption: None,
            queue_position: None,
            start_estimate: None,
            reservation: None,
            fair_share: None,
        }
    }

    fn reason(code: &str, message: &str) -> ReasonView {
        ReasonView { code: code.to_string(), message: message.to_string(), data: BTreeMap::new() }
    }

    fn sample_jobs() -> Vec<JobView> {
        let mut pending = job(14, "big-train", JobState::Pending);
        pending.priority_class = None;
        pending.priority = 500;
        pending.replicas = 2;
        pending.gpus_per_replica = 4;
        pending.gpu_model = None;
        pending.project = "research".to_string();
        pending.user = "bob".to_string();
        pending.submitted_at_ms = T0 + 3_000_000;
        pending.wait_seconds = 600.0;
        pending.reasons = vec![
            reason("over_quota", "project research would hold 12 of its 8 GPUs"),
            reason("no_fit", "no node has 4 free GPUs"),
        ];
        pending.queue_position = Some(2);
        pending.start_estimate =
            Some(StartEstimateView { kind: "at".to_string(), at_ms: Some(NOW + 25 * 60_000 + 500) });
        let reserved = |node: &str, replicas| ReservedNodeView { node: node.to_string(), replicas, gpus: 4 * replicas };
        pending.reservation = Some(ReservationView {
            at_ms: NOW + 25 * 60_000 + 500,
            nodes: vec![reserved("node-a", 1), reserved("node-b", 1)],
        });
        let mut running = job(12, "ctr-model", JobState::Running);
        running.started_at_ms = Some(T0 + 5_000);
        running.first_started_at_ms = Some(T0 + 5_000);
        running.wait_seconds = 5.0;
        running.restart_count = 1;
        running.preemptions = 1;
        running.placement = vec![ReplicaView { node: "node-a".to_string(), gpus: vec![0, 1] }];
        let mut preempting = job(9, "sweep-3", JobState::Preempting);
        preempting.priority_class = Some("low".to_string());
        preempting.priority = 100;
        preempting.submitted_at_ms = T0 - 3 * 86_400_000;
        preempting.placement = vec![
            ReplicaView { node: "node-a".to_string(), gpus: vec![2] },
            ReplicaView { node: "node-b".to_string(), gpus: vec![0] },
        ];
        preempting.preemption = Some(PreemptionView { preemptor: 14, deadline_ms: T0 + 3_630_000 });
        let mut failed = job(3, "oom", JobState::Failed);
        failed.exit_code = Some(137);
        failed.exit_signal = Some(9);
        vec![pending, running, preempting, failed]
    }

    const NOW: u64 = T0 + 3_600_000;

    #[test]
    fn durations_pick_one_unit() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (60, "1m"),
            (3_599, "59m"),
            (3_600, "1h"),
            (172_799, "47h"),
            (172_800, "2d"),
            (4 * 86_400 + 5, "4d"),
        ];
        for (seconds, want) in cases {
            assert_eq!(duration(seconds), want, "{seconds}s");
        }
        assert_eq!(age(NOW + 10_000, NOW), "0s", "a clock ahead of ours is not a negative age");
    }

    #[test]
    fn quantities() {
        let cases = [(cpu(8_000), "8"), (cpu(2_500), "2500m"), (cpu(0), "0")];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
        let cases = [(memory(65_536), "64Gi"), (memory(1_536), "1536Mi"), (memory(0), "0Mi")];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
        assert_eq!(timestamp(T0 + 999), "2026-01-01T00:00:00Z");
        assert_eq!(timestamp_relative(T0, T0 + 120_000), "2026-01-01T00:00:00Z (2m ago)");
        assert_eq!(timestamp_relative(T0 + 25_000, T0), "2026-01-01T00:00:25Z (in 25s)");
    }

    #[test]
    fn a_partial_list_says_so_and_how_to_go_on() {
        let jobs = sample_jobs();
        let whole = fairway_server::api::JobList { total: jobs.len() as u64, next_cursor: None, jobs: jobs.clone() };
        assert_eq!(partial_list_note(&whole), None);
        let part = fairway_server::api::JobList { total: 5000, next_cursor: Some(17), jobs };
        let note = partial_list_note(&part).unwrap();
        assert!(
            note.starts_with(&format!("showing {} of 5000", part.jobs.len())) && note.contains("--cursor 17"),
            "{note}"
        );
    }

    #[test]
    fn jobs_table_narrow() {
        let got = jobs_table(&sample_jobs(), NOW, false);
        let want = "\
ID   NAME        PROJECT    USER    PRIORITY   STATE        GPUS   AGE   WAIT   ETA              REASON
14   big-train   research   bob     500        pending      2x4    10m   10m    25m (reserved)   over_quota: project research would hold 12 of its 8 GPUs (+1 more)
12   ctr-model   ads        alice   high       running      2      1h    5s     -                -
9    sweep-3     ads        alice   low        preempting   2      3d    0s     -                preempted for job 14
3    oom         ads        alice   high       failed       2      1h    0s     -                signal 9
";
        assert_eq!(got, want);
    }

    #[test]
    fn jobs_table_wide() {
        let got = jobs_table(&sample_jobs()[1..3], NOW, true);
        let want = "\
ID   NAME        PROJECT   USER    PRIORITY   STATE        GPUS   MODEL   AGE   WAIT   ETA   RESTARTS   PREEMPTIONS   PLACEMENT             REASON
12   ctr-model   ads       alice   high       running      2      A100    1h    5s     -     1          1             node-a[0,1]           -
9    sweep-3     ads       alice   low        preempting   2      A100    3d    0s     -     0          0             node-a[2],node-b[0]   preempted for job 14
";
        assert_eq!(got, want);
    }

    #[test]
    fn long_reasons_are_cut_in_the_narrow_table_only() {
        let mut j = job(1, "a", JobState::Pending);
        j.reasons = vec![reason("no_fit", &"x".repeat(80))];
        let narrow = jobs_table(std::slice::from_ref(&j), NOW, false);
        assert!(narrow.lines().nth(1).unwrap().ends_with(&format!("no_fit: {}…", "x".repeat(59))), "{narrow}");
        let wide = jobs_table(&[j], NOW, true);
        assert!(wide.lines().nth(1).unwrap().ends_with(&format!("no_fit: {}", "x".repeat(80))), "{wide}");
    }

    #[test]
    fn empty_tables_have_headers_only() {
        assert_eq!(
            jobs_table(&[], NOW, false),
            "ID   NAME   PROJECT   USER   PRIORITY   STATE   GPUS   AGE   WAIT   ETA   REASON\n"
        );
        assert_eq!(quotas_table(&[]), "KIND   ACCOUNT   GPUS   CPU   MEMORY\n");
    }

    fn node(name: &str, gpus: Vec<GpuView>) -> NodeView {
        NodeView {
            name: name.to_string(),
            gpu_model: "A100".to_string(),
            gpus_total: gpus.len() as u32,
            gpus_allocated: gpus.iter().filter(|g| g.job.is_some()).count() as u32,
            cpu_millis: 64_000,
            memory_mib: 524_288,
            schedulable: true,
            gpus,
            reservations: Vec::new(),
        }
    }

    fn gpu(index: u32, job: Option<i64>, held_for: Option<i64>) -> GpuView {
        GpuView { index, job, held_for, shares: Vec::new() }
    }

    #[test]
    fn nodes_tables() {
        let mut b = node("node-b", vec![gpu(0, None, None), gpu(1, None, None)]);
        b.schedulable = false;
        b.cpu_millis = 7_500;
        b.memory_mib = 1_000;
        let reserved = |job, gpus, at_ms| fairway_server::api::NodeReservationView { job, gpus, at_ms };
        b.reservations = vec![reserved(19, 2, 1_000_000 + 300_000), reserved(21, 1, 1_000_000)];
        let nodes = [
            node(
                "node-a",
                vec![gpu(0, Some(12), None), gpu(1, Some(12), None), gpu(2, Some(9), Some(14)), gpu(3, None, Some(14))],
            ),
            b,
        ];
        let want = "\
NODE     MODEL   GPUS   ALLOCATED   CPU     MEMORY   SCHEDULABLE   RESERVED
node-a   A100    4      3           64      512Gi    true          -
node-b   A100    2      0           7500m   1000Mi   false         2 for job 19 in 5m, 1 for job 21 now
";
        assert_eq!(nodes_table(&nodes, false, 1_000_000), want);
        let want = "\
NODE     MODEL   GPUS   ALLOCATED   CPU     MEMORY   SCHEDULABLE   RESERVED                               GPU JOBS
node-a   A100    4      3           64      512Gi    true          -                                      0:12 1:12 2:9(held-for-14) 3:-(held-for-14)
node-b   A100    2      0           7500m   1000Mi   false         2 for job 19 in 5m, 1 for job 21 now   0:- 1:-
";
        assert_eq!(nodes_table(&nodes, true, 1_000_000), want);
    }

    #[test]
    fn quota_table_and_caps() {
        let quotas = [
            QuotaView {
                kind: "project".to_string(),
                account: "ads".to_string(),
                gpus_max: Some(8),
                cpu_millis_max: None,
                memory_mib_max: Some(131_072),
                gpus_used: 6,
                gpu_milli_used: 6_000,
                cpu_millis_used: 24_000,
                memory_mib_used: 98_304,
                fair_share: None,
                fair_share_weight: None,
            },
            QuotaView {
                kind: "user".to_string(),
                account: "bob".to_string(),
                gpus_max: None,
                cpu_millis_max: None,
                memory_mib_max: None,
                // A whole GPU and a share of 0.6: the exact figure is shown.
                gpus_used: 2,
                gpu_milli_used: 1_600,
                cpu_millis_used: 500,
                memory_mib_used: 0,
                fair_share: None,
                fair_share_weight: None,
            },
        ];
        let want = "\
KIND      ACCOUNT   GPUS    CPU      MEMORY
project   ads       6/8     24/-     96Gi/128Gi
user      bob       1.6/-   500m/-   0Mi/-
";
        assert_eq!(quotas_table(&quotas), want);
        // With fair sharing on, each account's share.
        let shared = quotas.map(|q| {
            let (share, weight) = if q.account == "ads" { (0.75, 2) } else { (0.0312, 1) };
            QuotaView { fair_share_weight: Some(weight), ..q.with_fair_share(Some(share)) }
        });
        let want = "\
KIND      ACCOUNT   GPUS    CPU      MEMORY       FAIR SHARE   WEIGHT
project   ads       6/8     24/-     96Gi/128Gi   0.750        2
user      bob       1.6/-   500m/-   0Mi/-        0.031        1
";
        assert_eq!(quotas_table(&shared), want);
        assert_eq!(quota_caps(Some(8), None, Some(2_048)), "gpus 8, cpu unlimited, memory 2Gi");
    }

    #[test]
    fn priority_classes() {
        let classes = [
            PriorityClassView {
                name: "critical".to_string(),
                value: 100_000,
                preemption_policy: "PreemptLowerPriority".to_string(),
                global_default: false,
                min_run_before_preemption_seconds: 0,
                preemptions_per_hour_max: None,
                overrides_preemption_protection: true,
                preemption_delay_seconds: 0,
                description: Some("production inference".to_string()),
            },
            PriorityClassView {
                name: "medium".to_string(),
                value: 1_000,
                preemption_policy: "Never".to_string(),
                global_default: true,
                min_run_before_preemption_seconds: 300,
                preemptions_per_hour_max: Some(3),
                overrides_preemption_protection: false,
                preemption_delay_seconds: 20,
                description: None,
            },
        ];
        let want = "\
NAME       VALUE    PREEMPTION             PROTECTION                     GLOBAL-DEFAULT   DESCRIPTION
critical   100000   PreemptLowerPriority   overrides                      false            production inference
medium     1000     Never                  min-run 300s, 3/h, delay 20s   true             -
";
        assert_eq!(priority_classes_table(&classes), want);
    }

    #[test]
    fn submit_lines() {
        let response = SubmitResponse {
            jobs: vec![
                SubmittedJob { id: 7, name: "ctr-model".to_string(), project: "ads".to_string() },
                SubmittedJob { id: 8, name: "eval".to_string(), project: "ads".to_string() },
            ],
            priority_classes: vec!["urgent".to_string()],
            warnings: vec![FieldError { document: 1, path: "x".to_string(), reason: "y".to_string() }],
        };
        let want = "\
job/ctr-model submitted (id 7)
job/eval submitted (id 8)
priorityclass/urgent configured
";
        assert_eq!(submitted(&response), want);
    }

    #[test]
    fn why_text() {
        let cases = [
            (JobState::Pending, vec![], "job 5 is pending; the scheduler has not given a reason yet\n"),
            (JobState::Running, vec![], "job 5 is running; nothing keeps it waiting\n"),
            (
                JobState::Pending,
                vec![reason("over_quota", "project ads is at its quota"), reason("no_fit", "no node fits")],
                "job 5 is pending:\n  over_quota: project ads is at its quota\n  no_fit: no node fits\n",
            ),
        ];
        for (state, reasons, want) in cases {
            let view = WhyView {
                id: 5,
                state,
                reasons,
                reservation: None,
                queue_position: None,
                fair_share: None,
                start_estimate: None,
            };
            assert_eq!(why(&view, NOW), want);
        }
        // A job that holds a reservation says where and from when.
        let reservation = ReservationView {
            at_ms: NOW + 25 * 60_000,
            nodes: vec![ReservedNodeView { node: "node-a".to_string(), replicas: 2, gpus: 8 }],
        };
        let view = WhyView {
            id: 5,
            state: JobState::Pending,
            reasons: vec![reason("no_fit", "no node fits")],
            reservation: Some(reservation),
            queue_position: None,
            fair_share: None,
            start_estimate: None,
        };
        assert_eq!(
            why(&view, NOW),
            "job 5 is pending:\n  no_fit: no node fits\nit has reserved the GPUs it needs from 2026-01-01T01:25:00Z (in 25m) \
             on node-a (2 replicas, 8 GPUs): jobs ranked below it start before then only where they would end by then\n"
        );
        // Its place in the queue, and with fair sharing what ranks it there.
        let placed = WhyView { reservation: None, queue_position: Some(2), ..view.clone() };
        assert_eq!(why(&placed, NOW), "job 5 is pending:\n  no_fit: no node fits\nit is number 2 in the queue\n");
        let fair = WhyView { fair_share: Some(FairShareView { project: 1.0, user: 0.5 }), ..placed.clone() };
        assert_eq!(
            why(&fair, NOW),
            "job 5 is pending:\n  no_fit: no node fits\nit is number 2 in the queue; fair sharing ranks it by its \
             project's share 1.0000, then its user's 0.5000 (within its priority the least goes first)\n"
        );
        // When it is expected to start, and what that counts on.
        let estimate = |kind: &str, at_ms: Option<u64>| WhyView {
            start_estimate: Some(StartEstimateView { kind: kind.to_string(), at_ms }),
            ..placed.clone()
        };
        let last_line = |view: &WhyView| why(view, NOW).lines().last().unwrap_or_default().to_string();
        assert_eq!(
            last_line(&estimate("at", Some(NOW + 9 * 60_000))),
            "it is expected to start 2026-01-01T01:09:00Z (in 9m), if running jobs end as expected and nothing \
             ranked above it arrives"
        );
        assert_eq!(last_line(&estimate("at", Some(NOW))), "it is expected to start at the next cycle");
        assert!(
            last_line(&estimate("not_before", Some(NOW + 3_600_000))).starts_with("it is expected to start not before")
        );
        assert!(last_line(&estimate("not_placeable", None)).starts_with("it cannot start even once"));
        assert_eq!(why(&estimate("not_forecast", None), NOW), why(&placed, NOW));
    }

    /// A share of one GPU reads as a decimal of one GPU in `ls` and `describe`.
    #[test]
    fn a_share_of_one_gpu_reads_as_a_decimal() {
        let mut shared = job(7, "notebook", JobState::Running);
        (shared.gpus_per_replica, shared.gpu_milli, shared.gpu_model) = (1, Some(250), None);
        assert_eq!(gpus(&shared), "0.25");
        assert_eq!(share(500), "0.5");
        assert_eq!(share(999), "0.999");
        assert_eq!(share(1), "0.001");
        let detail = JobDetail { job: shared, spec: serde_json::Value::Null, events: vec![] };
        let text = describe(&detail, None, NOW);
        assert!(text.contains("GPUs:            0.25 of one GPU, shared (any model)"), "{text}");
    }

    #[test]
    fn describe_pending_job() {
        let jobs = sample_jobs();
        let detail = JobDetail {
            job: jobs[0].clone(),
            spec: serde_json::Value::Null,
            events: vec![EventView {
                at_ms: T0 + 3_000_000,
                kind: "submitted".to_string(),
                reason: None,
                message: "submitted by bob".to_string(),
            }],
        };
        let got = describe(&detail, Some("name: big-train\nreplicas: 2\n"), NOW);
        let want = "\
Name:            big-train
ID:              14
Project:         research
User:            bob
Priority:        500
State:           pending
GPUs:            8 (2 replicas x 4, any model)
Submitted:       2026-01-01T00:50:00Z (10m ago)
Wait:            10m
Queue position:  2
Expected start:  2026-01-01T01:25:00Z (in 25m)
Reservation:     2026-01-01T01:25:00Z (in 25m) on node-a (1 replica, 4 GPUs), node-b (1 replica, 4 GPUs)
Restarts:        0
Preemptions:     0
Failures:        0 (retries allowed: 0)
Placement:
  <none>
Reasons:
  CODE         MESSAGE
  over_quota   project research would hold 12 of its 8 GPUs
  no_fit       no node has 4 free GPUs
Spec:
  name: big-train
  replicas: 2
Events:
  AGE   TIME                   KIND        REASON   MESSAGE
  10m   2026-01-01T00:50:00Z   submitted   -        submitted by bob
";
        assert_eq!(got, want);
        // Expected later than its reservation: a job ranked above takes that room first.
        let mut later = detail.clone();
        later.job.start_estimate.as_mut().unwrap().at_ms = Some(NOW + 60 * 60_000);
        let got = describe(&later, None, NOW);
        assert!(got.contains("Expected start:  2026-01-01T02:00:00Z (in 1h)\n"), "{got}");
        assert!(
            got.contains("(1 replica, 4 GPUs); a job ranked above it is expected to take this room first\n"),
            "{got}"
        );
        // With fair sharing, its tenant's shares, after the expected start.
        let mut fair = detail.clone();
        fair.job.fair_share = Some(FairShareView { project: 0.75, user: 0.125 });
        let got = describe(&fair, None, NOW);
        let line = "Fair share:      project research 0.7500, user bob 0.1250 (within its priority the least goes \
                    first)\nReservation:";
        assert!(got.contains(line), "{got}");
    }

    #[test]
    fn describe_preempting_job() {
        let mut j = sample_jobs()[2].clone();
        j.first_started_at_ms = Some(T0 - 86_400_000);
        j.started_at_ms = Some(T0 - 60_000);
        j.last_checkpoint_ms = Some(T0 + 3_500_000);
        j.exit_code = None;
        let detail = JobDetail { job: j, spec: serde_json::Value::Null, events: vec![] };
        let got = describe(&detail, None, NOW);
        let want = "\
Name:            sweep-3
ID:              9
Project:         ads
User:            alice
Priority:        100 (class low)
State:           preempting
GPUs:            2 (A100)
Submitted:       2025-12-29T00:00:00Z (3d ago)
First started:   2025-12-31T00:00:00Z (25h ago)
Started:         2025-12-31T23:59:00Z (1h ago)
Last checkpoint: 2026-01-01T00:58:20Z (1m ago)
Wait:            0s
Restarts:        0
Preemptions:     0
Failures:        0 (retries allowed: 0)
Placement:
  NODE     GPUS
  node-a   2
  node-b   0
Preemption:
  Preemptor:     job 14
  Kill deadline: 2026-01-01T01:00:30Z (in 30s)
Events:
  <none>
";
        assert_eq!(got, want);
    }
}
