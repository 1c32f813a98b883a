//! SVG charts: wait-time CDF per tier and GPU allocation over time.
//!
//! Everything here is deterministic: axes and ticks are computed with basic IEEE
//! arithmetic only (no logarithms or powers from the platform's maths library: the log
//! axis has its own `log2` from multiplications), series are downsampled on integer
//! bucket boundaries, and the SVG backend writes integer pixel coordinates.
//!
//! The legend sits in its own column right of the plotting area, so it never covers data.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;

use crate::metrics::{RunResult, UtilSample, allocated_gpu_ms, nearest_rank};

/// Upper bound on the points of one plotted series.
pub(super) const MAX_POINTS: usize = 2_000;

const SIZE: (u32, u32) = (1040, 560);
/// Width of the legend column, right of the plotting area.
const LEGEND_WIDTH: u32 = 200;
const FONT: &str = "sans-serif";
const MS_PER_MINUTE: f64 = 60_000.0;
const MS_PER_HOUR: f64 = 3_600_000.0;
/// Plot time in hours (instead of minutes) when the longest run exceeds this.
const HOURS_AFTER_MS: u64 = 2 * 3_600_000;

/// Okabe–Ito colour-blind-safe palette (yellow last: weak on white).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(230, 159, 0),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];
const GREY: RGBColor = RGBColor(140, 140, 140);

/// A linear axis from 0 to `max` with "nice" ticks (1, 2 or 5 × 10^e apart).
#[derive(Clone)]
struct Axis {
    max: f64,
    ticks: Vec<f64>,
    decimals: usize,
}

/// `m × 10^e`, computed as an integer scaled by an exact power of ten so that it is the
/// correctly rounded double of the decimal number on every platform.
fn decimal(m: u64, e: i32) -> f64 {
    if e >= 0 { (m * 10u64.pow(e.unsigned_abs())) as f64 } else { m as f64 / 10u64.pow(e.unsigned_abs()) as f64 }
}

impl Axis {
    fn nice(data_max: f64, target_ticks: u32) -> Self {
        let data_max = if data_max.is_finite() && data_max > 0.0 { data_max } else { 1.0 };
        let raw = data_max / f64::from(target_ticks.max(1));
        let (mut m, mut e) = (1u64, 9i32);
        'search: for exp in -9..=9 {
            for mant in [1, 2, 5] {
                if decimal(mant, exp) >= raw {
                    (m, e) = (mant, exp);
                    break 'search;
                }
            }
        }
        let step = decimal(m, e);
        let n = ((data_max / step).ceil() as u64).clamp(1, 1_000);
        Self {
            max: decimal(n * m, e),
            ticks: (0..=n).map(|k| decimal(k * m, e)).collect(),
            decimals: if e < 0 { e.unsigned_abs() as usize } else { 0 },
        }
    }
}

/// `log2(x)` for `x > 0` from IEEE multiplications and comparisons only (the exponent from
/// the bits, then the mantissa's bits one at a time by squaring), so that it is the same on
/// every platform; about 40 bits of precision.
fn log2(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 || !x.is_finite() {
        return f64::NEG_INFINITY;
    }
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i64;
    if exponent == 0 {
        // Subnormal: scale into the normal range first (2^64 is exact).
        return log2(x * 18_446_744_073_709_551_616.0) - 64.0;
    }
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    let mut result = (exponent - 1023) as f64;
    let mut bit = 0.5;
    for _ in 0..40 {
        m *= m;
        if m >= 2.0 {
            m /= 2.0;
            result += bit;
        }
        bit /= 2.0;
    }
    result
}

/// A logarithmic axis over `[min, max]` (both above 0) with labelled ticks.
#[derive(Clone)]
struct LogAxis {
    min: f64,
    max: f64,
    ticks: Vec<(f64, &'static str)>,
}

impl LogAxis {
    /// Seconds from 1 s to the first of 1 min, 10 min, 1 h, ... at or above `data_max`
    /// seconds (at least 1 min). Shorter waits count at 1 s.
    fn wait_seconds(data_max: f64) -> LogAxis {
        const TICKS: [(f64, &str); 9] = [
            (1.0, "1 s"),
            (10.0, "10 s"),
            (60.0, "1 min"),
            (600.0, "10 min"),
            (3_600.0, "1 h"),
            (21_600.0, "6 h"),
            (86_400.0, "1 day"),
            (604_800.0, "1 week"),
            (2_592_000.0, "30 days"),
        ];
        let last = TICKS.iter().position(|&(t, _)| t >= data_max).unwrap_or(TICKS.len() - 1).max(2);
        LogAxis { min: TICKS[0].0, max: TICKS[last].0, ticks: TICKS[..=last].to_vec() }
    }

