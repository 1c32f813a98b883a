//! The fake API server through the real `kube` client.

mod common;
mod crud;
mod faults;
mod jobs;
mod kubelet;
mod lists;
mod paddle;
mod quotas;
mod scenarios;
mod watches;
mod webhooks;
