//! Integration tests of fairway-spec: one binary, one module per concern.

mod article;
mod bad_input;
mod classes;
mod cluster;
mod cluster_mode;
mod convert;
mod display;
mod formats;
mod fuzz_findings;
mod images;
mod leaks;
mod quantities;
mod resolve;
mod run_fields;
mod support;
mod tenant;
mod warnings;