    fn label(&self, v: f64) -> String {
        self.ticks.iter().find(|(t, _)| *t == v).map_or_else(String::new, |(_, l)| (*l).to_owned())
    }
}

impl Ranged for LogAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let pixels = f64::from(limit.1 - limit.0);
        let span = log2(self.max) - log2(self.min);
        let v = value.clamp(self.min, self.max);
        let fraction = if span > 0.0 { (log2(v) - log2(self.min)) / span } else { 0.0 };
        limit.0 + (pixels * fraction + 1e-3).floor() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.iter().map(|(t, _)| *t).collect() }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.min..self.max
    }
}

/// The axis is its own plotters coordinate: linear from 0 to `max`, bold mesh lines and
/// labels at `ticks`, no light mesh lines.
impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let pixels = limit.1 - limit.0;
        if self.max <= 0.0 || pixels == 0 {
            return limit.0;
        }
        let fraction = value / self.max;
        if !fraction.is_finite() {
            return limit.0;
        }
        // Same rounding as plotters' own linear coordinates.
        if pixels > 0 {
            limit.0 + (f64::from(pixels) * fraction + 1e-3).floor() as i32
        } else {
            limit.0 + (f64::from(pixels) * fraction - 1e-3).ceil() as i32
        }
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.clone() }
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.max
    }
}

struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    width: u32,
}

/// Colour and line width of run `i` of `n`: earlier runs are drawn wider, so that
/// identical lines drawn later on top leave them visible.
fn run_style(i: usize, n: usize) -> (RGBColor, u32) {
    let width = 2 + n.saturating_sub(i + 1).min(3) as u32;
    (PALETTE[i % PALETTE.len()], width)
}

/// The x axis of a chart: linear from 0, or logarithmic.
enum XAxis {
    Linear(Axis),
    Log(LogAxis),
}

struct ChartSpec {
    title: String,
    x_desc: String,
    y_desc: String,
    x: XAxis,
    y: Axis,
    series: Vec<Series>,
}

fn draw(spec: ChartSpec) -> Result<String, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let (plot_area, legend_area) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
        match &spec.x {
            XAxis::Linear(x) => {
                let decimals = x.decimals;
                draw_plot(&plot_area, &spec, x.clone(), &move |v: &f64| format!("{v:.decimals$}"))?;
            }
            XAxis::Log(x) => draw_plot(&plot_area, &spec, x.clone(), &|v: &f64| x.label(*v))?,
        }
        draw_legend(&legend_area, &spec.series).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// The legend column: one line sample and label per series, top down.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    series: &[Series],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let top = 80;
    for (i, s) in series.iter().enumerate() {
        let y = top + 24 * i as i32;
        let style = s.color.stroke_width(s.width);
        area.draw(&PathElement::new(vec![(8, y), (36, y)], style))?;
        area.draw(&Text::new(s.label.clone(), (44, y - 8), (FONT, 14).into_font().color(&BLACK)))?;
    }
    Ok(())
}

fn draw_plot<DB: DrawingBackend, X: Ranged<ValueType = f64, FormatOption = DefaultFormatting>>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    spec: &ChartSpec,
    x: X,
    x_fmt: &dyn Fn(&f64) -> String,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let y_decimals = spec.y.decimals;
    let y_fmt = move |v: &f64| format!("{v:.y_decimals$}");
    let y = spec.y.clone();
    {
        let root = area;
        let mut chart = ChartBuilder::on(root)
            .caption(&spec.title, (FONT, 22))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(64)
            .build_cartesian_2d(x, y)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(spec.x_desc.as_str())
            .y_desc(spec.y_desc.as_str())
            .x_label_formatter(x_fmt)
            .y_label_formatter(&y_fmt)
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 15))
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()
            .map_err(|e| err(&e))?;
        for s in &spec.series {
            let style = s.color.stroke_width(s.width);
            chart.draw_series(LineSeries::new(s.points.iter().copied(), style)).map_err(|e| err(&e))?;
        }
    }
    Ok(())
}

