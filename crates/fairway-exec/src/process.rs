//! Process identity and signals: `/proc/<pid>/stat` start times (PID-reuse safe liveness) and
//! signals to a job's whole process group.

use std::fs;

use nix::errno::Errno;
use nix::sys::signal::{self, Signal as NixSignal};
use nix::unistd::Pid;

use crate::ExecError;

/// The signals the server sends to a job's process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// `SIGTERM`: ask the job to stop (checkpoint and exit). The shim survives it and records
    /// the job's exit.
    Term,
    /// `SIGKILL`: kill the job and its shim at once; no `exit.json` is written.
    Kill,
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z`, `X`, …
    state: char,
    /// Field 22: start time in clock ticks since boot.
    start_ticks: u64,
}

fn read_stat(pid: u32) -> Option<ProcStat> {
    if pid == 0 {
        return None;
    }
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses `/proc/<pid>/stat`. Field 2 is the command name in parentheses and may itself contain
/// spaces and parentheses, so the fields after it are found from the *last* `)`.
fn parse_stat(text: &str) -> Option<ProcStat> {
    let after_comm = &text[text.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace();
    // `fields` starts at field 3 (state); field 22 (starttime) is 19 further on.
    let state = fields.next()?.chars().next()?;
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some(ProcStat { state, start_ticks })
}

/// The start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22), or `None`
/// if there is no such process. Together with the pid it identifies a process across PID reuse.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    read_stat(pid).map(|s| s.start_ticks)
}

/// Whether `pid` is still the process that started at `start_ticks` and has not exited. A
/// zombie (exited, not yet reaped) counts as not alive; so does a reused pid.
pub fn is_same_process_alive(pid: u32, start_ticks: u64) -> bool {
    read_stat(pid).is_some_and(|s| s.start_ticks == start_ticks && !matches!(s.state, 'Z' | 'X' | 'x'))
}

/// Sends `sig` to the process group `pgid` (the shim's pid, see [`crate::launch`]). A group
/// that no longer exists is not an error. Refuses pgid 0 and 1, which would signal the caller's
/// own group or init.
pub fn signal_group(pgid: u32, sig: Signal) -> Result<(), ExecError> {
    let raw = i32::try_from(pgid).ok().filter(|&p| p > 1).ok_or(ExecError::Signal { pgid, source: Errno::EINVAL })?;
    let nix_signal = match sig {
        Signal::Term => NixSignal::SIGTERM,
        Signal::Kill => NixSignal::SIGKILL,
    };
    match signal::killpg(Pid::from_raw(raw), nix_signal) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(source) => Err(ExecError::Signal { pgid, source }),
    }
}

/// Processes whose environment holds every `KEY=VALUE` of `wanted`, found through
/// `/proc/<pid>/environ` (readable for the caller's own processes, and for all of them as
/// root). A job's children inherit its environment, so this finds what a job left behind
/// even when it moved to another process group; the caller's own process is never listed.
pub fn processes_with_env(wanted: &[(&str, &str)]) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    let wanted: Vec<Vec<u8>> = wanted.iter().map(|(k, v)| format!("{k}={v}").into_bytes()).collect();
    let own = std::process::id();
    let mut found: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter(|&pid| {
            let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else { return false };
            let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
            wanted.iter().all(|w| vars.contains(&w.as_slice()))
        })
        .filter(|&pid| read_stat(pid).is_some_and(|s| !matches!(s.state, 'Z' | 'X' | 'x')))
        .collect();
    found.sort_unstable();
    found
}

/// Sends SIGKILL to each process (not its group). One that is already gone is not an error.
pub fn kill_processes(pids: &[u32]) {
    for &pid in pids {
        if let Ok(raw) = i32::try_from(pid)
            && raw > 1
        {
            let _ = signal::kill(Pid::from_raw(raw), NixSignal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_name() {
        let line = "4242 (we(ird) na)me) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(line), Some(ProcStat { state: 'S', start_ticks: 987654 }));
        assert_eq!(parse_stat("4242 (x) Z 1"), None);
    }
}
