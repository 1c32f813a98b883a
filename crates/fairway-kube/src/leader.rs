//! Leader election through a `coordination.k8s.io/v1` Lease: two replicas may run, one
//! acts. The holder renews the Lease every third of its duration; another replica takes it
//! over only once it has not been renewed for a whole duration. Every write carries the
//! resourceVersion read, so two candidates cannot both win (the loser gets a 409).
//!
//! A leader that cannot renew in time stops leading: the process exits and Kubernetes
//! restarts it as a follower; the new leader rebuilds from the cluster, so nothing is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

use crate::settings::LeaderElection;

/// What this replica knows of the election, for the API: whether it leads, and who does.
#[derive(Debug, Default)]
pub struct Role {
    /// Leader election is on (without it, this replica acts alone).
    pub election: bool,
    /// The namespace of the Lease (and of the replicas).
    pub namespace: String,
    leading: AtomicBool,
    leader: std::sync::Mutex<Option<String>>,
}

impl Role {
    pub fn new(settings: &LeaderElection) -> Arc<Role> {
        Arc::new(Role { election: settings.enabled, namespace: settings.namespace.clone(), ..Role::default() })
    }

    /// This replica acts (it holds the Lease, or there is no election).
    pub fn acts(&self) -> bool {
        !self.election || self.leading.load(Ordering::Relaxed)
    }

    /// The holder of the Lease when it was last read.
    pub fn leader(&self) -> Option<String> {
        self.leader.lock().expect("not poisoned").clone()
    }

    fn saw(&self, holder: Option<&str>, leading: bool) {
        *self.leader.lock().expect("not poisoned") = holder.map(str::to_owned);
        self.leading.store(leading, Ordering::Relaxed);
    }
}

pub struct Leadership {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    role: Arc<Role>,
}

impl Leadership {
    pub fn new(client: kube::Client, settings: &LeaderElection, identity: String, role: Arc<Role>) -> Leadership {
        Leadership {
            api: Api::namespaced(client, &settings.namespace),
            name: settings.lease_name.clone(),
            identity,
            duration: Duration::from_secs(u64::from(settings.lease_seconds)),
            role,
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_once().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => tracing::warn!("leader election: {e}"),
            }
            tokio::time::sleep(self.duration / 3).await;
        }
    }

    /// Renews the Lease until it cannot; returns when leadership is lost.
    pub async fn keep(&self) {
        let mut last_renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.duration / 3).await;
            match self.try_once().await {
                Ok(true) => last_renewed = tokio::time::Instant::now(),
                Ok(false) => return,
                Err(e) => {
                    tracing::warn!("leader election: cannot renew: {e}");
                    if last_renewed.elapsed() >= self.duration {
                        self.role.saw(None, false);
                        return;
                    }
                }
            }
        }
    }

    /// One attempt to hold (create, renew, or take over) the Lease; the role says the
    /// outcome.
    async fn try_once(&self) -> Result<bool, kube::Error> {
        let outcome = self.attempt().await;
        match &outcome {
            Ok(true) => self.role.saw(Some(&self.identity), true),
            Ok(false) => {
                let holder = self.api.get_opt(&self.name).await.ok().flatten().and_then(|l| l.spec?.holder_identity);
                self.role.saw(holder.as_deref(), false);
            }
            Err(_) => {}
        }
        outcome
    }

    async fn attempt(&self) -> Result<bool, kube::Error> {
        let now = jiff::Timestamp::now();
        let spec = |acquired: Option<MicroTime>, transitions: i32| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs() as i32),
            acquire_time: acquired.or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                spec: Some(spec(None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let current = lease.spec.clone().unwrap_or_default();
        let mine = current.holder_identity.as_deref() == Some(self.identity.as_str());
        let renewed = current.renew_time.as_ref().map(|t| t.0);
        let duration = current.lease_duration_seconds.map_or(self.duration, |s| Duration::from_secs(s.max(1) as u64));
        let expired = renewed.is_none_or(|r| now.duration_since(r).unsigned_abs() >= duration);
        if !mine && !expired {
            return Ok(false);
        }
        let transitions = current.lease_transitions.unwrap_or(0) + i32::from(!mine);
        let acquired = if mine { current.acquire_time.clone() } else { None };
        lease.spec = Some(spec(acquired, transitions));
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}
