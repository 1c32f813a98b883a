//! Identities and projects: `token`, `whoami`, `login`, `logout`, `project`.

use std::io::Read;

use anyhow::{Context, Result, bail};
use clap::{Subcommand, ValueEnum};
use fairway_server::api::{
    NewTokenRequest, ProjectList, ProjectSpec, ProjectView, Role, TokenCreated, TokenList, WhoAmI,
};
use reqwest::Method;

use super::{Client, ListFormat, format, print, print_listing, read_json};

#[derive(clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
}

#[derive(Subcommand)]
pub enum TokenAction {
    /// Create a token for a user of a project (admin). The secret is printed once.
    Create {
        #[arg(long)]
        user: String,
        #[arg(long)]
        project: String,
        /// `viewer` reads its project's jobs; `submitter` also submits and cancels its own;
        /// `admin` may do everything.
        #[arg(long, value_enum, default_value_t = RoleArg::Submitter)]
        role: RoleArg,
        /// A label for `token ls` (default: USER@PROJECT).
        #[arg(long)]
        name: Option<String>,
        /// The token stops working after this long: `3600`, `90m`, `12h`, `30d`.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration_seconds)]
        expires_in: Option<u64>,
        /// Print only the secret (for scripts).
        #[arg(long)]
        quiet: bool,
    },
    /// List tokens, never their secrets (admin).
    #[command(visible_alias = "list")]
    Ls {
        #[arg(short = 'o', long, value_enum, default_value_t = ListFormat::Table)]
        output: ListFormat,
    },
    /// Revoke a token by id (admin; anyone may revoke the token they use).
    Revoke {
        #[arg(allow_negative_numbers = true)]
        id: i64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    Viewer,
    Submitter,
    Admin,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Role {
        match r {
            RoleArg::Viewer => Role::Viewer,
            RoleArg::Submitter => Role::Submitter,
            RoleArg::Admin => Role::Admin,
        }
    }
}

/// `3600`, `90s`, `90m`, `12h`, `30d` as seconds.
fn parse_duration_seconds(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits.parse().map_err(|_| format!("{text:?} is not a duration such as 3600, 90m, 12h or 30d"))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d")),
    };
    match n.checked_mul(scale) {
        Some(0) => Err("a token must live at least a second".into()),
        Some(s) => Ok(s),
        None => Err(format!("{text:?} is too long")),
    }
}

pub async fn token(client: &Client, args: &TokenArgs) -> Result<()> {
    match &args.action {
        TokenAction::Create { user, project, role, name, expires_in, quiet } => {
            let spec = NewTokenRequest {
                user: user.clone(),
                project: project.clone(),
                role: Some((*role).into()),
                name: name.clone(),
                expires_in_seconds: *expires_in,
            };
            let request = client.request(Method::POST, &["v1", "tokens"], &[])?.json(&spec);
            let created: TokenCreated = read_json(client.send(request).await?).await?;
            if *quiet {
                return print(&format!("{}\n", created.secret));
            }
            let t = &created.token;
            print(&format!(
                "token/{} created for user {} of project {} ({}). Its secret, shown only now:\n\n  {}\n\n\
                 Give it to its user, who runs `export FAIRWAY_TOKEN=<secret>` or `fairway login`.\n",
                t.id,
                t.user,
                t.project,
                t.role.as_str(),
                created.secret
            ))
        }
        TokenAction::Ls { output } => {
            let list: TokenList = client.get(&["v1", "tokens"], &[]).await?;
            print_listing(&list, *output, |_| format::tokens_table(&list.tokens, super::now_ms()))
        }
        TokenAction::Revoke { id } => {
            let request = client.request(Method::DELETE, &["v1", "tokens", &id.to_string()], &[])?;
            client.send(request).await?;
            print(&format!("token/{id} revoked\n"))
        }
    }
}

