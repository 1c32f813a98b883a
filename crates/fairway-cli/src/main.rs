//! `fairway`: the command-line entry point. Thin: parsing and printing only; the work is in
//! the library crates.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

use crate::client::{Client, Connection, admin, cluster, jobs, quota};

mod bench;
mod client;
mod demo;
#[cfg(feature = "kube")]
mod kube;
mod pack;
mod serve;
mod sim;

#[derive(Parser)]
#[command(name = "fairway", version, about = "Priority- and quota-aware scheduler for shared GPU clusters")]
struct Cli {
    /// The Fairway server to talk to.
    // Checked only by the commands that use it: jobs inherit the server's environment, and a
    // bad FAIRWAY_SERVER there must not stop `__shim` or `example-trainer` from starting.
    #[arg(long, global = true, env = "FAIRWAY_SERVER", default_value = client::DEFAULT_SERVER, value_name = "URL")]
    server: String,
    /// The bearer token to send (default: see `--token-file`, then `fairway login`'s, then
    /// the admin token of a server on this machine that this user may read).
    #[arg(long, global = true, env = "FAIRWAY_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    token: Option<String>,
    /// Read the bearer token from this file.
    #[arg(long, global = true, env = "FAIRWAY_TOKEN_FILE", value_name = "FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// Trust this CA certificate (PEM) for an https server with a private CA.
    #[arg(long, global = true, env = "FAIRWAY_CA_CERT", value_name = "FILE")]
    ca_cert: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the article's story on this machine: a server with 8 simulated GPUs, real
    /// training processes, a high-priority job preempting low-priority ones.
    Demo(demo::DemoArgs),
    /// Run the standalone server: scheduler, store, processes, HTTP API, metrics.
    Serve(serve::ServeArgs),
    /// Run the Kubernetes controller: Fairway schedules the cluster's Jobs (and PaddleJobs)
    /// in namespaces that opted in.
    #[cfg(feature = "kube")]
    Kube(kube::KubeArgs),
    /// Measure Fairway on this machine (`bench server`: submissions/s, start and preemption
    /// latency; `bench sim`: simulator events/s and whole-trace time).
    Bench(bench::BenchArgs),
    /// Replay a workload through the scheduler with a virtual clock and compare policies.
    Sim(SimArgs),
    /// Compare placement policies on FGD's packing benchmark (openb node and pod lists):
    /// GPU allocation and fragmentation as pods arrive, to a share of capacity.
    Pack(pack::PackArgs),
    /// Submit jobs and priority classes from YAML or JSON files.
    Submit(jobs::SubmitArgs),
    /// List jobs (unfinished ones unless --all or --state), newest first.
    #[command(visible_alias = "list")]
    Ls(jobs::LsArgs),
    /// Show a job in detail: placement, reasons, preemption, spec, events.
    Describe(jobs::JobArgs),
    /// Why a job is not running.
    Why(jobs::JobArgs),
    /// Cancel jobs (running ones are stopped).
    Cancel(jobs::CancelArgs),
    /// Print a job's output.
    Logs(jobs::LogsArgs),
    /// List nodes and their GPUs.
    Nodes(cluster::ListArgs),
    /// List priority classes.
    PriorityClasses(cluster::ListArgs),
    /// Show quotas and usage; `quota set` and `quota delete` change them.
    Quota(quota::QuotaArgs),
    /// Create, list and revoke access tokens.
    Token(admin::TokenArgs),
    /// Show who the server takes you for: user, project, role.
    Whoami,
    /// Print the dashboard's address, signed in with your token (open it in a browser).
    Ui,
    /// Save a token for this server (read from standard input, or --token-file).
    Login,
    /// Forget the token saved for this server.
    Logout,
    /// Show projects and their highest priority class; `project set` changes it.
    Project(admin::ProjectArgs),
    /// Print a shell completion script to stdout.
    Completions { shell: clap_complete::Shell },
    /// The demo and test trainer: a fake training loop with checkpoints.
    ///
    /// Counts steps, saves a checkpoint into $FAIRWAY_CHECKPOINT_DIR every few steps, resumes from
    /// the last one when restarted (e.g. after a preemption), and on SIGTERM saves one and exits
    /// 143. Use it as the `command` of demo and test jobs.
    ExampleTrainer(TrainerCli),
    /// The supervisor every job runs under (started by the server, not by people).
    #[command(name = "__shim", hide = true)]
    Shim { run_dir: PathBuf },
}