/// Sorted waits (ms) of the started jobs of `tier`, and the number of jobs in `tier`.
fn tier_waits(run: &RunResult, tier: &str) -> (Vec<u64>, usize) {
    let mut jobs = 0;
    let mut waits = Vec::new();
    for r in run.records.iter().filter(|r| &*r.tier == tier) {
        jobs += 1;
        if let Some(start) = r.first_start_ms {
            waits.push(start.saturating_sub(r.submit_ms));
        }
    }
    waits.sort_unstable();
    (waits, jobs)
}

/// Empirical CDF of `waits` (sorted, ms) as a fraction of `jobs`, in seconds on the log
/// axis `[x.min, x.max]`: waits up to `x.min` count at `x.min`; exact steps when they fit
/// in [`MAX_POINTS`], otherwise the steps at every k-th distinct wait (each still exact).
fn cdf_points(waits: &[u64], jobs: usize, x: &LogAxis) -> Vec<(f64, f64)> {
    let seconds = |ms: u64| ms as f64 / 1_000.0;
    if jobs == 0 {
        return vec![(x.min, 0.0), (x.max, 0.0)];
    }
    let frac = |count: usize| count as f64 / jobs as f64;
    let at_min = waits.partition_point(|&w| seconds(w) <= x.min);
    let in_range = waits.partition_point(|&w| seconds(w) <= x.max);
    let mut distinct = waits[at_min..in_range].to_vec();
    distinct.dedup();
    // Start and end, two points per kept step, and the last step always kept.
    let steps_max = (MAX_POINTS - 4) / 2;
    let keep_every = distinct.len().div_ceil(steps_max).max(1);
    let mut points = vec![(x.min, frac(at_min))];
    let mut below = at_min;
    for (i, v) in distinct.iter().copied().enumerate() {
        if i % keep_every != keep_every - 1 && i + 1 != distinct.len() {
            continue;
        }
        let upto = waits.partition_point(|&w| w <= v);
        points.push((seconds(v), frac(below)));
        points.push((seconds(v), frac(upto)));
        below = upto;
    }
    points.push((x.max, frac(below)));
    points
}

/// `wait-cdf-<tier>.svg`: one CDF line per run, on a log time axis (so that policies
/// with short waits are not squashed into the first pixels) from 1 s to past the largest
/// per-policy p99 wait of the tier; y = fraction of the tier's jobs started within x.
pub(super) fn wait_cdf_svg(tier: &str, runs: &[RunResult]) -> Result<String, String> {
    let per_run: Vec<(Vec<u64>, usize)> = runs.iter().map(|r| tier_waits(r, tier)).collect();
    let p99_max_ms = per_run.iter().filter_map(|(w, _)| nearest_rank(w, 99)).max().unwrap_or(0);
    let x = LogAxis::wait_seconds(p99_max_ms as f64 / 1_000.0);
    let series = runs
        .iter()
        .zip(&per_run)
        .enumerate()
        .map(|(i, (run, (waits, jobs)))| {
            let (color, width) = run_style(i, runs.len());
            Series { label: run.policy.clone(), points: cdf_points(waits, *jobs, &x), color, width }
        })
        .collect();
    draw(ChartSpec {
        title: format!("Wait time CDF - tier {tier}"),
        x_desc: "wait to first start (log scale; 1 s includes shorter waits)".to_owned(),
        y_desc: "fraction of jobs started".to_owned(),
        x: XAxis::Log(x),
        y: Axis {
            max: 1.05, // headroom so that lines at 1.0 do not hide in the frame
            ticks: (0..=10).map(|k| decimal(k, -1)).collect(),
            decimals: 1,
        },
        series,
    })
}

