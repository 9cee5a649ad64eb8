//! [`LogSampler`]: at most one log line per period for an event that would otherwise repeat on
//! every request (a store outage, a shadow rule denying a flood), so the logs show that it
//! happens without growing with the traffic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Lets one event through per period; usable in a `static`.
///
/// ```
/// use std::time::Duration;
/// use tollgate_tower::LogSampler;
///
/// static STORE_DOWN: LogSampler = LogSampler::new(Duration::from_secs(60));
/// assert!(STORE_DOWN.due(), "the first event of a period is logged");
/// assert!(!STORE_DOWN.due(), "the next ones in the same period are not");
/// ```
#[derive(Debug)]
pub struct LogSampler {
    every_ms: u64,
    next_ms: AtomicU64,
}

impl LogSampler {
    /// One event per `every` (whole milliseconds).
    pub const fn new(every: Duration) -> Self {
        LogSampler {
            every_ms: every.as_millis() as u64,
            next_ms: AtomicU64::new(0),
        }
    }

    /// True for the first call of each period, false for the others; one caller wins a race.
    pub fn due(&self) -> bool {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let next = self.next_ms.load(Ordering::Relaxed);
        now_ms >= next
            && self
                .next_ms
                .compare_exchange(next, now_ms + self.every_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}
