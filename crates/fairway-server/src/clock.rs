//! The server's clock for scheduling: milliseconds since the Unix epoch, read through a
//! small trait so that tests can drive time (a token's expiry, a retry's backoff, a class's
//! minimum run or preemption delay) without waiting for it.
//!
//! Only the server's own decisions read it (the engine, the executor's kill deadlines, the
//! API's token checks and views).
//! Times a job's supervisor writes (a run's end in `exit.json`, a checkpoint's time) are
//! the machine's wall clock, so a test that moves the clock far from it should not run jobs
//! across the jump.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub trait Clock: Debug + Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// The machine's wall clock: what a server runs with.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told to (tests). It never goes back.
#[derive(Debug)]
pub struct ManualClock {
    ms: AtomicU64,
}

impl ManualClock {
    pub fn new(start_ms: u64) -> ManualClock {
        ManualClock { ms: AtomicU64::new(start_ms) }
    }

    /// Starting at the wall clock's time now.
    pub fn from_now() -> ManualClock {
        ManualClock::new(SystemClock.now_ms())
    }

    /// Move forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.ms.load(Ordering::SeqCst)
    }
}

/// A time in Unix ms as people read it in a message: RFC 3339 in UTC to the second
/// (`2026-12-06T18:37:22Z`, as the CLI prints times); the number itself if out of range.
pub fn time_text(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| format!("{ms} (Unix ms)"), |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// The wall clock's time now, for what is not a scheduling decision (a unique name, a
/// stamp on a file).
pub fn wall_ms() -> u64 {
    SystemClock.now_ms()
}

#[cfg(test)]
mod tests {
    use super::time_text;

    #[test]
    fn times_in_messages_read_as_rfc3339_to_the_second() {
        assert_eq!(time_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(time_text(1_796_582_242_866), "2026-12-06T18:37:22Z", "milliseconds are dropped, not rounded");
        assert_eq!(time_text(u64::MAX), format!("{} (Unix ms)", u64::MAX));
    }
}