/// `fairway whoami`: the caller as the server sees it.
pub async fn whoami(client: &Client) -> Result<()> {
    let me: WhoAmI = client.get(&["v1", "whoami"], &[]).await?;
    let max = me.priority_class_max.as_deref().unwrap_or("any (admin)");
    print(&format!(
        "user {} in project {}, role {}, token/{} ({})\nhighest priority class: {max}\n",
        me.user,
        me.project,
        me.role.as_str(),
        me.token_id,
        me.token_name
    ))
}

/// `fairway ui`: checks the token, then prints the dashboard's address, signed in.
pub async fn ui(client: &Client) -> Result<()> {
    let me: WhoAmI = client.get(&["v1", "whoami"], &[]).await?;
    let link = client.dashboard_link()?;
    print(&format!(
        "{link}
opens the dashboard as user {} of project {} ({}): the link holds your token, keep it to yourself
",
        me.user,
        me.project,
        me.role.as_str()
    ))
}

/// `fairway login`: checks a token against the server and saves it for that server. The
/// token comes from `source` (the global `--token-file`), else from standard input (also
/// `-`). The login command once had its own `--token-file`, which clashed with the global
/// one of the same name and made every `fairway login` panic.
pub async fn login(client: &Client, server: &reqwest::Url, source: Option<&std::path::Path>) -> Result<()> {
    let mut text = String::new();
    match source.filter(|p| p.as_os_str() != "-") {
        None => {
            std::io::stdin().read_to_string(&mut text).context("cannot read the token from standard input")?;
        }
        Some(path) => {
            text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        }
    }
    let token = text.trim().to_owned();
    if !fairway_server::auth::is_well_formed(&token) {
        bail!("that is not a Fairway token (fwt_ and 64 hex digits)");
    }
    let probe = client.with_token(&token);
    let me: WhoAmI = probe.get(&["v1", "whoami"], &[]).await?;
    let path = super::credentials::save_token(server, &token)?;
    print(&format!(
        "logged in to {} as user {} of project {} ({}); token saved in {}\n",
        server.as_str().trim_end_matches('/'),
        me.user,
        me.project,
        me.role.as_str(),
        path.display()
    ))
}

/// `fairway logout`: forgets the token saved for the server.
pub fn logout(server: &reqwest::Url) -> Result<()> {
    let server_text = server.as_str().trim_end_matches('/');
    match super::credentials::forget_token(server)? {
        true => print(&format!("forgot the token saved for {server_text}\n")),
        false => print(&format!("no token was saved for {server_text}\n")),
    }
}

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProjectArgs {
    #[command(subcommand)]
    pub action: Option<ProjectAction>,
    #[arg(short = 'o', long, value_enum, default_value_t = ListFormat::Table)]
    pub output: ListFormat,
}

#[derive(Subcommand)]
pub enum ProjectAction {
    /// Set a project's highest priority class (admin).
    Set {
        #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
        name: String,
        /// The highest priority class the project's tokens may submit at.
        #[arg(long, value_name = "CLASS")]
        priority_class_max: Option<String>,
    },
}

pub async fn project(client: &Client, args: &ProjectArgs) -> Result<()> {
    match &args.action {
        None => {
            let list: ProjectList = client.get(&["v1", "projects"], &[]).await?;
            print_listing(&list, args.output, |_| format::projects_table(&list.projects))
        }
        Some(ProjectAction::Set { name, priority_class_max }) => {
            let spec = ProjectSpec { priority_class_max: priority_class_max.clone() };
            let request = client.request(Method::PUT, &["v1", "projects", name], &[])?.json(&spec);
            let view: ProjectView = read_json(client.send(request).await?).await?;
            print(&format!(
                "project/{} set: highest priority class {} ({})\n",
                view.name, view.priority_class_max, view.priority_class_max_source
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration_seconds;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration_seconds("3600"), Ok(3600));
        assert_eq!(parse_duration_seconds("90m"), Ok(5400));
        assert_eq!(parse_duration_seconds("30d"), Ok(2_592_000));
        assert!(parse_duration_seconds("0").is_err());
        assert!(parse_duration_seconds("5w").unwrap_err().contains("unit"));
        assert!(parse_duration_seconds("soon").is_err());
        assert!(parse_duration_seconds("99999999999999999999d").is_err());
    }
}
