mod metrics;
mod workload;
