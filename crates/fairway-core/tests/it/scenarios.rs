//! Data-driven scenario tests: every `tests/scenarios/*.txt` holds a script (see `dsl.rs`),
//! a line `----`, and the expected transcript. `UPDATE_EXPECT=1 cargo test -p fairway-core`
//! rewrites the expected sections; review the diff before committing it.
//! `SCENARIO=substring` runs only the matching files.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use crate::dsl::Runner;

const SEPARATOR: &str = "----";

fn scenario_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
}

/// Line-by-line comparison: `-` expected only, `+` actual only.
fn diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    // Longest common subsequence table, fine for transcripts of a few dozen lines.
    let mut lcs = vec![vec![0usize; a.len() + 1]; e.len() + 1];
    for i in (0..e.len()).rev() {
        for j in (0..a.len()).rev() {
            lcs[i][j] = if e[i] == a[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < e.len() || j < a.len() {
        if i < e.len() && j < a.len() && e[i] == a[j] {
            out += &format!("  {}\n", e[i]);
            i += 1;
            j += 1;
        } else if j < a.len() && (i == e.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out += &format!("+ {}\n", a[j]);
            j += 1;
        } else {
            out += &format!("- {}\n", e[i]);
            i += 1;
        }
    }
    out
}

#[test]
fn scenarios() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let filter = std::env::var("SCENARIO").ok();
    let files = scenario_files();
    if filter.is_none() {
        assert!(files.len() >= 28, "expected at least 28 scenarios, found {}", files.len());
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for path in files {
        let name = path.file_name().expect("file name").to_string_lossy().into_owned();
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        ran += 1;
        let text = std::fs::read_to_string(&path).expect("readable scenario");
        let (script, expected) = match text.split_once(&format!("\n{SEPARATOR}\n")) {
            Some((s, e)) => (s.to_string(), e.to_string()),
            None => (text.trim_end().strip_suffix(SEPARATOR).unwrap_or(&text).trim_end().to_string(), String::new()),
        };
        let actual = match catch_unwind(AssertUnwindSafe(|| Runner::new().run(&script))) {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{name}: panicked: {msg}"));
                continue;
            }
        };
        if actual.trim_end() == expected.trim_end() {
            continue;
        }
        if update {
            std::fs::write(&path, format!("{}\n{SEPARATOR}\n{actual}", script.trim_end())).expect("writable scenario");
            eprintln!("updated {name}");
        } else {
            failures.push(format!("{name}: transcript differs (- expected, + actual):\n{}", diff(&expected, &actual)));
        }
    }
    assert!(ran > 0, "no scenario matched SCENARIO={filter:?}");
    assert!(failures.is_empty(), "{} scenario(s) failed:\n\n{}", failures.len(), failures.join("\n\n"));
}
