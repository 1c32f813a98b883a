//! # fairway-core
//!
//! The scheduling brain of Fairway: a pure, deterministic state machine. Drivers (the trace
//! simulator, the standalone daemon, the Kubernetes controller) feed it [`Event`]s with the
//! current time and carry out the [`Decision`]s a [`Scheduler::cycle`] returns.
//!
//! Architecture invariants (see ARCHITECTURE.md):
//! - No IO, no async, no wall clock, no randomness: `now` is a parameter.
//! - No `HashMap` iteration order reaches a decision: ordered maps and stable ids only.
//! - After every cycle: no GPU is assigned twice, gangs are whole, usage is within quota,
//!   reserved GPUs belong to exactly one preemptor.

mod cluster;
pub mod config;
mod cycle;
pub mod decision;
mod estimate;
pub mod event;
mod fairshare;
mod forecast;
mod free_room;
mod ids;
mod invariants;
mod jobs;
mod ledger;
mod min_tree;
mod model;
pub mod packing;
pub mod placement;
mod plan;
mod preemption;
mod queue;
mod restore;
mod scheduler;
pub mod search;
#[cfg(test)]
mod test_rng;
pub mod types;
mod victims;

pub use config::{Config, FairSharing, Limits, Policy, QueueOrder, Reservations, RuntimeEstimates, ScoringPolicy};
pub use cycle::{CycleOutcome, CycleStats};
pub use decision::{Decision, LimitSource, PendingReason, PreemptCause, RequeueCause, StopCause};
pub use event::{Event, ExitOutcome, RestoredHold, RestoredJob, RestoredRun, RestoredStop};
pub use forecast::{Estimate, StartEstimate};
pub use scheduler::{CoreError, Counters, JobStatus, PlannedStart, Scheduler};
pub use types::*;
