//! The packing benchmark's outputs: a terminal table, a CSV with one row per policy ×
//! seed × load level, and SVG charts of the mean curves. (JSON is the report serialised.)

use std::fmt::Write as _;

use super::{CurvePoint, PackReport};
use crate::sweep::Spread;

/// Mean and standard deviation over seeds (NaN where no seed has the figure).
fn mean_sd(xs: &[f64]) -> (f64, f64) {
    Spread::of(xs).map_or((f64::NAN, f64::NAN), |s| (s.mean, s.std))
}

/// The comparison table: per policy, the GPU allocation ratio at the target load and at
/// 100% (mean ± sd over seeds), the fragmentation ratio at the target, failed pods.
pub fn write_table(report: &PackReport) -> String {
    let target = report.target_percent as usize;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} nodes, {} GPUs; {} pods asking {:.2}% of GPU capacity, resampled to {}%; {} typical pod shapes; seeds {}",
        report.nodes,
        report.gpus,
        report.pods_in_list,
        report.asked_percent,
        report.target_percent,
        report.typical_shapes,
        seed_range(&report.seeds),
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<16} {:>18} {:>18} {:>18} {:>12} {:>14}",
        "policy",
        format!("GPU alloc @{target}%"),
        "GPU alloc @100%",
        format!("frag ratio @{target}%"),
        "failed pods",
        "scores/run"
    );
    for policy in report.policies() {
        let alloc = mean_sd(&report.values_at(policy, target, |p| p.alloc_percent));
        let alloc100 = mean_sd(&report.values_at(policy, 100.min(target), |p| p.alloc_percent));
        let frag = mean_sd(&report.values_at(policy, target, |p| p.frag_percent));
        let runs: Vec<_> = report.runs_of(policy).collect();
        let failed = runs.iter().map(|r| r.failed as f64).sum::<f64>() / runs.len() as f64;
        let scored = runs.iter().map(|r| r.scored as f64).sum::<f64>() / runs.len() as f64;
        let _ = writeln!(
            out,
            "{:<16} {:>18} {:>18} {:>18} {:>12.1} {:>14.0}",
            policy,
            format!("{:.2}% ± {:.2}", alloc.0, alloc.1),
            format!("{:.2}% ± {:.2}", alloc100.0, alloc100.1),
            format!("{:.2}% ± {:.2}", frag.0, frag.1),
            failed,
            scored,
        );
    }
    out
}

fn seed_range(seeds: &[u64]) -> String {
    match seeds {
        [] => String::new(),
        [one] => one.to_string(),
        [first, .., last] if seeds.windows(2).all(|w| w[1] == w[0] + 1) => format!("{first}–{last}"),
        _ => seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
    }
}

/// One row per policy × seed × load level: `policy,seed,arrived_percent,gpu_alloc_percent,frag_percent`.
pub fn write_csv(report: &PackReport) -> String {
    let mut out = String::from("policy,seed,arrived_percent,gpu_alloc_percent,frag_percent\n");
    for run in &report.runs {
        for (k, p) in run.curve.iter().enumerate() {
            if let Some(p) = p {
                let _ = writeln!(out, "{},{},{k},{:.2},{:.2}", run.policy, run.seed, p.alloc_percent, p.frag_percent);
            }
        }
    }
    out
}

/// Two charts: the GPU allocation ratio and the fragmentation ratio against arrived load,
/// one line per policy (mean over seeds).
pub fn write_svg(report: &PackReport) -> Result<(String, String), String> {
    let target = report.target_percent as usize;
    let lines = |value: fn(&CurvePoint) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        report
            .policies()
            .into_iter()
            .map(|policy| {
                let points =
                    (0..=target).filter_map(|k| report.mean_at(policy, k, value).map(|v| (k as f64, v))).collect();
                (policy.to_owned(), points)
            })
            .collect()
    };
    let x_max = report.target_percent as f64;
    let alloc = crate::report::lines_svg(
        "GPU allocation ratio as pods arrive (mean over seeds)",
        "GPU thousandths asked so far, % of capacity",
        "GPU thousandths allocated, % of capacity",
        (x_max, 100.0),
        &lines(|p| p.alloc_percent),
    )?;
    let frag = crate::report::lines_svg(
        "Fragmentation ratio as pods arrive (mean over seeds)",
        "GPU thousandths asked so far, % of capacity",
        "fragmented free GPU thousandths, % of free",
        (x_max, 100.0),
        &lines(|p| p.frag_percent),
    )?;
    Ok((alloc, frag))
}
