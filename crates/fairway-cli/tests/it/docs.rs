//! The documentation's commands, run as written: every ```sh block of the README and of
//! docs/server.md against a fresh server started the way the block starts it, from a
//! directory holding `examples/`, with `fairway` on the PATH and no token given (the CLI must
//! find the admin token by itself, as the docs promise). A block line the test does not know
//! how to run fails the test: the docs keep to commands that work.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FAIRWAY: &str = env!("CARGO_BIN_EXE_fairway");

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The lines of every block fenced with ```sh (or ```bash).
fn sh_blocks(markdown: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l == "```sh" || l == "```bash" => current = Some(Vec::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(block), _) => block.push(line.to_owned()),
            (None, _) => {}
        }
    }
    blocks
}

/// A line without its trailing `# comment`.
fn command_of(line: &str) -> &str {
    let cut = line.find(" #").map_or(line, |at| &line[..at]);
    cut.trim()
}

/// Lines the test does not run, and where they are covered instead.
const NOT_RUN_HERE: &[(&str, &str)] = &[
    ("cargo run --release -- demo", "tests/it/demo.rs runs `fairway demo` and its closing hint"),
    ("bash scripts/test", "this is the test command itself"),
    ("cargo install --locked --path crates/fairway-cli", "checked below: the crate builds the `fairway` binary"),
    // The README's Kubernetes lines need a cluster and a container builder: the files they
    // name are checked against the code by crates/fairway-kube/tests/it/manifests.rs (and
    // `the_readmes_kubernetes_lines_name_files_that_exist` below).
    ("docker build -f deploy/kubernetes/Dockerfile -t REGISTRY/fairway:0.1.0 .", "needs docker"),
    ("kubectl apply -k deploy/kubernetes", "needs a cluster"),
    ("kubectl label namespace ads fairway.dev/managed=true", "needs a cluster"),
    (
        "kubectl apply -n ads -f deploy/kubernetes/examples/article-priorityclass.yaml -f deploy/kubernetes/examples/article-job.yaml",
        "needs a cluster",
    ),
    ("kubectl describe job -n ads paddle-high-priority-training", "needs a cluster"),
];

struct Session {
    dir: tempfile::TempDir,
    server: Option<Child>,
}

impl Session {
    fn new() -> Session {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(repo().join("examples"), dir.path().join("examples")).unwrap();
        Session { dir, server: None }
    }

    fn command(&self, program: &str) -> Command {
        let bin_dir = Path::new(FAIRWAY).parent().unwrap();
        let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
        let mut command = Command::new(program);
        command
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("HOME", self.dir.path())
            .env("XDG_STATE_HOME", self.dir.path().join(".state"))
            .env("XDG_CONFIG_HOME", self.dir.path().join(".config"))
            .env_remove("FAIRWAY_TOKEN")
            .env_remove("FAIRWAY_TOKEN_FILE")
            .env_remove("FAIRWAY_SERVER")
            .env_remove("FAIRWAY_DATA_DIR")
            .env_remove("FAIRWAY_CONFIG");
        command
    }

    /// `fairway serve … &`: started in the background; returns once it listens.
    fn start_server(&mut self, line: &str) {
        let args: Vec<&str> = line.trim_end_matches('&').split_whitespace().skip(1).collect();
        let mut child = self.command(FAIRWAY).args(&args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        assert!(first.contains("listening on"), "`{line}` did not start a server: {first:?}");
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        self.server = Some(child);
    }

    fn run(&self, line: &str) {
        let started = Instant::now();
        let mut child =
            self.command("sh").args(["-c", line]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        while child.try_wait().unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(120), "`{line}` did not finish in 2 minutes");
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "`{line}` failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        crate::server::kill_jobs_under(self.dir.path());
    }
}

/// The docs start servers on the default port: one file at a time.
static DEFAULT_PORT: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_file(name: &str) -> usize {
    let _port = DEFAULT_PORT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let text = std::fs::read_to_string(repo().join(name)).unwrap();
    let mut ran = 0;
    for block in sh_blocks(&text) {
        let mut session = Session::new();
        for line in &block {
            let command = command_of(line);
            if command.is_empty() || command.starts_with('#') {
                continue;
            }
            if NOT_RUN_HERE.iter().any(|(known, _)| *known == command) {
                continue;
            }
            assert!(command.starts_with("fairway "), "{name}: the test does not know how to run `{command}`");
            if command.starts_with("fairway serve") {
                assert!(command.ends_with('&'), "{name}: `{command}` must run in the background (`&`)");
                session.start_server(command);
            } else {
                session.run(command);
            }
            ran += 1;
        }
    }
    ran
}

#[test]
fn the_readme_commands_work_as_written() {
    assert!(run_file("README.md") >= 8, "the README's server commands were not found");
    let manifest = std::fs::read_to_string(repo().join("crates/fairway-cli/Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"fairway\""), "`cargo install --path crates/fairway-cli` installs `fairway`");
}

#[test]
fn the_server_guide_commands_work_as_written() {
    assert!(run_file("docs/server.md") >= 14, "the server guide's commands were not found");
}

#[test]
fn the_server_guide_config_is_a_valid_config() {
    let text = std::fs::read_to_string(repo().join("docs/server.md")).unwrap();
    let section = &text[text.find("## Config file").unwrap()..];
    let start = section.find("```yaml\n").unwrap() + "```yaml\n".len();
    let yaml = &section[start..start + section[start..].find("```").unwrap()];
    let config = fairway_server::ConfigFile::parse(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!((config.projects.len(), config.quotas.len()), (2, 2));
}

#[test]
fn the_readmes_kubernetes_lines_name_files_that_exist() {
    let mut named = 0;
    for (line, _) in NOT_RUN_HERE.iter().filter(|(l, _)| l.starts_with("kubectl") || l.starts_with("docker")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.windows(2).filter(|w| w[0] == "-f" || w[0] == "-k") {
            assert!(repo().join(pair[1]).exists(), "`{line}` names {}, which does not exist", pair[1]);
            named += 1;
        }
    }
    assert_eq!(named, 4, "the Dockerfile, the kustomization and the article's two files");
    // The article's Job in the examples is the one the README describes.
    let job = std::fs::read_to_string(repo().join("deploy/kubernetes/examples/article-job.yaml")).unwrap();
    assert!(job.contains("name: paddle-high-priority-training"));
}
