//! Rotation by the shim, and `tail_lines` / `LogFollower` across rotated files.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use fairway_exec::{FollowFrom, LogFollower, launch, read_exit, rotated_path, tail_lines};

use crate::support::*;

fn append(path: &Path, text: &str) {
    OpenOptions::new().create(true).append(true).open(path).unwrap().write_all(text.as_bytes()).unwrap();
}

/// Rotates the way the shim does: `.k` → `.k+1`, …, log → `.1`, new empty log.
fn rotate(path: &Path, files_max: u32) {
    let _ = fs::remove_file(rotated_path(path, files_max - 1));
    for index in (0..files_max - 1).rev() {
        let _ = fs::rename(rotated_path(path, index), rotated_path(path, index + 1));
    }
    fs::File::create(path).unwrap();
}

fn poll_str(follower: &mut LogFollower) -> String {
    String::from_utf8(follower.poll().unwrap()).unwrap()
}

#[test]
fn shim_rotation_keeps_at_most_n_whole_line_files_under_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &[]);
    spec.argv = sh(&print_lines_script(100, 1000, "0"));
    spec.log_bytes_max = 200;
    spec.log_files_max = 3;
    let mut launched = launch(&spec).unwrap();
    assert_eq!(wait_exit(&mut launched, &spec).code, Some(0));

    let files: Vec<String> = (0..3).map(|i| fs::read_to_string(rotated_path(&spec.log_path, i)).unwrap()).collect();
    assert!(!rotated_path(&spec.log_path, 3).exists(), "at most 3 files");
    for file in &files {
        assert!(file.len() <= 200, "over the cap: {}", file.len());
        assert!(file.ends_with('\n'), "lines are kept whole: {file:?}");
    }
    // Oldest to newest, the kept files are the end of the output.
    let kept: String = files.iter().rev().cloned().collect();
    let all: String = numbered_lines(100).concat();
    assert!(all.ends_with(&kept) && kept.len() > 400, "kept {kept:?}");

    // 15 lines span the current file (at most 10 lines of 19 bytes) and the one before.
    assert!(files[0].lines().count() < 15);
    assert_eq!(tail_lines(&spec.log_path, 15).unwrap(), numbered_lines(100)[85..].concat());
    assert_eq!(tail_lines(&spec.log_path, 10_000).unwrap(), kept);
    assert_eq!(tail_lines(&spec.log_path, 0).unwrap(), "");
}

#[test]
fn a_line_longer_than_the_cap_is_split_and_rotation_continues() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &[]);
    spec.argv = sh("printf 'short\\n'; printf '%050d\\n' 0; printf 'end\\n'");
    spec.log_bytes_max = 16;
    spec.log_files_max = 10;
    let mut launched = launch(&spec).unwrap();
    assert_eq!(wait_exit(&mut launched, &spec).code, Some(0));
    let mut stream = String::new();
    for index in (0..10).rev() {
        if let Ok(text) = fs::read_to_string(rotated_path(&spec.log_path, index)) {
            assert!(text.len() <= 16, "{text:?}");
            stream.push_str(&text);
        }
    }
    assert_eq!(stream, format!("short\n{}\nend\n", "0".repeat(50)));
}

#[test]
fn tail_lines_edge_cases() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("job.log");
    assert_eq!(tail_lines(&log, 5).unwrap(), "", "no log yet");
    append(&log, "a\nb\nc");
    assert_eq!(tail_lines(&log, 1).unwrap(), "c", "a last line without newline counts");
    assert_eq!(tail_lines(&log, 2).unwrap(), "b\nc");
    rotate(&log, 3);
    assert_eq!(tail_lines(&log, 2).unwrap(), "b\nc", "the current file is empty after a rotation");
    append(&log, "\nd\n");
    assert_eq!(tail_lines(&log, 2).unwrap(), "c\nd\n", "a line split over a rotation reads whole");
}

