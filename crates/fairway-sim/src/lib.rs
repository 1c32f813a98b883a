//! # fairway-sim
//!
//! A discrete-event simulator that drives `fairway-core` with a virtual clock.

pub mod engine;
pub mod metrics;
pub mod report;
pub mod scenario;
pub mod workload;
