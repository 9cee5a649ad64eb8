//! Where "now" comes from.
//!
//! Algorithms take time as microseconds since the Unix epoch, the unit Redis `TIME` gives, so
//! epoch-aligned windows line up across stores. [`SystemClock`] reads a fast monotonic counter
//! (the TSC through `quanta`, about half the cost of `Instant::now`) and adds it to the wall
//! time read once at start, so it never steps back when the wall clock is adjusted.
//! [`ManualClock`] is set by hand, for tests and simulations.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::bounds;

/// A source of the current time in microseconds since the Unix epoch.
///
/// ```
/// use tollgate::{Clock, ManualClock};
///
/// let clock = ManualClock::new(5);
/// assert_eq!(clock.now_us(), 5);
/// ```
pub trait Clock: Send + Sync {
    /// Microseconds since the Unix epoch.
    fn now_us(&self) -> u64;
}

/// The real time, monotonic, anchored to the wall clock once at construction.
///
/// ```
/// use tollgate::{Clock, SystemClock};
///
/// let clock = SystemClock::new();
/// let a = clock.now_us();
/// assert!(clock.now_us() >= a);
/// assert!(a > 1_600_000_000_000_000); // after 2020
/// ```
#[derive(Debug, Clone)]
pub struct SystemClock {
    counter: quanta::Clock,
    started_raw: u64,
    started_us: u64,
}

impl SystemClock {
    /// Reads the wall clock once and counts from there.
    ///
    /// ```
    /// use tollgate::{Clock, SystemClock};
    ///
    /// let clock = SystemClock::new();
    /// assert!(clock.now_us() > 0);
    /// ```
    pub fn new() -> Self {
        let counter = quanta::Clock::new();
        let started_raw = counter.raw();
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        SystemClock {
            counter,
            started_raw,
            started_us: bounds::as_us(since_epoch),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline(always)]
    fn now_us(&self) -> u64 {
        let elapsed_ns = self.counter.delta_as_nanos(self.started_raw, self.counter.raw());
        self.started_us + elapsed_ns / 1_000
    }
}

/// A clock that moves only when told to. Clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_000);
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(2));
/// assert_eq!(shared.now_us(), 3_000);
/// clock.set_us(10);
/// assert_eq!(shared.now_us(), 10);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_us: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `now_us`.
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock};
    ///
    /// assert_eq!(ManualClock::new(7).now_us(), 7);
    /// ```
    pub fn new(now_us: u64) -> Self {
        ManualClock {
            now_us: Arc::new(AtomicU64::new(now_us)),
        }
    }

    /// Sets the time.
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new(7);
    /// clock.set_us(3);
    /// assert_eq!(clock.now_us(), 3);
    /// ```
    pub fn set_us(&self, now_us: u64) {
        self.now_us.store(now_us, Ordering::SeqCst);
    }

    /// Moves the time forward.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new(0);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(clock.now_us(), 1_000_000);
    /// ```
    pub fn advance(&self, by: Duration) {
        self.now_us.fetch_add(bounds::as_us(by), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.now_us.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_us(&self) -> u64 {
        (**self).now_us()
    }
}