#[test]
fn follower_reads_new_bytes_and_survives_one_and_several_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("job.log");
    append(&log, "old\n");
    let mut follower = LogFollower::new(&log, FollowFrom::End).unwrap();
    assert_eq!(poll_str(&mut follower), "");
    append(&log, "a\n");
    assert_eq!(poll_str(&mut follower), "a\n");
    assert_eq!(poll_str(&mut follower), "");

    // The rest of the rotated file comes first, then the new file.
    append(&log, "b\n");
    rotate(&log, 5);
    append(&log, "c\n");
    assert_eq!(poll_str(&mut follower), "b\nc\n");

    // Two rotations between polls: every file in between is read, in order.
    append(&log, "d\n");
    rotate(&log, 5);
    append(&log, "e\n");
    rotate(&log, 5);
    append(&log, "f\n");
    assert_eq!(poll_str(&mut follower), "d\ne\nf\n");

    // Rotated out entirely (files_max 2 keeps only `.1`): continue with the oldest kept file.
    let log = dir.path().join("short.log");
    append(&log, "f\n");
    let mut follower = LogFollower::new(&log, FollowFrom::End).unwrap();
    append(&log, "g\n");
    rotate(&log, 2);
    append(&log, "h\n");
    rotate(&log, 2);
    append(&log, "i\n");
    assert_eq!(poll_str(&mut follower), "g\nh\ni\n");
}

#[test]
fn follower_from_tail_lines_and_poll_limit() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("job.log");
    append(&log, "1\n2\n3\n");
    rotate(&log, 3);
    append(&log, "4\n");
    let mut follower = LogFollower::new(&log, FollowFrom::TailLines(3)).unwrap().with_poll_bytes_max(4);
    assert_eq!(poll_str(&mut follower), "2\n3\n");
    assert_eq!(poll_str(&mut follower), "4\n");
    assert_eq!(poll_str(&mut follower), "");
    append(&log, "5\n6\n7\n");
    assert_eq!(poll_str(&mut follower), "5\n6\n", "at most 4 bytes per poll");
    assert_eq!(poll_str(&mut follower), "7\n");

    // A follower started before the file exists reads it from its start.
    let later = dir.path().join("later.log");
    let mut follower = LogFollower::new(&later, FollowFrom::End).unwrap();
    assert_eq!(poll_str(&mut follower), "");
    append(&later, "x\n");
    assert_eq!(poll_str(&mut follower), "x\n");
}

#[test]
fn follower_sees_everything_a_running_job_writes_across_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), &[]);
    spec.argv = sh(&print_lines_script(300, 30, "0.02"));
    spec.log_bytes_max = 200;
    spec.log_files_max = 100; // nothing is rotated out, so nothing may be missed
    let mut follower = LogFollower::new(&spec.log_path, FollowFrom::End).unwrap();
    let mut launched = launch(&spec).unwrap();
    let mut seen = Vec::new();
    let start = Instant::now();
    while read_exit(&spec.run_dir).unwrap().is_none() {
        assert!(start.elapsed() < TIMEOUT, "job did not finish");
        seen.extend(follower.poll().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    seen.extend(follower.poll().unwrap());
    wait_shim(&mut launched);
    assert!(rotated_path(&spec.log_path, 20).exists(), "the job rotated its log many times");
    assert_eq!(String::from_utf8(seen).unwrap(), numbered_lines(300).concat());
}

#[test]
fn follower_started_before_the_log_exists_reads_files_rotated_before_its_first_poll() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("job.log");
    // A file rotated away before following began is old, not new.
    append(&rotated_path(&log, 1), "old\n");
    let mut follower = LogFollower::new(&log, FollowFrom::End).unwrap();
    append(&log, "a\n");
    rotate(&log, 4);
    append(&log, "b\n");
    rotate(&log, 4);
    append(&log, "c\n");
    assert_eq!(poll_str(&mut follower), "a\nb\nc\n");
    append(&log, "d\n");
    assert_eq!(poll_str(&mut follower), "d\n");
}
