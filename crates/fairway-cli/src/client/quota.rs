//! `fairway quota`: list, set and delete per-user and per-project caps.

use anyhow::Result;
use clap::{Subcommand, ValueEnum};
use fairway_server::api::{QuotaList, QuotaSpec, QuotaView};
use reqwest::Method;

use super::{Client, ListFormat, format, print, print_listing, read_json};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct QuotaArgs {
    #[command(subcommand)]
    pub action: Option<QuotaAction>,
    /// Output format of the list.
    #[arg(short = 'o', long, value_enum, default_value_t = ListFormat::Table)]
    pub output: ListFormat,
}

#[derive(Subcommand)]
pub enum QuotaAction {
    /// Set an account's caps, replacing the old ones; a cap not given is unlimited.
    Set {
        kind: QuotaKind,
        account: String,
        /// GPUs the account may hold at once.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        gpus: Option<u32>,
        /// CPU the account may hold at once, in millicores.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        cpu_millis: Option<u64>,
        /// Memory the account may hold at once, in MiB.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        memory_mib: Option<u64>,
    },
    /// Remove an account's caps (it becomes unlimited).
    Delete { kind: QuotaKind, account: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QuotaKind {
    User,
    Project,
}

impl QuotaKind {
    fn as_str(self) -> &'static str {
        match self {
            QuotaKind::User => "user",
            QuotaKind::Project => "project",
        }
    }
}

/// `fairway quota [set|delete]`.
pub async fn quota(client: &Client, args: &QuotaArgs) -> Result<()> {
    match &args.action {
        None => {
            let list: QuotaList = client.get(&["v1", "quotas"], &[]).await?;
            print_listing(&list, args.output, |_| format::quotas_table(&list.quotas))
        }
        Some(QuotaAction::Set { kind, account, gpus, cpu_millis, memory_mib }) => {
            let spec = QuotaSpec { gpus_max: *gpus, cpu_millis_max: *cpu_millis, memory_mib_max: *memory_mib };
            let request = client.request(Method::PUT, &["v1", "quotas", kind.as_str(), account], &[])?.json(&spec);
            let view: QuotaView = read_json(client.send(request).await?).await?;
            let caps = format::quota_caps(view.gpus_max, view.cpu_millis_max, view.memory_mib_max);
            print(&format!("quota/{}/{} set: {caps}\n", view.kind, view.account))
        }
        Some(QuotaAction::Delete { kind, account }) => {
            let request = client.request(Method::DELETE, &["v1", "quotas", kind.as_str(), account], &[])?;
            client.send(request).await?;
            print(&format!("quota/{}/{account} deleted\n", kind.as_str()))
        }
    }
}
