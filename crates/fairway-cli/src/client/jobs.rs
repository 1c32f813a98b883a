//! Job commands: `submit`, `ls`, `describe`, `cancel`, `logs`, `why`.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::builder::PossibleValuesParser;
use fairway_server::api::{CancelResponse, JobDetail, JobList, JobState, SubmitResponse, WhyView};
use reqwest::Method;
use reqwest::header::CONTENT_TYPE;

use super::{Client, DocFormat, ListFormat, format, now_ms, print, print_listing, read_json, render_doc};

/// What `fairway ls` shows without `--state` or `--all`: jobs that still hold or want GPUs.
const UNFINISHED: [JobState; 4] = [JobState::Pending, JobState::Running, JobState::Preempting, JobState::Stopping];

#[derive(clap::Args)]
pub struct SubmitArgs {
    /// Job file: YAML or JSON, one or more documents (jobs, batch/v1 Jobs, PriorityClasses);
    /// `-` reads stdin. Repeat for several files: each is one all-or-nothing submission.
    #[arg(short = 'f', long = "file", visible_alias = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// Print the server's answer as JSON or YAML instead of one line per job.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<DocFormat>,
}

#[derive(clap::Args)]
pub struct LsArgs {
    /// Only jobs in these states (comma-separated). Default: pending, running, preempting, stopping.
    #[arg(long, value_delimiter = ',', value_parser = PossibleValuesParser::new(JobState::ALL.map(JobState::as_str)))]
    pub state: Vec<String>,
    /// Only jobs charged to this project.
    #[arg(long)]
    pub project: Option<String>,
    /// Only jobs charged to this user.
    #[arg(long)]
    pub user: Option<String>,
    /// Only jobs of this priority class.
    #[arg(long)]
    pub priority_class: Option<String>,
    /// All jobs, finished ones included.
    #[arg(short = 'A', long, conflicts_with = "state")]
    pub all: bool,
    /// At most this many jobs (newest first; the server's default is 1000).
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Continue a partial list: only jobs older than this id (the note under a partial list
    /// gives it).
    #[arg(long, value_name = "ID", allow_negative_numbers = true)]
    pub cursor: Option<i64>,
    /// Output format (`wide` adds model, restarts, preemptions and placement).
    #[arg(short = 'o', long, value_enum, default_value_t = ListFormat::Table)]
    pub output: ListFormat,
}

#[derive(clap::Args)]
pub struct JobArgs {
    /// The job: its id, or its name if that names exactly one job.
    pub job: String,
    /// Print the server's answer as JSON or YAML.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<DocFormat>,
}

#[derive(clap::Args)]
pub struct CancelArgs {
    /// The jobs: ids, or names that each name exactly one job.
    #[arg(required = true)]
    pub jobs: Vec<String>,
}

#[derive(clap::Args)]
pub struct LogsArgs {
    /// The job: its id, or its name if that names exactly one job.
    pub job: String,
    /// Keep printing new output until the job finishes (Ctrl-C stops).
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Only the last N lines.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub tail: Option<u64>,
    /// Which replica of a gang job (0-based).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub replica: Option<u32>,
}

/// `fairway submit`: one request per file; stops at the first file the server refuses (the
/// files before it stay submitted).
pub async fn submit(client: &Client, args: &SubmitArgs) -> Result<()> {
    let many = args.files.len() > 1;
    for file in &args.files {
        let (name, body) = read_input(file)?;
        let result = submit_one(client, &name, body).await;
        let response = if many { result.with_context(|| name.clone())? } else { result? };
        for w in &response.warnings {
            eprintln!("warning: document {}, {}: {}", w.document, w.path, w.reason);
        }
        match args.output {
            Some(doc) => print(&render_doc(&response, doc)?)?,
            None => print(&format::submitted(&response))?,
        }
    }
    Ok(())
}

async fn submit_one(client: &Client, name: &str, body: Vec<u8>) -> Result<SubmitResponse> {
    let content_type = if name.ends_with(".json") { "application/json" } else { "application/yaml" };
    let request = client.request(Method::POST, &["v1", "jobs"], &[])?.header(CONTENT_TYPE, content_type).body(body);
    read_json(client.send(request).await?).await
}

/// A file's name (for messages) and bytes; `-` is stdin.
fn read_input(file: &PathBuf) -> Result<(String, Vec<u8>)> {
    let (name, bytes) = if file.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).context("cannot read stdin")?;
        ("stdin".to_string(), bytes)
    } else {
        let name = file.display().to_string();
        let bytes = std::fs::read(file).with_context(|| format!("cannot read {name}"))?;
        (name, bytes)
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        bail!("{name} is empty: nothing to submit");
    }
    Ok((name, bytes))
}

/// `fairway ls`.
pub async fn ls(client: &Client, args: &LsArgs) -> Result<()> {
    let list: JobList = client.get(&["v1", "jobs"], &ls_query(args)).await?;
    print_listing(&list, args.output, |wide| format::jobs_table(&list.jobs, now_ms(), wide))?;
    // A partial list must not pass for the whole one; the note goes to stderr so that the
    // table itself can still be piped.
    if let Some(note) = format::partial_list_note(&list) {
        eprintln!("{note}");
    }
    Ok(())
}

