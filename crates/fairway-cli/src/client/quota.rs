//! `fairway quota`: list, set and delete per-user and per-project caps and fair-share
//! weights, and the cohorts in which projects lend each other idle nominal quota.

use anyhow::{Context, Result, bail};
use clap::builder::NonEmptyStringValueParser;
use clap::{Subcommand, ValueEnum};
use fairway_server::api::{
    CohortList, CohortSpec, CohortView, FairShareWeightSpec, FairShareWeightView, QuotaList, QuotaSpec, QuotaView,
};
use fairway_spec::{LimitsDoc, MemberDoc};
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
        #[arg(value_parser = NonEmptyStringValueParser::new())]
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
    Delete {
        kind: QuotaKind,
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        account: String,
    },
    /// Set an account's fair-share weight (1 to 1000000; 1, the default, removes it): inside a
    /// priority, a tenant of weight 2 is served as if it held half of what it holds.
    Weight {
        kind: QuotaKind,
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        account: String,
        #[arg(allow_negative_numbers = true)]
        weight: u32,
    },
    /// List the cohorts: members, nominal quotas, what they use and borrow.
    Cohorts {
        /// Output format of the list.
        #[arg(short = 'o', long, value_enum, default_value_t = ListFormat::Table)]
        output: ListFormat,
    },
    /// Set or delete a cohort (projects lending each other idle nominal quota).
    Cohort {
        #[command(subcommand)]
        action: CohortAction,
    },
}

#[derive(Subcommand)]
pub enum CohortAction {
    /// Set a cohort's members, replacing the old list.
    Set {
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        name: String,
        /// A member as `PROJECT:GPUS[:borrow=N][:lend=N]` (GPUs only; repeat per member).
        #[arg(long = "member", value_name = "SPEC")]
        members: Vec<String>,
        /// The members, YAML or JSON, for CPU and memory too: a list, `members: [...]` (the API's body) or one cohort of the config file (`name`, `members`; `docs/cohorts.md`).
        #[arg(long, value_name = "PATH", conflicts_with = "members")]
        file: Option<std::path::PathBuf>,
    },
    /// Delete a cohort.
    Delete {
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        name: String,
    },
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
        Some(QuotaAction::Weight { kind, account, weight }) => {
            let spec = FairShareWeightSpec { weight: *weight };
            let path = ["v1", "fair-share-weights", kind.as_str(), account];
            let request = client.request(Method::PUT, &path, &[])?.json(&spec);
            let view: FairShareWeightView = read_json(client.send(request).await?).await?;
            print(&format!("weight/{}/{} set: {}\n", view.kind, view.account, view.weight))
        }
        Some(QuotaAction::Cohorts { output }) => {
            let list: CohortList = client.get(&["v1", "cohorts"], &[]).await?;
            print_listing(&list, *output, |_| format::cohorts_table(&list.cohorts))
        }
        Some(QuotaAction::Cohort { action: CohortAction::Set { name, members, file } }) => {
            let members = match file {
                Some(path) => {
                    let text = std::fs::read_to_string(path).with_context(|| format!("--file {}", path.display()))?;
                    let file: MembersFile = fairway_spec::from_yaml(&text)
                        .map_err(|message| anyhow::anyhow!("--file {}: {message}", path.display()))?;
                    match file.name {
                        Some(named) if named != *name => bail!(
                            "--file {}: name: the file is cohort {named:?}, not {name:?}; drop the name or set {named:?}",
                            path.display()
                        ),
                        _ => file.members,
                    }
                }
                None => members.iter().map(|m| member_of(m)).collect::<Result<Vec<_>>>()?,
            };
            if members.is_empty() {
                bail!("give the members with --member (one per member) or --file");
            }
            let spec = CohortSpec { members };
            let request = client.request(Method::PUT, &["v1", "cohorts", name], &[])?.json(&spec);
            let view: CohortView = read_json(client.send(request).await?).await?;
            print(&format!("cohort/{} set\n{}", view.name, format::cohorts_table(std::slice::from_ref(&view))))
        }
        Some(QuotaAction::Cohort { action: CohortAction::Delete { name } }) => {
            let request = client.request(Method::DELETE, &["v1", "cohorts", name], &[])?;
            client.send(request).await?;
            print(&format!("cohort/{name} deleted\n"))
        }
    }
}

/// `PROJECT:GPUS[:borrow=N][:lend=N]`, read strictly.
fn member_of(spec: &str) -> Result<MemberDoc> {
    let mut parts = spec.split(':');
    let project = parts.next().filter(|p| !p.is_empty()).with_context(|| format!("--member {spec:?}: no project"))?;
    let number = |what: &str, v: &str| -> Result<u32> {
        v.parse().with_context(|| format!("--member {spec:?}: {what} must be a whole number of GPUs, got {v:?}"))
    };
    let gpus = number("GPUS", parts.next().with_context(|| format!("--member {spec:?}: give PROJECT:GPUS"))?)?;
    let gpus_only = |g: u32| Some(LimitsDoc { gpus: Some(g), ..LimitsDoc::default() });
    let mut member = MemberDoc {
        project: project.to_string(),
        nominal: gpus_only(gpus).expect("some"),
        borrowing_limit: None,
        lending_limit: None,
    };
    for part in parts {
        let (slot, what, v) = match part.split_once('=') {
            Some(("borrow", v)) => (&mut member.borrowing_limit, "borrow", v),
            Some(("lend", v)) => (&mut member.lending_limit, "lend", v),
            _ => bail!("--member {spec:?}: {part:?} is not borrow=N or lend=N"),
        };
        // A second value would silently win; say so instead.
        if slot.is_some() {
            bail!("--member {spec:?}: {what} is given twice");
        }
        *slot = gpus_only(number(what, v)?);
    }
    Ok(member)
}

/// `fairway quota cohort set NAME --file`: the members as a list, as the request's body
/// (`members: [...]`), or as one cohort of the config file (`name: ..., members: [...]`),
/// so that each of those can be pasted as it is. Parsed by its form, not `untagged`, so
/// that a mistake inside is reported at its line.
struct MembersFile {
    name: Option<String>,
    members: Vec<MemberDoc>,
}

impl<'de> serde::Deserialize<'de> for MembersFile {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Cohort {
            name: Option<String>,
            members: Vec<MemberDoc>,
        }
        struct Form;
        impl<'de> serde::de::Visitor<'de> for Form {
            type Value = MembersFile;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of members, or a mapping with `members` (and optionally the cohort's `name`)")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> std::result::Result<MembersFile, A::Error> {
                let members = serde::Deserialize::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
                Ok(MembersFile { name: None, members })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> std::result::Result<MembersFile, A::Error> {
                let c: Cohort = serde::Deserialize::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(MembersFile { name: c.name, members: c.members })
            }
        }
        deserializer.deserialize_any(Form)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_read_strictly() {
        let m = member_of("vision:4:borrow=2:lend=1").unwrap();
        assert_eq!((m.project.as_str(), m.nominal.gpus), ("vision", Some(4)));
        assert_eq!((m.borrowing_limit.unwrap().gpus, m.lending_limit.unwrap().gpus), (Some(2), Some(1)));
        for bad in [
            "",
            "vision",
            "vision:four",
            ":4",
            "vision:4:borrow",
            "vision:4:steal=2",
            "vision:4:lend=-1",
            "vision:4:borrow=2:borrow=3",
        ] {
            assert!(member_of(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
