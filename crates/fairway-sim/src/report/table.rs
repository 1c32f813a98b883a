//! Plain-text and markdown tables built from a [`SimReport`].

use std::collections::BTreeSet;

use crate::metrics::{GroupSummary, PolicySummary, SimReport};

/// A table of already formatted cells; the first column is left-aligned, the others right-aligned.
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Leading columns of text, aligned left; the rest (figures) align right.
    text_columns: usize,
}

/// A titled table.
pub(super) struct Block {
    pub(super) title: String,
    pub(super) table: Table,
}

impl Table {
    pub(crate) fn new(header: Vec<String>, rows: Vec<Vec<String>>) -> Table {
        Table { header, rows, text_columns: 1 }
    }

    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        widths
    }

    /// Aligned columns separated by two spaces, a dashed rule under the header, no
    /// trailing whitespace; every line ends with `\n`.
    pub(crate) fn to_text(&self) -> String {
        let widths = self.widths();
        let mut out = String::new();
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        for row in std::iter::once(&self.header).chain(std::iter::once(&rule)).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, &w)) in row.iter().zip(&widths).enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                push_padded(&mut line, cell, w, i >= self.text_columns);
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// A GitHub-flavoured markdown table, padded so that the source is readable too.
    pub(super) fn to_markdown(&self) -> String {
        let escaped = |row: &Vec<String>| -> Vec<String> { row.iter().map(|c| c.replace('|', "\\|")).collect() };
        let header = escaped(&self.header);
        let rows: Vec<Vec<String>> = self.rows.iter().map(escaped).collect();
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count().max(3)).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let text_columns = self.text_columns;
        let mut push_row = |row: &[String]| {
            out.push('|');
            for (i, (cell, &w)) in row.iter().zip(&widths).enumerate() {
                out.push(' ');
                push_padded(&mut out, cell, w, i >= text_columns);
                out.push_str(" |");
            }
            out.push('\n');
        };
        push_row(&header);
        let rule: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(i, &w)| if i == 0 { format!(":{}", "-".repeat(w - 1)) } else { format!("{}:", "-".repeat(w - 1)) })
            .collect();
        push_row(&rule);
        for row in &rows {
            push_row(row);
        }
        out
    }
}

fn push_padded(out: &mut String, cell: &str, width: usize, right: bool) {
    let pad = width.saturating_sub(cell.chars().count());
    if right {
        out.extend(std::iter::repeat_n(' ', pad));
        out.push_str(cell);
    } else {
        out.push_str(cell);
        out.extend(std::iter::repeat_n(' ', pad));
    }
}

fn minutes(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "-".to_owned(), |s| format!("{:.2}", s / 60.0))
}

fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |u| format!("{:.1}", u * 100.0))
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

const GROUP_HEADER: [&str; 11] = [
    "policy",
    "jobs",
    "never started",
    "wait mean",
    "wait p50",
    "wait p95",
    "wait p99",
    "queued mean",
    "JCT mean",
    "slowdown p50",
    "preempted p50/p99/max",
];

fn group_row(policy: &str, g: Option<&GroupSummary>) -> Vec<String> {
    let empty = GroupSummary::default();
    let g = g.unwrap_or(&empty);
    vec![
        policy.to_owned(),
        g.jobs.to_string(),
        g.never_started.to_string(),
        minutes(g.wait_seconds.mean),
        minutes(g.wait_seconds.p50),
        minutes(g.wait_seconds.p95),
        minutes(g.wait_seconds.p99),
        minutes(g.queued_seconds.mean),
        minutes(g.jct_seconds.mean),
        ratio(g.slowdown.p50),
        format!("{}/{}/{}", g.preemptions_per_job.p50, g.preemptions_per_job.p99, g.preemptions_per_job.max),
    ]
}

fn group_table<'a>(
    policies: &'a [PolicySummary],
    pick: impl Fn(&'a PolicySummary) -> Option<&'a GroupSummary>,
) -> Table {
    Table {
        header: GROUP_HEADER.iter().map(|h| (*h).to_owned()).collect(),
        rows: policies.iter().map(|p| group_row(&p.policy, pick(p))).collect(),
        text_columns: 1,
    }
}

fn cluster_table(policies: &[PolicySummary]) -> Table {
    let header = [
        "policy",
        "placement",
        "GPU util useful %",
        "GPU util allocated %",
        "preemptions",
        "GPU-h allocated",
        "GPU-h useful",
        "GPU-h lost",
        "makespan h",
    ];
    Table {
        header: header.iter().map(|h| (*h).to_owned()).collect(),
        rows: policies
            .iter()
            .map(|p| {
                let c = &p.cluster;
                vec![
                    p.policy.clone(),
                    p.placement.clone(),
                    percent(c.gpu_utilization_useful),
                    percent(c.gpu_utilization),
                    c.preemptions_total.to_string(),
                    format!("{:.2}", c.gpu_hours_allocated),
                    format!("{:.2}", c.gpu_hours_useful),
                    format!("{:.2}", c.gpu_hours_lost),
                    format!("{:.2}", c.makespan_seconds / 3600.0),
                ]
            })
            .collect(),
        text_columns: 2,
    }
}

/// Every tier named by any policy, sorted.
pub(super) fn tiers_of(report: &SimReport) -> BTreeSet<&str> {
    report.policies.iter().flat_map(|p| p.tiers.keys().map(String::as_str)).collect()
}

