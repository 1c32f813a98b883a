//! Workload sources: trace loaders and the synthetic generator (in progress).
