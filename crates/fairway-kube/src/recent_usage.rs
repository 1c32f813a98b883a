//! Fair sharing's memory across leaders: each namespace's (and user's) recent average
//! holding (`fairway_core::RecentUsage`) is kept in the ConfigMap [`CONFIGMAP_NAME`] of the
//! controller's namespace, written by the leader once a minute and when it shuts down, and
//! read by a new leader before its first listing is done, to hand back to the core once
//! the workloads are restored. A namespace that burst before a restart or a failover still
//! yields after it; a leader that dies without shutting down forgets the last minute.
//!
//! The document (key [`DATA_KEY`]):
//!
//! ```json
//! {"as_of_ms": 1765000000000,
//!  "accounts": [{"kind": "project", "account": "ads", "gpu_milli": 3500, "cpu_millis": 0, "memory_mib": 0}]}
//! ```

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use serde::{Deserialize, Serialize};

use fairway_core::RecentUsage;
use fairway_spec::AccountKind;

/// The ConfigMap, in the controller's namespace (`leader_election.namespace`).
pub const CONFIGMAP_NAME: &str = "fairway-fair-share";
/// Its one key.
pub const DATA_KEY: &str = "recent-usage.json";
/// How often, at most, the leader saves it. With a half-life of hours or days a minute's
/// drift does not change who goes first.
pub const SAVE_EVERY_MS: u64 = 60_000;
/// The most accounts saved: a ConfigMap holds at most 1 MiB, and an entry takes about a
/// hundred bytes. Beyond it the accounts holding most lately are kept.
pub const ACCOUNTS_MAX: usize = 5_000;

/// What is saved: each account's recent average as of one time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedRecentUsage {
    pub as_of_ms: u64,
    #[serde(default)]
    pub accounts: Vec<SavedAccount>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedAccount {
    /// `project` (a namespace) or `user`.
    pub kind: String,
    pub account: String,
    pub gpu_milli: u64,
    #[serde(default)]
    pub cpu_millis: u64,
    #[serde(default)]
    pub memory_mib: u64,
}

impl SavedAccount {
    /// Its kind, if it is one an account can have a share of.
    pub fn account_kind(&self) -> Option<AccountKind> {
        AccountKind::parse(&self.kind).filter(|k| matches!(k, AccountKind::User | AccountKind::Project))
    }

    pub fn recent(&self) -> RecentUsage {
        RecentUsage { gpu_milli: self.gpu_milli, cpu_millis: self.cpu_millis, memory_mib: self.memory_mib }
    }
}

impl SavedRecentUsage {
    /// The document as saved: at most [`ACCOUNTS_MAX`] accounts, those holding most lately
    /// (GPUs, then CPU, then memory), in kind and name order.
    pub fn new(as_of_ms: u64, mut accounts: Vec<SavedAccount>) -> SavedRecentUsage {
        if accounts.len() > ACCOUNTS_MAX {
            accounts.sort_by(|a, b| {
                let size = |s: &SavedAccount| std::cmp::Reverse((s.gpu_milli, s.cpu_millis, s.memory_mib));
                (size(a), &a.kind, &a.account).cmp(&(size(b), &b.kind, &b.account))
            });
            accounts.truncate(ACCOUNTS_MAX);
        }
        accounts.sort_by(|a, b| (&a.kind, &a.account).cmp(&(&b.kind, &b.account)));
        SavedRecentUsage { as_of_ms, accounts }
    }

    /// Reads the document, naming what is wrong with it.
    pub fn parse(text: &str) -> Result<SavedRecentUsage, String> {
        let saved: SavedRecentUsage = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if saved.accounts.len() > ACCOUNTS_MAX {
            return Err(format!("accounts: at most {ACCOUNTS_MAX}, got {}", saved.accounts.len()));
        }
        for (i, a) in saved.accounts.iter().enumerate() {
            if a.account_kind().is_none() {
                return Err(format!("accounts[{i}].kind: must be project or user, got {:?}", a.kind));
            }
        }
        Ok(saved)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plain data")
    }
}

/// The saved document, if there is one. A ConfigMap that cannot be read or whose document
/// is not valid is logged and taken as none: fair sharing then starts from what runs.
pub async fn load(client: &kube::Client, namespace: &str) -> Option<SavedRecentUsage> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let map = match api.get_opt(CONFIGMAP_NAME).await {
        Ok(map) => map?,
        Err(e) => {
            tracing::warn!(
                "reading ConfigMap {namespace}/{CONFIGMAP_NAME}: {e}; fair sharing starts from what runs now"
            );
            return None;
        }
    };
    let text = map.data.as_ref().and_then(|d| d.get(DATA_KEY))?;
    match SavedRecentUsage::parse(text) {
        Ok(saved) => Some(saved),
        Err(e) => {
            tracing::warn!(
                "ConfigMap {namespace}/{CONFIGMAP_NAME}, key {DATA_KEY}: {e}; fair sharing starts from what runs now"
            );
            None
        }
    }
}

/// Writes the document: the ConfigMap replaced, or made the first time.
pub async fn save(client: &kube::Client, namespace: &str, json: &str) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(CONFIGMAP_NAME.into()),
            namespace: Some(namespace.into()),
            labels: Some([("app.kubernetes.io/name".to_owned(), "fairway".to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some([(DATA_KEY.to_owned(), json.to_owned())].into()),
        ..ConfigMap::default()
    };
    // Without a resourceVersion a replace is unconditional: the leader alone writes it.
    match api.replace(CONFIGMAP_NAME, &PostParams::default(), &map).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {
            api.create(&PostParams::default(), &map).await.map(|_| ())
        }
        other => other.map(|_| ()),
    }
}
