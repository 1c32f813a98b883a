//! Per-job records and summary statistics (in progress).