fn ls_query(args: &LsArgs) -> Vec<(&'static str, String)> {
    let mut query = Vec::new();
    if !args.all {
        let states =
            if args.state.is_empty() { UNFINISHED.map(JobState::as_str).join(",") } else { args.state.join(",") };
        query.push(("state", states));
    }
    let filters = [("project", &args.project), ("user", &args.user), ("priority_class", &args.priority_class)];
    for (key, value) in filters {
        if let Some(value) = value {
            query.push((key, value.clone()));
        }
    }
    if let Some(limit) = args.limit {
        query.push(("limit", limit.to_string()));
    }
    if let Some(cursor) = args.cursor {
        query.push(("cursor", cursor.to_string()));
    }
    query
}

/// `fairway describe`.
pub async fn describe(client: &Client, args: &JobArgs) -> Result<()> {
    let id = client.resolve_job(&args.job).await?.to_string();
    let detail: JobDetail = client.get(&["v1", "jobs", &id], &[]).await?;
    if let Some(doc) = args.output {
        return print(&render_doc(&detail, doc)?);
    }
    let spec_yaml = match &detail.spec {
        serde_json::Value::Null => None,
        spec => Some(serde_saphyr::to_string(spec).context("cannot write the spec as YAML")?),
    };
    print(&format::describe(&detail, spec_yaml.as_deref(), now_ms()))
}

/// `fairway why`.
pub async fn why(client: &Client, args: &JobArgs) -> Result<()> {
    let id = client.resolve_job(&args.job).await?.to_string();
    let view: WhyView = client.get(&["v1", "jobs", &id, "why"], &[]).await?;
    match args.output {
        Some(doc) => print(&render_doc(&view, doc)?),
        None => print(&format::why(&view, now_ms())),
    }
}

/// `fairway cancel`: every job is tried; with several, each failure is reported and the
/// command fails at the end.
pub async fn cancel(client: &Client, args: &CancelArgs) -> Result<()> {
    if let [job] = args.jobs.as_slice() {
        return cancel_one(client, job).await;
    }
    let mut failed = 0;
    for job in &args.jobs {
        if let Err(e) = cancel_one(client, job).await {
            eprintln!("error: {job}: {e:#}");
            failed += 1;
        }
    }
    if failed > 0 {
        bail!("{failed} of {} jobs could not be cancelled", args.jobs.len());
    }
    Ok(())
}

async fn cancel_one(client: &Client, job: &str) -> Result<()> {
    let id = client.resolve_job(job).await?;
    let id_text = id.to_string();
    let response = client.send(client.request(Method::POST, &["v1", "jobs", &id_text, "cancel"], &[])?).await?;
    let answer: CancelResponse = read_json(response).await?;
    let label = job.strip_prefix("job/").unwrap_or(job);
    let named = if label == id_text { String::new() } else { format!(" (id {id})") };
    let outcome = match answer.state {
        JobState::Cancelled => "cancelled".to_string(),
        JobState::Stopping => "stopping (cancelled; waiting for it to exit)".to_string(),
        state if state.is_finished() => format!("already {}", state.as_str()),
        state => state.as_str().to_string(),
    };
    print(&format!("job/{label}{named} {outcome}\n"))
}

/// `fairway logs`: copies the body to stdout as it arrives. Ctrl-C, a finished job, or a closed
/// stdout ends it without an error.
pub async fn logs(client: &Client, args: &LogsArgs) -> Result<()> {
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::select! {
        result = stream_logs(client, args) => result,
        _ = ctrl_c => Ok(()),
    }
}

async fn stream_logs(client: &Client, args: &LogsArgs) -> Result<()> {
    let id = client.resolve_job(&args.job).await?.to_string();
    let mut query = vec![("follow", args.follow.to_string())];
    if let Some(tail) = args.tail {
        query.push(("tail", tail.to_string()));
    }
    if let Some(replica) = args.replica {
        query.push(("replica", replica.to_string()));
    }
    let request = client.request(Method::GET, &["v1", "jobs", &id, "logs"], &query)?;
    let mut response = client.send_streaming(request).await?;
    while let Some(chunk) = response.chunk().await.context("the log stream broke off")? {
        let mut stdout = std::io::stdout().lock();
        match stdout.write_all(&chunk).and_then(|()| stdout.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e).context("cannot write to stdout"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Ls {
        #[command(flatten)]
        args: LsArgs,
    }

    type Query = Vec<(&'static str, String)>;

    fn query(argv: &[&str]) -> Query {
        let ls = Ls::try_parse_from(std::iter::once("ls").chain(argv.iter().copied())).expect("parses");
        ls_query(&ls.args)
    }

    #[test]
    fn ls_queries() {
        let unfinished = ("state", "pending,running,preempting,stopping".to_string());
        let cases: [(&[&str], Query); 4] = [
            (&[], vec![unfinished.clone()]),
            (&["-A"], vec![]),
            (
                &["--state", "failed,cancelled", "--limit", "5"],
                vec![("state", "failed,cancelled".into()), ("limit", "5".into())],
            ),
            (
                &["--project", "ads", "--user", "bob", "--priority-class", "high"],
                vec![unfinished, ("project", "ads".into()), ("user", "bob".into()), ("priority_class", "high".into())],
            ),
        ];
        for (argv, want) in cases {
            assert_eq!(query(argv), want, "{argv:?}");
        }
        assert!(Ls::try_parse_from(["ls", "--state", "sleeping"]).is_err());
        assert!(Ls::try_parse_from(["ls", "-A", "--state", "failed"]).is_err());
    }
}
