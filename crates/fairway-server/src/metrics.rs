//! Prometheus metrics (OpenMetrics text at `/metrics`), fed by the engine.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use fairway_store::JobState;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabels {
    pub tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierStateLabels {
    pub tier: String,
    pub state: String,
}

pub struct Metrics {
    pub registry: Registry,
    /// Unfinished jobs by tier and state (`pending`, `running`, `preempting`, `stopping`).
    pub jobs: Family<TierStateLabels, Gauge>,
    /// Submit to first start, per tier.
    pub wait: Family<TierLabels, Histogram>,
    /// Finished jobs by tier and final state.
    pub finished: Family<TierStateLabels, Counter>,
    pub gpus_total: Gauge,
    pub gpus_allocated: Gauge,
    pub preemptions: Counter,
    pub starts: Counter,
    pub submissions: Counter,
    pub cycle_seconds: Histogram,
    /// Seconds until the first pending job of each tier is expected to start.
    pub head_start_estimate: Family<TierLabels, Gauge>,
}

/// Wait buckets: from a second to a day, the range "why is my job pending" lives in.
const WAIT_BUCKETS: [f64; 14] =
    [1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0];

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("fairway");
        let jobs = Family::<TierStateLabels, Gauge>::default();
        let wait = Family::<TierLabels, Histogram>::new_with_constructor(|| Histogram::new(WAIT_BUCKETS));
        let finished = Family::<TierStateLabels, Counter>::default();
        let cycle_seconds = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.0001, 4.0, 10));
        let m = Metrics {
            jobs: jobs.clone(),
            wait: wait.clone(),
            finished: finished.clone(),
            gpus_total: Gauge::default(),
            gpus_allocated: Gauge::default(),
            preemptions: Counter::default(),
            starts: Counter::default(),
            submissions: Counter::default(),
            cycle_seconds: cycle_seconds.clone(),
            head_start_estimate: Family::default(),
            registry: Registry::default(),
        };
        registry.register("jobs", "Unfinished jobs by priority tier and state", jobs);
        registry.register("job_wait_seconds", "Time from submission to first start, by priority tier", wait);
        registry.register("jobs_finished", "Jobs that finished, by priority tier and final state", finished);
        registry.register("gpus", "GPUs the server schedules", m.gpus_total.clone());
        registry.register("gpus_allocated", "GPUs assigned to jobs", m.gpus_allocated.clone());
        registry.register("preemptions", "Jobs asked to stop for higher-priority work", m.preemptions.clone());
        registry.register("job_starts", "Runs started", m.starts.clone());
        registry.register("submissions", "Jobs accepted", m.submissions.clone());
        registry.register("scheduling_cycle_seconds", "Duration of one scheduling cycle", cycle_seconds);
        registry.register(
            "queue_head_start_estimate_seconds",
            "Seconds until the first pending job of each priority tier is expected to start (refreshed at most every second)",
            m.head_start_estimate.clone(),
        );
        Metrics { registry, ..m }
    }

    pub fn job_state(&self, tier: &str, state: JobState, delta: i64) {
        if state.is_finished() {
            return;
        }
        self.jobs.get_or_create(&TierStateLabels { tier: tier.into(), state: state.as_str().into() }).inc_by(delta);
    }

    /// Forgets every job gauge (the engine rebuilds them from the store).
    pub fn reset_job_gauges(&self) {
        self.jobs.clear();
    }

    pub fn wait_seconds(&self, tier: &str, seconds: f64) {
        self.wait.get_or_create(&TierLabels { tier: tier.into() }).observe(seconds);
    }

    pub fn finished(&self, tier: &str, state: JobState) {
        self.finished.get_or_create(&TierStateLabels { tier: tier.into(), state: state.as_str().into() }).inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
