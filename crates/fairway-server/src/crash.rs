//! A panic ends the long-running drivers' process (`fairway serve`, `fairway kube`).
//!
//! A panic leaves the scheduler's state unknown and its lock poisoned: a process that kept
//! serving would answer nothing and schedule nothing while looking alive. Ended, it is
//! restarted by its supervisor and rebuilt from what is durable (the server's store and its
//! running processes; the cluster for the controller), as after `kill -9`.

/// The status the process ends with after a panic (what an unwinding panic in `main` gives).
pub const PANIC_EXIT_STATUS: i32 = 101;

/// From now on, a panic in any thread is reported (by the hook that was set) and then ends
/// the process with [`PANIC_EXIT_STATUS`].
pub fn exit_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!("fairway: a panic leaves the scheduler's state unknown: exiting so that it is restarted");
        std::process::exit(PANIC_EXIT_STATUS);
    }));
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    /// Set in the child this test starts: it runs the panicking side.
    const CHILD: &str = "FAIRWAY_TEST_EXIT_ON_PANIC_CHILD";

    /// A panic in a thread other than the main one, which a plain process would survive
    /// (the thread dies, `join` reports it), ends the whole process with status 101 once
    /// the hook is set; the main thread never goes on. Run in a child process: this test
    /// runs its own binary again, for this test alone.
    #[test]
    fn a_panic_in_any_thread_ends_the_process() {
        if std::env::var_os(CHILD).is_some() {
            super::exit_on_panic();
            let worker = std::thread::spawn(|| panic!("a bug in a worker thread"));
            let _ = worker.join();
            println!("the main thread went on");
            std::process::exit(0);
        }
        let me = std::env::current_exe().unwrap();
        let out = Command::new(me)
            .args(["--exact", "crash::tests::a_panic_in_any_thread_ends_the_process", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(super::PANIC_EXIT_STATUS), "{stdout}\n{stderr}");
        assert!(!stdout.contains("the main thread went on"), "{stdout}");
        assert!(
            stderr.contains("a bug in a worker thread") && stderr.contains("exiting so that it is restarted"),
            "{stderr}"
        );
    }
}