#[derive(clap::Args)]
struct TrainerCli {
    /// Steps in the whole run.
    #[arg(long, default_value_t = fairway_exec::TrainerArgs::default().steps)]
    steps: u64,
    /// Save a checkpoint every this many steps (0: only on SIGTERM).
    #[arg(long, default_value_t = fairway_exec::TrainerArgs::default().checkpoint_every)]
    checkpoint_every: u64,
    /// How long one step takes, in milliseconds.
    #[arg(long, default_value_t = fairway_exec::TrainerArgs::default().step_ms)]
    step_ms: u64,
    /// Exit with code 1 on reaching this step (to test retries).
    #[arg(long)]
    fail_at_step: Option<u64>,
}

#[derive(clap::Args)]
pub struct SimArgs {
    /// Scenario file (YAML): cluster, classes, quotas, workload, policies.
    pub scenario: PathBuf,
    /// Only these policies (comma-separated names from the scenario).
    #[arg(long, value_delimiter = ',')]
    pub policy: Option<Vec<String>>,
    /// Seed for the synthetic generator and tier assignment (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run the scenario with this many seeds, from `--seed` (or the scenario's) up, and
    /// report each figure of each policy as mean ± standard deviation [min–max] over them
    /// (1 to 1000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000), conflicts_with = "report")]
    pub seeds: Option<u32>,
    /// Shrink the cluster to its first N nodes.
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Compress time: divide submit times by this factor (2 doubles the arrival rate).
    #[arg(long)]
    pub time_compression: Option<f64>,
    /// Keep only the first N jobs.
    #[arg(long)]
    pub max_jobs: Option<usize>,
    /// Use this trace file instead of the scenario's.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Output format on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Also write a report (markdown + SVG plots) into this folder.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Checks during the run: `amortised` checks every decision against the rules (whole
    /// gangs, no GPU twice, quotas, allowed preemptions) and the core's whole state on a
    /// schedule costing a constant per cycle; `every-cycle` checks the whole state after
    /// every cycle (slow on big traces); `off` checks only conservation at the end.
    #[arg(long, value_enum, default_value_t = Check::Amortised)]
    pub check: Check,
    /// Same as `--check off`.
    #[arg(long, conflicts_with = "check")]
    pub no_check: bool,
    /// For each policy with cohorts, run each member alone on a private cluster of its
    /// nominal quota and report its sharing anomaly (its mean wait shared less alone).
    #[arg(long, conflicts_with = "seeds")]
    pub sharing_anomaly: bool,
    /// Measure start-time estimates: each job gets the core's forecast when submitted, and
    /// the table, JSON and report compare it with when the job started (slower: one
    /// forecast per submit time).
    #[arg(long)]
    pub eta: bool,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Check {
    Amortised,
    EveryCycle,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| exit_usage(&e));
    let server = &cli.server;
    let connection = Connection {
        credentials: client::credentials::TokenArgs { token: cli.token.clone(), token_file: cli.token_file.clone() },
        ca_cert: cli.ca_cert.clone(),
    };
    let result = match cli.command {
        Command::Sim(args) => sim::run(&args),
        Command::Pack(args) => pack::run(&args),
        Command::Serve(args) => {
            fairway_server::crash::exit_on_panic();
            serve::run(&args)
        }
        #[cfg(feature = "kube")]
        Command::Kube(args) => {
            fairway_server::crash::exit_on_panic();
            kube::run(&args)
        }
        Command::Demo(args) => demo::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Submit(args) => with_client(server, &connection, async |c| jobs::submit(c, &args).await),
        Command::Ls(args) => with_client(server, &connection, async |c| jobs::ls(c, &args).await),
        Command::Describe(args) => with_client(server, &connection, async |c| jobs::describe(c, &args).await),
        Command::Why(args) => with_client(server, &connection, async |c| jobs::why(c, &args).await),
        Command::Cancel(args) => with_client(server, &connection, async |c| jobs::cancel(c, &args).await),
        Command::Logs(args) => with_client(server, &connection, async |c| jobs::logs(c, &args).await),
        Command::Nodes(args) => with_client(server, &connection, async |c| cluster::nodes(c, &args).await),
        Command::PriorityClasses(args) => {
            with_client(server, &connection, async |c| cluster::priority_classes(c, &args).await)
        }
        Command::Quota(args) => with_client(server, &connection, async |c| quota::quota(c, &args).await),
        Command::Token(args) => with_client(server, &connection, async |c| admin::token(c, &args).await),
        Command::Whoami => with_client(server, &connection, async |c| admin::whoami(c).await),
        Command::Ui => with_client(server, &connection, async |c| admin::ui(c).await),
        Command::Project(args) => with_client(server, &connection, async |c| admin::project(c, &args).await),
        Command::Login => {
            let url = server_url(server);
            // `--token-file` names the token to save here (default: standard input), so the
            // client itself does not read it as its credentials.
            let source = cli.token_file.clone();
            let connection = Connection {
                credentials: client::credentials::TokenArgs { token_file: None, ..connection.credentials.clone() },
                ..connection.clone()
            };
            with_client(server, &connection, async |c| admin::login(c, &url, source.as_deref()).await)
        }
        Command::Logout => admin::logout(&server_url(server)),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "fairway", &mut std::io::stdout());
            Ok(())
        }
        Command::ExampleTrainer(args) => {
            let args = fairway_exec::TrainerArgs {
                steps: args.steps,
                checkpoint_every: args.checkpoint_every,
                step_ms: args.step_ms,
                fail_at_step: args.fail_at_step,
            };
            return exit_code(fairway_exec::run_example_trainer(args));
        }
        Command::Shim { run_dir } => return exit_code(fairway_exec::run_shim(&run_dir)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a client command against the server on a single-threaded runtime. A bad `--server`
/// is a usage error (exit 2).
fn with_client(
    server: &str,
    connection: &Connection,
    command: impl AsyncFnOnce(&Client) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let url = server_url(server);
    let client = Client::new(&url, connection)?;
    client::block_on(command(&client))
}

fn server_url(server: &str) -> reqwest::Url {
    client::parse_server_url(server).unwrap_or_else(|e| {
        let message = format!("invalid value '{server}' for '--server <URL>': {e}");
        Cli::command().error(clap::error::ErrorKind::ValueValidation, message).exit()
    })
}

/// Prints a command-line error as clap does, but with the standard library's words for a
/// bad number ("invalid digit found in string") in plain ones, and exits (2 for usage errors).
fn exit_usage(e: &clap::Error) -> ! {
    if !e.use_stderr() {
        e.exit(); // --help and --version
    }
    let styled = e.render();
    let text = if std::io::stderr().is_terminal() { styled.ansi().to_string() } else { styled.to_string() };
    let _ = write!(std::io::stderr().lock(), "{}", plain_number_errors(&text));
    std::process::exit(e.exit_code())
}

/// Rust's messages for numbers that do not parse, in words for people; clap's ranges
/// (`0 is not in 1..=4294967295`) without Rust's range syntax.
fn plain_number_errors(text: &str) -> String {
    let replacements = [
        ("invalid digit found in string", "not a whole number of 0 or more (digits only)"),
        ("cannot parse integer from empty string", "empty, where a whole number is expected"),
        ("number too large to fit in target type", "the number is too large"),
        ("number too small to fit in target type", "the number is too small"),
        ("invalid float literal", "not a number"),
    ];
    let mut text = replacements.iter().fold(text.to_owned(), |text, (from, to)| text.replace(from, to));
    if let Some(at) = text.find(" is not in ") {
        let start = at + " is not in ".len();
        let end = text[start..].find(char::is_whitespace).map_or(text.len(), |e| start + e);
        if let Some((low, high)) = text[start..end].split_once("..=") {
            let words = format!(" is not between {low} and {high}");
            text.replace_range(at..end, &words);
        }
    }
    text
}

/// A child-style exit status (0-255) as the process's own.
fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Show a progress bar only to a person watching.
pub fn progress_wanted(disabled: bool) -> bool {
    !disabled && std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn shim_subcommand_matches_what_the_executor_launches() {
        let cli = Cli::command();
        let shim = cli.find_subcommand(fairway_exec::SHIM_SUBCOMMAND).expect("the shim subcommand");
        assert!(shim.is_hide_set());
    }
}
