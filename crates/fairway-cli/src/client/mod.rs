//! The client commands: a small HTTP client for the server's `/v1` API (`fairway-server`'s
//! `api` types) and the commands built on it. Printing lives in [`format`]; this module does
//! the requests and turns every failure into one clear error.

use std::fmt;
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use fairway_server::api::{ErrorBody, JobList};
use reqwest::{Method, RequestBuilder, Response, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub mod admin;
pub mod cluster;
pub mod credentials;
pub mod format;
pub mod jobs;
pub mod quota;

/// Where the server listens unless told otherwise (`fairway serve`'s default).
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7733";

/// How long to wait for the server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an ordinary (not streaming) request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `--server`: an `http` or `https` URL.
pub fn parse_server_url(s: &str) -> Result<Url, String> {
    let url = Url::parse(s).map_err(|e| format!("{e} (expected e.g. {DEFAULT_SERVER})"))?;
    match url.scheme() {
        "http" | "https" if url.host().is_some() => Ok(url),
        _ => Err(format!("expected an http:// or https:// URL with a host, e.g. {DEFAULT_SERVER}")),
    }
}

/// Output formats of the listing commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    Table,
    Wide,
    Json,
    Yaml,
}

/// Output formats of commands that print one document (`describe -o`, `submit -o`, `why -o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DocFormat {
    Json,
    Yaml,
}

impl ListFormat {
    fn doc(self) -> Option<DocFormat> {
        match self {
            ListFormat::Table | ListFormat::Wide => None,
            ListFormat::Json => Some(DocFormat::Json),
            ListFormat::Yaml => Some(DocFormat::Yaml),
        }
    }
}

/// The server's error answer, printed as its message plus one line per field problem.
#[derive(Debug)]
pub struct ApiError {
    pub body: ErrorBody,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = &self.body.error.message;
        f.write_str(message)?;
        for d in &self.body.error.details {
            let line = fairway_server::where_and_why(d);
            // A single problem is usually spelled out in the message already.
            if !message.contains(&line) {
                write!(f, "\n  {line}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ApiError {}

/// The server could not be reached at all.
#[derive(Debug)]
pub struct Unreachable {
    pub server: String,
    pub cause: String,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot reach the Fairway server at {}: {} (is `fairway serve` running? set --server or FAIRWAY_SERVER)",
            self.server, self.cause
        )
    }
}

impl std::error::Error for Unreachable {}

/// The innermost cause of an error: for a refused connection, `Connection refused (os error 111)`
/// rather than reqwest's `error sending request for url (…)`.
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// One connection to one server; cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    /// The server URL as the user wrote it, without a trailing `/`, for messages.
    server: String,
    /// The bearer token, and where it was found.
    token: Option<(String, String)>,
}

/// How to reach and trust the server: `--ca-cert` for a server whose certificate a private
/// CA signed.
#[derive(Clone, Debug, Default)]
pub struct Connection {
    pub credentials: credentials::TokenArgs,
    pub ca_cert: Option<std::path::PathBuf>,
}

impl Client {
    pub fn new(server: &Url, connection: &Connection) -> Result<Client> {
        // reqwest is built with `rustls-no-provider`: it needs a process-wide provider even if
        // we only ever speak plain HTTP. Installing fails only if one is already installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("fairway/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &connection.ca_cert {
            let pem = std::fs::read(path).with_context(|| format!("cannot read --ca-cert {}", path.display()))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("--ca-cert {}: not a PEM certificate bundle", path.display()))?
            {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build().context("cannot create the HTTP client")?;
        let token = credentials::find_token(server, &connection.credentials)?;
        Ok(Client { http, base: server.clone(), server: server.as_str().trim_end_matches('/').to_string(), token })
    }

    /// The same client with another token (to check one before saving it).
    pub fn with_token(&self, token: &str) -> Client {
        Client { token: Some((token.to_owned(), "the token given to log in".into())), ..self.clone() }
    }

    /// The dashboard's address with this client's token in its fragment, which browsers
    /// never send to the server: opening it signs the page in (`fairway ui`).
    pub fn dashboard_link(&self) -> Result<Url> {
        let Some((token, _)) = &self.token else {
            anyhow::bail!("no token for {}: run `fairway login` first, or pass --token-file", self.server);
        };
        let mut url = self.url(&["ui", ""], &[])?;
        url.set_fragment(Some(&format!("token={token}")));
        Ok(url)
    }

    /// The URL of an API path given as segments (`["v1", "jobs", "12"]`, each percent-encoded
    /// as needed) with query parameters, below the server URL's own path.
    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Result<Url> {
        let mut url = self.base.clone();
        url.set_query(None);
        url.set_fragment(None);
        url.path_segments_mut()
            .map_err(|()| anyhow::anyhow!("the server URL {} cannot have a path", self.server))?
            .pop_if_empty()
            .extend(segments);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        Ok(url)
    }

    pub fn request(&self, method: Method, segments: &[&str], query: &[(&str, String)]) -> Result<RequestBuilder> {
        let request = self.http.request(method, self.url(segments, query)?);
        Ok(match &self.token {
            Some((token, _)) => request.bearer_auth(token),
            None => request,
        })
    }

