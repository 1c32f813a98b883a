//! The Kubernetes driver: the engine on objects built in the test (no cluster).

mod e2e;
mod engine;
mod http;
mod manifests;
