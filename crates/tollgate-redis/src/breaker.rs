//! A circuit breaker, so a dead Redis costs one timeout per probe interval instead of one per
//! call.
//!
//! Closed: every call goes to Redis. After a call fails for lack of Redis (timeout, connection),
//! the breaker opens for `probe_interval`: calls fail at once without touching the network. When
//! the interval is up, exactly one call is let through as a probe; its success closes the
//! breaker, its failure opens it for another interval. A zero interval turns the breaker off:
//! every call goes to Redis, for callers that want each failure reported as it happened.
//!
//! The breaker keeps the failure that last opened it, so a refused call can still name the Redis
//! error behind it (the refusal's `source()`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::RedisError;

pub(crate) struct Breaker {
    started: Instant,
    probe_interval_us: u64,
    /// µs since `started` until which calls are refused; 0 when closed.
    open_until_us: AtomicU64,
    /// The failure that last opened the breaker. Only touched when a call fails or is refused.
    cause: Mutex<Option<RedisError>>,
}

/// Whether a call may go to Redis.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Closed, or this call is the probe.
    Call,
    /// Open: fail now; the next probe is this far away.
    Refuse(Duration),
}

impl Breaker {
    pub(crate) fn new(probe_interval: Duration) -> Self {
        Breaker {
            started: Instant::now(),
            probe_interval_us: u64::try_from(probe_interval.as_micros()).unwrap_or(u64::MAX / 2),
            open_until_us: AtomicU64::new(0),
            cause: Mutex::new(None),
        }
    }

    pub(crate) fn admit(&self) -> Admission {
        self.admit_at(self.now_us())
    }

    fn admit_at(&self, now: u64) -> Admission {
        let open_until = self.open_until_us.load(Ordering::Acquire);
        if open_until == 0 {
            return Admission::Call;
        }
        if now < open_until {
            return Admission::Refuse(Duration::from_micros(open_until - now));
        }
        // The interval is up: the one caller that moves the deadline is the probe.
        let next = now + self.probe_interval_us;
        match self
            .open_until_us
            .compare_exchange(open_until, next, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Admission::Call,
            Err(_) => Admission::Refuse(Duration::from_micros(self.probe_interval_us)),
        }
    }

    pub(crate) fn succeeded(&self) {
        if self.open_until_us.load(Ordering::Relaxed) != 0 {
            self.open_until_us.store(0, Ordering::Release);
        }
    }

    /// Opens the breaker for one probe interval after `cause`.
    pub(crate) fn failed(&self, cause: RedisError) {
        *self.cause.lock() = Some(cause);
        self.failed_at(self.now_us());
    }

    /// The failure that last opened the breaker.
    pub(crate) fn cause(&self) -> Option<RedisError> {
        self.cause.lock().clone()
    }

    fn failed_at(&self, now: u64) {
        if self.probe_interval_us == 0 {
            return;
        }
        self.open_until_us
            .store(now + self.probe_interval_us, Ordering::Release);
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open_until_us.load(Ordering::Acquire) != 0
    }

    fn now_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_probe_per_interval_while_open() {
        let breaker = Breaker::new(Duration::from_millis(30));
        assert_eq!(breaker.admit_at(1), Admission::Call);
        breaker.failed_at(1);
        assert_eq!(
            breaker.admit_at(20_000),
            Admission::Refuse(Duration::from_micros(10_001))
        );
        assert_eq!(breaker.admit_at(30_001), Admission::Call, "the probe");
        assert!(
            matches!(breaker.admit_at(30_002), Admission::Refuse(_)),
            "only one probe"
        );
        breaker.failed_at(30_002);
        assert!(matches!(breaker.admit_at(60_001), Admission::Refuse(_)));
        assert_eq!(breaker.admit_at(60_002), Admission::Call, "the next probe");
        breaker.succeeded();
        assert_eq!(breaker.admit_at(60_003), Admission::Call);
        assert!(!breaker.is_open());
    }

    #[test]
    fn a_zero_interval_never_opens() {
        let breaker = Breaker::new(Duration::ZERO);
        breaker.failed_at(1);
        assert!(!breaker.is_open());
        assert_eq!(breaker.admit_at(2), Admission::Call);
    }
}
