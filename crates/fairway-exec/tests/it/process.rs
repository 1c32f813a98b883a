//! Process identity across PID reuse, zombies, and group signals' edge cases.

use std::process::Command;

use fairway_exec::{ExecError, Signal, is_same_process_alive, process_start_ticks, signal_group};

use crate::support::wait_for;

#[test]
fn this_process_is_alive_under_its_own_start_time_only() {
    let pid = std::process::id();
    let ticks = process_start_ticks(pid).expect("own start ticks");
    assert!(is_same_process_alive(pid, ticks));
    assert!(!is_same_process_alive(pid, ticks + 1), "another start time is another process");
    assert_eq!(process_start_ticks(0), None);
    assert!(!is_same_process_alive(0, ticks));
}

#[test]
fn exited_processes_are_not_alive_zombie_or_reaped() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    let ticks = process_start_ticks(pid).expect("start ticks while not reaped");
    // Not reaped yet: a zombie still has a /proc entry but is not alive.
    wait_for("the child to become a zombie", || !is_same_process_alive(pid, ticks));
    assert_eq!(process_start_ticks(pid), Some(ticks), "the zombie keeps its /proc entry");
    child.wait().unwrap();
    assert!(!is_same_process_alive(pid, ticks));
}

#[test]
fn signal_group_refuses_our_own_group_and_init() {
    for pgid in [0, 1] {
        assert!(matches!(signal_group(pgid, Signal::Term), Err(ExecError::Signal { .. })), "pgid {pgid}");
    }
    assert!(signal_group(u32::MAX, Signal::Term).is_err());
}
