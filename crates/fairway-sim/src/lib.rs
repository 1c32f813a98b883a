//! # fairway-sim
//!
//! A discrete-event simulator that drives `fairway-core` with a virtual clock.

pub mod metrics;
pub mod report;
pub mod workload;
