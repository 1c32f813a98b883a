//! # fairway-sim
//!
//! A discrete-event simulator that drives `fairway-core` with a virtual clock.

pub mod anomaly;
mod audit;
pub mod engine;
pub mod images;
pub mod metrics;
pub mod pack;
pub mod report;
pub mod scenario;
pub mod sweep;
pub mod workload;
