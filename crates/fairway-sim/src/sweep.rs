//! One scenario over several seeds (`fairway sim --seeds N`): every headline figure of
//! every policy as mean, standard deviation, min and max over the seeds, so that a
//! conclusion does not rest on one sample.

use std::collections::BTreeSet;
use std::fmt::Write;

use serde::Serialize;

use crate::metrics::{PolicySummary, SimReport, round_fixed};
use crate::report::table::Table;

/// Version of the sweep's JSON document.
pub const SWEEP_SCHEMA_VERSION: u32 = 1;

/// A figure over the seeds. `std` is the sample standard deviation (0 for one seed).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
    /// Seeds where the figure exists (a tier with no started job has no wait).
    pub samples: usize,
}

impl Spread {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let n = values.len() as f64;
        // Summing in a fixed order keeps the result independent of anything but the values.
        let mean = values.iter().sum::<f64>() / n;
        let var = if values.len() > 1 {
            values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        // IEEE 754 requires sqrt to be correctly rounded: the same on every platform.
        Some(Spread { mean, std: var.sqrt(), min, max, samples: values.len() })
    }

    fn rounded(self) -> Spread {
        let r = |v: f64| round_fixed(v).unwrap_or(0.0);
        Spread { mean: r(self.mean), std: r(self.std), min: r(self.min), max: r(self.max), samples: self.samples }
    }
}

/// One figure, per policy (in the order of [`SeedSweep::policies`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweptFigure {
    pub figure: String,
    pub unit: &'static str,
    pub policies: Vec<Option<Spread>>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeedSweep {
    pub schema_version: u32,
    pub scenario: String,
    pub seeds: Vec<u64>,
    pub policies: Vec<String>,
    pub figures: Vec<SweptFigure>,
}

type Pick = Box<dyn Fn(&PolicySummary) -> Option<f64>>;

/// The figures a sweep reports, in display order: cluster-wide (image pulls when a run
/// modelled them), then per tier.
fn figures(tiers: &BTreeSet<String>, images: bool) -> Vec<(String, &'static str, Pick)> {
    let minutes = |s: Option<f64>| s.map(|s| s / 60.0);
    let mut out: Vec<(String, &'static str, Pick)> = vec![
        ("GPU utilization, useful".into(), "%", Box::new(|p| p.cluster.gpu_utilization_useful.map(|u| u * 100.0))),
        ("GPU utilization, allocated".into(), "%", Box::new(|p| p.cluster.gpu_utilization.map(|u| u * 100.0))),
        ("preemptions".into(), "", Box::new(|p| Some(p.cluster.preemptions_total as f64))),
        ("GPU-hours lost".into(), "GPU-h", Box::new(|p| Some(p.cluster.gpu_hours_lost))),
        ("makespan".into(), "h", Box::new(|p| Some(p.cluster.makespan_seconds / 3600.0))),
    ];
    if images {
        let waited = |p: &PolicySummary| {
            let i = &p.all.images;
            (i.starts > 0).then(|| i.starts_waited as f64 / i.starts as f64 * 100.0)
        };
        out.push(("starts that waited for an image pull".into(), "%", Box::new(waited)));
        out.push((
            "wait for the image per start, mean".into(),
            "min",
            Box::new(move |p| minutes(p.all.images.wait_seconds.mean)),
        ));
        out.push(("GPU-hours held pulling images".into(), "GPU-h", Box::new(|p| Some(p.all.images.gpu_hours_waiting))));
    }
    for tier in tiers {
        let t = tier.clone();
        out.push((format!("{tier}: wait to first start, mean"), "min", {
            let t = t.clone();
            Box::new(move |p| minutes(p.tiers.get(&t)?.wait_seconds.mean))
        }));
        out.push((format!("{tier}: total time queued, mean"), "min", {
            let t = t.clone();
            Box::new(move |p| minutes(p.tiers.get(&t)?.queued_seconds.mean))
        }));
        out.push((format!("{tier}: JCT, mean"), "min", {
            let t = t.clone();
            Box::new(move |p| minutes(p.tiers.get(&t)?.jct_seconds.mean))
        }));
        out.push((format!("{tier}: preemptions per job, max"), "", {
            let t = t.clone();
            Box::new(move |p| p.tiers.get(&t).map(|g| f64::from(g.preemptions_per_job.max)))
        }));
    }
    out
}

impl SeedSweep {
    /// Gathers one report per seed (each with the same policies, in the same order).
    pub fn from_reports(seeds: &[u64], reports: &[SimReport]) -> SeedSweep {
        let scenario = reports.first().map_or_else(String::new, |r| r.scenario.clone());
        let policies: Vec<String> =
            reports.first().map_or_else(Vec::new, |r| r.policies.iter().map(|p| p.policy.clone()).collect());
        let tiers: BTreeSet<String> =
            reports.iter().flat_map(|r| r.policies.iter().flat_map(|p| p.tiers.keys().cloned())).collect();
        let images = reports.iter().any(|r| r.policies.iter().any(|p| p.all.images.starts > 0));
        let figures = figures(&tiers, images)
            .into_iter()
            .map(|(figure, unit, pick)| {
                let per_policy = policies
                    .iter()
                    .map(|name| {
                        let values: Vec<f64> = reports
                            .iter()
                            .filter_map(|r| r.policies.iter().find(|p| &p.policy == name))
                            .filter_map(&pick)
                            .filter(|v| v.is_finite())
                            .collect();
                        Spread::of(&values).map(Spread::rounded)
                    })
                    .collect();
                SweptFigure { figure, unit, policies: per_policy }
            })
            .collect();
        SeedSweep { schema_version: SWEEP_SCHEMA_VERSION, scenario, seeds: seeds.to_vec(), policies, figures }
    }

    /// A plain-text table: one row per figure, one column per policy, `mean ± std
    /// [min–max]`.
    pub fn to_table(&self) -> String {
        let cell = |s: &Option<Spread>| match s {
            Some(s) => format!("{:.2} ± {:.2} [{:.2}–{:.2}]", s.mean, s.std, s.min, s.max),
            None => "-".to_owned(),
        };
        let mut header = vec!["figure".to_owned()];
        header.extend(self.policies.iter().cloned());
        let rows: Vec<Vec<String>> = self
            .figures
            .iter()
            .map(|f| {
                let name = if f.unit.is_empty() { f.figure.clone() } else { format!("{} ({})", f.figure, f.unit) };
                std::iter::once(name).chain(f.policies.iter().map(cell)).collect()
            })
            .collect();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} over {} seeds ({}): mean ± standard deviation [min–max]",
            self.scenario,
            self.seeds.len(),
            seed_list(&self.seeds)
        );
        out += &Table::new(header, rows).to_text();
        out
    }

    /// The JSON document (figures rounded to `metrics::DECIMALS` decimals).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data") + "\n"
    }
}

/// `1..=20` for a run of consecutive seeds, else the list.
fn seed_list(seeds: &[u64]) -> String {
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if seeds.windows(2).all(|w| w[1] == w[0] + 1) && seeds.len() > 2 => {
            format!("seeds {a}..={b}")
        }
        _ => format!("seeds {}", seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    }
}