/// The blocks of the report, in display order: all jobs, one per tier, the cluster.
pub(super) fn blocks(report: &SimReport) -> Vec<Block> {
    let policies = &report.policies;
    let mut out = vec![Block {
        title: "All jobs (wait and JCT in minutes)".to_owned(),
        table: group_table(policies, |p| Some(&p.all)),
    }];
    for tier in tiers_of(report) {
        out.push(Block {
            title: format!("Tier {tier} (wait and JCT in minutes)"),
            table: group_table(policies, move |p| p.tiers.get(tier)),
        });
    }
    if let Some((title, table)) = tenant_table(report) {
        out.push(Block { title, table });
    }
    out.push(Block { title: "Cluster".to_owned(), table: cluster_table(policies) });
    if policies.iter().any(|p| p.all.images.starts > 0) {
        out.push(Block { title: "Image pulls at starts (wait in minutes)".to_owned(), table: image_table(report) });
    }
    if policies.iter().any(|p| p.all.eta.jobs > 0) {
        out.push(Block {
            title: "Start-time estimates at submit against the actual start (error in minutes)".to_owned(),
            table: eta_table(report),
        });
    }
    out
}

/// The most tenants the tenants' table lists (those with the most jobs); the JSON has all.
pub(crate) const TENANTS_LISTED_MAX: usize = 30;

/// With two tenants or more: each tenant's mean wait under each policy, side by side (what
/// fair sharing and cohorts are about), and the worst tenant's. `None` with one tenant.
fn tenant_table(report: &SimReport) -> Option<(String, Table)> {
    let policies = &report.policies;
    let mut jobs: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for p in policies {
        for (tenant, g) in &p.tenants {
            let n = jobs.entry(tenant.as_str()).or_default();
            *n = (*n).max(g.jobs);
        }
    }
    if jobs.len() < 2 {
        return None;
    }
    let mut listed: Vec<(&str, u64)> = jobs.iter().map(|(t, n)| (*t, *n)).collect();
    listed.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let left_out = listed.len().saturating_sub(TENANTS_LISTED_MAX);
    listed.truncate(TENANTS_LISTED_MAX);
    listed.sort_by(|a, b| a.0.cmp(b.0));
    let header =
        ["tenant".to_owned(), "jobs".to_owned()].into_iter().chain(policies.iter().map(|p| p.policy.clone())).collect();
    let mut rows: Vec<Vec<String>> = listed
        .iter()
        .map(|(tenant, n)| {
            let waits = policies.iter().map(|p| minutes(p.tenants.get(*tenant).and_then(|g| g.wait_seconds.mean)));
            [tenant.to_string(), n.to_string()].into_iter().chain(waits).collect()
        })
        .collect();
    let worst = policies.iter().map(|p| {
        let means = p.tenants.values().filter_map(|g| g.wait_seconds.mean);
        minutes(means.fold(None, |m: Option<f64>, w| Some(m.map_or(w, |m| m.max(w)))))
    });
    rows.push(["worst tenant".to_owned(), String::new()].into_iter().chain(worst).collect());
    let mut title = "Tenants: mean wait in minutes by policy".to_owned();
    if left_out > 0 {
        title.push_str(&format!(" ({TENANTS_LISTED_MAX} with the most jobs; {left_out} more in the JSON)"));
    }
    Some((title, Table::new(header, rows)))
}

/// Per policy and tier: how far the estimates given at submit were from the starts.
fn eta_table(report: &SimReport) -> Table {
    let header = [
        "policy",
        "tier",
        "jobs",
        "no estimate",
        "error p50",
        "error p90",
        "waited ≥1 min",
        "error/wait p50",
        "error/wait p90",
        "bias mean",
    ];
    let mut rows = Vec::new();
    for p in &report.policies {
        for (tier, g) in all_and_tiers(p) {
            let e = &g.eta;
            rows.push(vec![
                p.policy.clone(),
                tier.to_owned(),
                e.jobs.to_string(),
                e.without_estimate.to_string(),
                minutes(e.error_seconds.p50),
                minutes(e.error_seconds.p90),
                e.waited.to_string(),
                ratio(e.error_of_wait.p50),
                ratio(e.error_of_wait.p90),
                minutes(e.bias_seconds_mean),
            ]);
        }
    }
    Table::new(header.iter().map(|h| (*h).to_owned()).collect(), rows)
}

/// Per policy and tier: how long starts waited for their images.
fn image_table(report: &SimReport) -> Table {
    let header =
        ["policy", "tier", "starts", "waited", "waited %", "wait mean", "wait p95", "wait max", "GPU-h waiting"];
    let mut rows = Vec::new();
    for p in &report.policies {
        for (tier, g) in all_and_tiers(p) {
            let i = &g.images;
            rows.push(vec![
                p.policy.clone(),
                tier.to_owned(),
                i.starts.to_string(),
                i.starts_waited.to_string(),
                percent((i.starts > 0).then(|| i.starts_waited as f64 / i.starts as f64)),
                minutes(i.wait_seconds.mean),
                minutes(i.wait_seconds.p95),
                minutes(i.wait_seconds.max),
                format!("{:.2}", i.gpu_hours_waiting),
            ]);
        }
    }
    Table::new(header.iter().map(|h| (*h).to_owned()).collect(), rows)
}

/// A policy's groups for the per-tier tables: all jobs, then each tier.
fn all_and_tiers(p: &PolicySummary) -> impl Iterator<Item = (&str, &GroupSummary)> {
    std::iter::once(("all", &p.all)).chain(p.tiers.iter().map(|(t, g)| (t.as_str(), g)))
}
