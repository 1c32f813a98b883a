//! `fairway demo`, the README's main command: the article's story with real processes, and
//! the closing hint run as printed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FAIRWAY: &str = env!("CARGO_BIN_EXE_fairway");

#[test]
fn the_demo_tells_the_story_and_its_closing_hint_works_as_printed() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("demo-data");
    let out = Command::new(FAIRWAY)
        .args(["demo", "--step-ms", "30", "--data-dir"])
        .arg(&data)
        .env("XDG_STATE_HOME", home.path().join("state"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    // The preemptor and its victims say different things, by name.
    let line =
        |needle: &str| text.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} in\n{text}"));
    assert!(line("ctr-model          preempting").contains("preempting nightly-retrain-"), "{text}");
    assert!(line(" preempted ").contains("preempted by ctr-model (job 5), priority high"), "{text}");
    assert!(text.contains("resumed from step"), "{text}");
    // A preempted training's wait counts its wait after the preemption too.
    let summary =
        text.lines().find(|l| l.starts_with("nightly-retrain-") && l.contains("  1 ")).expect("a preempted one");
    let wait: f64 = summary.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(wait > 0.0, "{summary}");

    // The hint, as printed: a server in the background, then the CLI, which finds its token.
    let hint: Vec<&str> =
        text.lines().skip_while(|l| !l.starts_with("Look at it again")).skip(1).map(str::trim).collect();
    assert_eq!(hint.len(), 3, "{text}");
    let serve: Vec<&str> = hint[0].trim_end_matches('&').split_whitespace().collect();
    assert_eq!(serve[0], "fairway");
    let mut server = Command::new(FAIRWAY)
        .args(&serve[1..])
        .env("XDG_STATE_HOME", home.path().join("state"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let ls: Vec<&str> = hint[1].split_whitespace().collect();
    let started = Instant::now();
    let out = loop {
        let out = Command::new(FAIRWAY)
            .args(&ls[1..])
            .env_remove("FAIRWAY_TOKEN")
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .current_dir(home.path())
            .output()
            .unwrap();
        if out.status.success() || started.elapsed() > Duration::from_secs(20) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    server.kill().unwrap();
    server.wait().unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{listing}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(listing.lines().filter(|l| l.contains("succeeded")).count(), 5, "{listing}");
    assert_eq!(hint[2], "kill %1");
}
