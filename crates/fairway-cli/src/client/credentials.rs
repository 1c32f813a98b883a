//! Which bearer token the CLI sends, found without flags where it safely can.
//!
//! In order:
//! 1. `--token` / `FAIRWAY_TOKEN`;
//! 2. `--token-file` / `FAIRWAY_TOKEN_FILE`;
//! 3. the token saved for this server by `fairway login` (`~/.config/fairway/credentials.json`,
//!    mode 0600);
//! 4. on the server's own machine, for a loopback URL: the admin token in the data directory
//!    of the server listening on that port. The data directory is found through the record
//!    the server left in `~/.local/state/fairway/servers/` (or `$FAIRWAY_DATA_DIR`, or
//!    `./fairway-data`), and the token is used only if that directory's `server.json` names
//!    the same port and a server holds the directory's lock right now. Only the server's own
//!    Unix user (or root) can read the token, and it is never sent to a process that merely
//!    listens on the port while the server is down.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use fairway_server::datadir::{self, ADMIN_TOKEN_FILE};
use reqwest::Url;

/// What `--token`, `--token-file` and their variables gave.
#[derive(Clone, Debug, Default)]
pub struct TokenArgs {
    pub token: Option<String>,
    pub token_file: Option<PathBuf>,
}

/// The token to send to `server`, and where it came from (for messages).
pub fn find_token(server: &Url, args: &TokenArgs) -> Result<Option<(String, String)>> {
    if let Some(token) = args.token.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(Some((token.to_owned(), "--token / FAIRWAY_TOKEN".into())));
    }
    if let Some(path) = &args.token_file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read the token file {}", path.display()))?;
        return Ok(Some((text.trim().to_owned(), path.display().to_string())));
    }
    if let Some(token) = saved_token(server) {
        return Ok(Some((token, credentials_file().map(|p| p.display().to_string()).unwrap_or_default())));
    }
    Ok(local_admin_token(server))
}

/// `~/.config/fairway/credentials.json` (or under `$XDG_CONFIG_HOME`).
pub fn credentials_file() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("fairway").join("credentials.json"))
}

/// Saved tokens by server URL.
fn saved() -> BTreeMap<String, String> {
    credentials_file()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

fn saved_token(server: &Url) -> Option<String> {
    saved().get(&server_key(server)).cloned()
}

/// Saves `token` for `server` (mode 0600), replacing an earlier one.
pub fn save_token(server: &Url, token: &str) -> Result<PathBuf> {
    let path = credentials_file().context("no home directory to keep credentials in (set HOME or XDG_CONFIG_HOME)")?;
    let mut all = saved();
    all.insert(server_key(server), token.to_owned());
    let dir = path.parent().expect("in a directory");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let text = serde_json::to_string_pretty(&all).expect("plain data");
    datadir::write_private(&path, text.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(path)
}

/// Forgets the token saved for `server`; whether there was one.
pub fn forget_token(server: &Url) -> Result<bool> {
    let Some(path) = credentials_file() else { return Ok(false) };
    let mut all = saved();
    if all.remove(&server_key(server)).is_none() {
        return Ok(false);
    }
    let text = serde_json::to_string_pretty(&all).expect("plain data");
    datadir::write_private(&path, text.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(true)
}

fn server_key(server: &Url) -> String {
    server.as_str().trim_end_matches('/').to_owned()
}

/// The admin token of the server that owns the data directory behind a loopback URL.
fn local_admin_token(server: &Url) -> Option<(String, String)> {
    let host = server.host_str()?;
    let loopback = host == "localhost"
        || host.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let port = server.port_or_known_default()?;
    if !loopback {
        return None;
    }
    let mut candidates = Vec::new();
    if let Some(dir) = fairway_server::config::default_registry_dir()
        && let Some(data_dir) = datadir::read_registry(&datadir::registry_file(&dir, port))
    {
        candidates.push(data_dir);
    }
    if let Some(dir) = std::env::var_os("FAIRWAY_DATA_DIR") {
        candidates.push(PathBuf::from(dir));
    }
    candidates.push(PathBuf::from("fairway-data"));
    let https = server.scheme() == "https";
    candidates.into_iter().find_map(|dir| {
        let token = owned_by_live_server(&dir, port, https)?;
        Some((token, dir.join(ADMIN_TOKEN_FILE).display().to_string()))
    })
}

/// The admin token of `data_dir`, if the server holding it right now listens on `port`.
fn owned_by_live_server(data_dir: &Path, port: u16, https: bool) -> Option<String> {
    let info = datadir::read_server_file(data_dir)?;
    let listening: std::net::SocketAddr = info.listen.parse().ok()?;
    if listening.port() != port || info.tls != https || !datadir::server_holds_lock(data_dir) {
        return None;
    }
    let token = std::fs::read_to_string(data_dir.join(ADMIN_TOKEN_FILE)).ok()?;
    let token = token.trim();
    fairway_server::auth::is_well_formed(token).then(|| token.to_owned())
}