    /// Sends a request with the ordinary timeout; a non-2xx answer becomes an [`ApiError`].
    pub async fn send(&self, request: RequestBuilder) -> Result<Response> {
        self.send_streaming(request.timeout(REQUEST_TIMEOUT)).await
    }

    /// Sends a request without a total timeout (for streamed bodies).
    pub async fn send_streaming(&self, request: RequestBuilder) -> Result<Response> {
        let response = request.send().await.map_err(|e| self.transport_error(e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(self.error_answer(response).await)
    }

    fn transport_error(&self, err: reqwest::Error) -> anyhow::Error {
        if err.is_connect() {
            anyhow::Error::new(Unreachable { server: self.server.clone(), cause: root_cause(&err) })
        } else if err.is_timeout() {
            anyhow::anyhow!("the Fairway server at {} did not answer in time", self.server)
        } else {
            anyhow::anyhow!("request to the Fairway server at {} failed: {}", self.server, root_cause(&err))
        }
    }

    async fn error_answer(&self, response: Response) -> anyhow::Error {
        let status = response.status();
        let text = match response.text().await {
            Ok(text) => text,
            Err(e) => return self.transport_error(e),
        };
        match serde_json::from_str::<ErrorBody>(&text) {
            Ok(mut body) if status == reqwest::StatusCode::UNAUTHORIZED => {
                body.error.message = match &self.token {
                    None => format!(
                        "{} (no token found: pass --token or --token-file, set FAIRWAY_TOKEN, or run `fairway login`)",
                        body.error.message
                    ),
                    Some((_, from)) => format!("{} (token from {from})", body.error.message),
                };
                anyhow::Error::new(ApiError { body })
            }
            Ok(body) => anyhow::Error::new(ApiError { body }),
            Err(_) => {
                let text = text.trim();
                let excerpt: String = text.chars().take(200).collect();
                if excerpt.is_empty() {
                    anyhow::anyhow!("the server answered {status}")
                } else {
                    anyhow::anyhow!("the server answered {status}: {excerpt}")
                }
            }
        }
    }

    /// GET a JSON document.
    pub async fn get<T: DeserializeOwned>(&self, segments: &[&str], query: &[(&str, String)]) -> Result<T> {
        let response = self.send(self.request(Method::GET, segments, query)?).await?;
        read_json(response).await
    }

    /// A job given as an id (`12`, `job/12`), a name (`ctr-model`, `job/ctr-model`), or a
    /// project and a name (`ads/ctr-model`: in Kubernetes mode, `namespace/name`). A name
    /// must match exactly one job.
    pub async fn resolve_job(&self, job: &str) -> Result<i64> {
        let job = job.strip_prefix("job/").unwrap_or(job);
        if let Ok(id) = job.parse::<i64>() {
            return Ok(id);
        }
        if job.is_empty() {
            bail!("a job is named by its id or its name; got an empty string");
        }
        let (project, name) = match job.split_once('/') {
            Some((project, name)) if !project.is_empty() && !name.is_empty() => (Some(project), name),
            _ => (None, job),
        };
        let mut query = vec![("name", name.to_string())];
        if let Some(project) = project {
            query.push(("project", project.to_string()));
        }
        let list: JobList = self.get(&["v1", "jobs"], &query).await?;
        let matches: Vec<_> =
            list.jobs.iter().filter(|j| j.name == name && project.is_none_or(|p| j.project == p)).collect();
        match matches.as_slice() {
            [] => bail!("no job named {job:?}"),
            [one] => Ok(one.id),
            many => {
                let ids: Vec<String> =
                    many.iter().map(|j| format!("{} ({}, project {})", j.id, j.state.as_str(), j.project)).collect();
                bail!("{} jobs are named {job:?}; name one by its id: {}", many.len(), ids.join(", "))
            }
        }
    }
}

/// Reads a JSON body.
pub async fn read_json<T: DeserializeOwned>(response: Response) -> Result<T> {
    let url = response.url().clone();
    let bytes = response.bytes().await.with_context(|| format!("cannot read the answer from {url}"))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("unexpected answer from {url} (is the server a different Fairway version?)"))
}

/// A document as JSON (pretty) or YAML, fields in the API's order.
pub fn render_doc<T: Serialize>(value: &T, format: DocFormat) -> Result<String> {
    Ok(match format {
        DocFormat::Json => {
            let mut s = serde_json::to_string_pretty(value)?;
            s.push('\n');
            s
        }
        DocFormat::Yaml => serde_saphyr::to_string(value).context("cannot write YAML")?,
    })
}

/// Writes to stdout; a closed pipe (`fairway ls | head`) is not an error.
pub fn print(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("cannot write to stdout"),
        _ => Ok(()),
    }
}

/// Milliseconds since the Unix epoch, for ages.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Runs one client command to completion on a single-threaded runtime.
pub fn block_on<F: Future<Output = Result<()>>>(future: F) -> Result<()> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(future)
}

/// Prints a fetched document as a table (`Table`/`Wide`) via `table`, or as JSON/YAML.
pub fn print_listing<T: Serialize>(value: &T, format: ListFormat, table: impl FnOnce(bool) -> String) -> Result<()> {
    match format.doc() {
        Some(doc) => print(&render_doc(value, doc)?),
        None => print(&table(format == ListFormat::Wide)),
    }
}
