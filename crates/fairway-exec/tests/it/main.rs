//! fairway-exec's integration tests: real shims, jobs, signals and files, no mocks.

mod container;
mod gpus;
mod logs;
mod process;
mod shim;
mod support;
mod trainer;
