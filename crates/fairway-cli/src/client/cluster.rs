//! Cluster commands: `nodes`, `priority-classes`.

use anyhow::Result;
use fairway_server::api::{NodeList, PriorityClassList};

use super::{Client, ListFormat, format, print_listing};

#[derive(clap::Args)]
pub struct ListArgs {
    /// Output format (`wide` adds what runs on each GPU, for `nodes`).
    #[arg(short = 'o', long, value_enum, default_value_t = ListFormat::Table)]
    pub output: ListFormat,
}

/// `fairway nodes`.
pub async fn nodes(client: &Client, args: &ListArgs) -> Result<()> {
    let list: NodeList = client.get(&["v1", "nodes"], &[]).await?;
    print_listing(&list, args.output, |wide| format::nodes_table(&list.nodes, wide, super::now_ms()))
}

/// `fairway priority-classes`.
pub async fn priority_classes(client: &Client, args: &ListArgs) -> Result<()> {
    let list: PriorityClassList = client.get(&["v1", "priority-classes"], &[]).await?;
    print_listing(&list, args.output, |_| format::priority_classes_table(&list.priority_classes))
}
