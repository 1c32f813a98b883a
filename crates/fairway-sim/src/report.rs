//! Terminal table, markdown report and SVG plots of a simulation.
//!
//! * [`render_table`]: plain-text comparison of the policies, for the terminal.
//! * [`write_report`]: a directory with `report.md`, `wait-cdf-<tier>.svg` per tier and
//!   `gpu-utilization.svg`.
//!
//! All output is deterministic: the same input gives byte-identical text and files.

mod plot;
pub(crate) use plot::lines_svg;
pub(crate) mod table;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use crate::metrics::{RunResult, SCHEMA_VERSION, SimReport};

/// Upper bound on the points of one plotted series (long series are downsampled).
pub const MAX_PLOT_POINTS: usize = plot::MAX_POINTS;

/// File name of the markdown report inside the report directory.
pub const REPORT_FILE: &str = "report.md";
/// File name of the allocation-over-time plot inside the report directory.
pub const UTILIZATION_FILE: &str = "gpu-utilization.svg";

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Creating the directory or writing a file failed.
    #[error("cannot write {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The plotting library failed to draw a chart.
    #[error("cannot draw {}: {message}", .path.display())]
    Plot { path: PathBuf, message: String },
}

/// A plain-text comparison of the policies: a header line, then one block for all jobs,
/// one per tier (rows = policies; wait mean/p50/p95/p99 and JCT mean in minutes,
/// slowdown p50) and a cluster block (utilization %, preemptions, GPU-hours). Columns are
/// aligned with spaces, no colour codes; `-` marks a figure undefined for an empty group.
pub fn render_table(report: &SimReport) -> String {
    let mut out = format!("Scenario: {}  seed: {}\n", report.scenario, report.seed);
    for block in table::blocks(report) {
        out.push('\n');
        out.push_str(&block.title);
        out.push('\n');
        out.push_str(&block.table.to_text());
    }
    out
}

/// A file name stem made of `[A-Za-z0-9._-]` only.
fn file_stem(name: &str) -> String {
    let stem: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect();
    if stem.is_empty() { "unnamed".to_owned() } else { stem }
}

/// `wait-cdf-<tier>.svg` file names, one per tier, unique even when two tier names map
/// to the same sanitised stem.
fn cdf_file_names<'a>(tiers: impl IntoIterator<Item = &'a str>) -> Vec<(&'a str, String)> {
    let mut used = BTreeSet::new();
    let mut out = Vec::new();
    for tier in tiers {
        let stem = file_stem(tier);
        let mut name = format!("wait-cdf-{stem}.svg");
        let mut n = 2;
        while !used.insert(name.clone()) {
            name = format!("wait-cdf-{stem}-{n}.svg");
            n += 1;
        }
        out.push((tier, name));
    }
    out
}

fn write_file(path: PathBuf, contents: &str) -> Result<PathBuf, ReportError> {
    std::fs::write(&path, contents).map_err(|source| ReportError::Io { path: path.clone(), source })?;
    Ok(path)
}

const HOW_TO_READ: &str = "\
Every table compares the policies on the same workload. *Wait* is the time from \
submission to a job's first start, over the jobs that started; jobs that never started \
before the end of the run are counted under *never started* and left out of the wait \
figures. *JCT* (job completion time) is finish minus submission over the finished jobs, \
and *slowdown* is JCT divided by the job's run time alone (1.00 means no delay at all). \
Percentiles use the nearest-rank method; times are in minutes. In the cluster table, \
*GPU util %* is the allocated GPU-time divided by capacity times the busy window (first \
submission to last finish), and *GPU-h lost* is GPU time wasted by preemption (work lost \
since the last checkpoint, grace period and restart overhead). In the wait CDF plots a \
curve higher and further left is better; a curve that stays below 1.0 at the right edge \
means some jobs of the tier never started or waited longer than the plotted range, which \
stops at the largest p99 wait among the policies. The allocation plot shows allocated GPUs \
over simulated time; long series are drawn as time-weighted averages over at most \
1,000 equal intervals.";

fn render_markdown(report: &SimReport, cdf_files: &[(&str, String)]) -> String {
    let mut md = String::new();
    let policies: Vec<&str> = report.policies.iter().map(|p| p.policy.as_str()).collect();
    // Writing to a String cannot fail.
    let _ = writeln!(md, "# Simulation report: {}\n", report.scenario);
    let _ = writeln!(md, "- Scenario: {}", report.scenario);
    let _ = writeln!(md, "- Seed: {}", report.seed);
    let _ = writeln!(md, "- Policies: {}", policies.join(", "));
    let _ = writeln!(md, "- JSON schema version: {SCHEMA_VERSION}\n");
    let _ = writeln!(md, "## How to read this report\n\n{HOW_TO_READ}\n");
    for block in table::blocks(report) {
        let _ = writeln!(md, "## {}\n\n{}", block.title, block.table.to_markdown());
    }
    let _ = writeln!(md, "## Plots\n");
    for (tier, file) in cdf_files {
        let _ = writeln!(md, "- [Wait time CDF, tier {tier}]({file})");
    }
    let _ = writeln!(md, "- [Allocated GPUs over time]({UTILIZATION_FILE})\n");
    for (tier, file) in cdf_files {
        let _ = writeln!(md, "### Wait time CDF, tier {tier}\n\n![Wait time CDF, tier {tier}]({file})\n");
    }
    let _ = writeln!(md, "### Allocated GPUs over time\n\n![Allocated GPUs over time]({UTILIZATION_FILE})");
    md
}

/// Writes the report directory (created if missing): `report.md` (scenario, seed, the
/// tables in markdown, links to the plots, how to read them), `wait-cdf-<tier>.svg` per
/// tier found in `runs` (one line per run) and `gpu-utilization.svg` (one line per run).
///
/// Tier names are sanitised to `[A-Za-z0-9._-]` in file names. Returns the paths written:
/// `report.md` first, then the CDF plots in tier order, then the utilization plot.
/// Existing files of the same names are overwritten; other files are left alone.
pub fn write_report(dir: &Path, report: &SimReport, runs: &[RunResult]) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Io { path: dir.to_path_buf(), source })?;
    let tiers: BTreeSet<&str> = runs.iter().flat_map(|r| r.records.iter().map(|j| &*j.tier)).collect();
    let cdf_files = cdf_file_names(tiers);

    let mut svgs = Vec::with_capacity(cdf_files.len() + 1);
    for (tier, file) in &cdf_files {
        let path = dir.join(file);
        let svg =
            plot::wait_cdf_svg(tier, runs).map_err(|message| ReportError::Plot { path: path.clone(), message })?;
        svgs.push((path, svg));
    }
    let path = dir.join(UTILIZATION_FILE);
    let svg = plot::utilization_svg(runs).map_err(|message| ReportError::Plot { path: path.clone(), message })?;
    svgs.push((path, svg));

    let mut written = Vec::with_capacity(svgs.len() + 1);
    written.push(write_file(dir.join(REPORT_FILE), &render_markdown(report, &cdf_files))?);
    for (path, svg) in svgs {
        written.push(write_file(path, &svg)?);
    }
    Ok(written)
}