/// The allocation step function of `run` in plot units: exact when it fits in
/// [`MAX_POINTS`], otherwise the time-weighted mean over `MAX_POINTS / 2` equal buckets
/// (integer bucket boundaries), drawn as steps.
fn util_points(run: &RunResult, x_of: impl Fn(u64) -> f64) -> Vec<(f64, f64)> {
    let mut util: Vec<UtilSample> = run.util.iter().copied().filter(|s| s.t_ms <= run.end_ms).collect();
    util.sort_by_key(|s| s.t_ms);
    let Some(first) = util.first() else {
        return Vec::new();
    };
    let start = first.t_ms;
    let end = run.end_ms;
    if 2 * util.len() <= MAX_POINTS {
        let mut points = Vec::with_capacity(2 * util.len());
        let mut prev: Option<f64> = None;
        for s in &util {
            if let Some(p) = prev {
                points.push((x_of(s.t_ms), p));
            }
            let gpus = s.gpu_milli_allocated as f64 / 1000.0;
            points.push((x_of(s.t_ms), gpus));
            prev = Some(gpus);
        }
        if let Some(p) = prev.filter(|_| end > util[util.len() - 1].t_ms) {
            points.push((x_of(end), p));
        }
        points
    } else {
        let buckets = (MAX_POINTS / 2) as u128;
        let span = u128::from(end - start);
        let bound = |k: u128| start + (span * k / buckets) as u64;
        let mut points = Vec::with_capacity(MAX_POINTS);
        for k in 0..buckets {
            let (lo, hi) = (bound(k), bound(k + 1));
            if hi > lo {
                let mean = allocated_gpu_ms(&util, end, lo, hi) as f64 / (hi - lo) as f64;
                points.push((x_of(lo), mean));
                points.push((x_of(hi), mean));
            }
        }
        points
    }
}

/// `gpu-utilization.svg`: allocated GPUs over simulated time, one line per run, plus
/// the (largest) capacity as a grey line.
pub(super) fn utilization_svg(runs: &[RunResult]) -> Result<String, String> {
    let end_max = runs.iter().map(|r| r.end_ms).max().unwrap_or(0);
    let (unit, unit_ms) = if end_max > HOURS_AFTER_MS { ("hours", MS_PER_HOUR) } else { ("minutes", MS_PER_MINUTE) };
    let x_of = |ms: u64| ms as f64 / unit_ms;
    let x = Axis::nice(x_of(end_max), 10);
    let capacity = runs.iter().map(|r| r.capacity_gpus).max().unwrap_or(0);
    let alloc_max =
        runs.iter().flat_map(|r| r.util.iter().map(|s| s.gpu_milli_allocated.div_ceil(1000))).max().unwrap_or(0);
    let alloc_max = u32::try_from(alloc_max).unwrap_or(u32::MAX);
    // 10% headroom so that lines at capacity do not hide in the frame.
    let y = Axis::nice(f64::from(capacity.max(alloc_max)) * 1.1, 6);
    let mut series: Vec<Series> = runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let (color, width) = run_style(i, runs.len());
            Series { label: run.policy.clone(), points: util_points(run, x_of), color, width }
        })
        .collect();
    if !runs.is_empty() {
        series.push(Series {
            label: format!("capacity ({capacity} GPUs)"),
            points: vec![(0.0, f64::from(capacity)), (x.max, f64::from(capacity))],
            color: GREY,
            width: 1,
        });
    }
    draw(ChartSpec {
        title: "Allocated GPUs over time".to_owned(),
        x_desc: format!("simulated time ({unit})"),
        y_desc: "GPUs allocated".to_owned(),
        x: XAxis::Linear(x),
        y,
        series,
    })
}

/// A chart of one line per named series over linear axes from 0 (the packing benchmark's
/// curves), axes rounded up from `x_max` and `y_max`.
pub(crate) fn lines_svg(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    (x_max, y_max): (f64, f64),
    lines: &[(String, Vec<(f64, f64)>)],
) -> Result<String, String> {
    let series = lines
        .iter()
        .enumerate()
        .map(|(i, (label, points))| {
            let (color, width) = run_style(i, lines.len());
            Series { label: label.clone(), points: points.clone(), color, width }
        })
        .collect();
    draw(ChartSpec {
        title: title.to_owned(),
        x_desc: x_desc.to_owned(),
        y_desc: y_desc.to_owned(),
        x: XAxis::Linear(Axis::nice(x_max, 13)),
        y: Axis::nice(y_max, 10),
        series,
    })
}
