mod engine;
mod metrics;
mod workload;
