mod metrics;
mod workload;
mod engine;
