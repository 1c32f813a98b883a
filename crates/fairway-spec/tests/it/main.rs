//! Integration tests of fairway-spec: one binary, one module per concern.

mod article;
mod bad_input;
mod classes;
mod cluster;
mod convert;
mod formats;
mod quantities;
mod run_fields;
mod support;
mod warnings;
