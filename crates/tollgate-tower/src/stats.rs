//! [`Stats`]: running counts of what a layer decided, shared by every clone of it.
//!
//! Counters are relaxed atomics: a snapshot taken while requests are in flight is a consistent
//! count of each counter, not of all of them at one instant.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A handle on a layer's counters. Cheap to clone; every clone sees the same counts.
///
/// ```
/// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
/// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
///
/// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?;
/// let layer = RateLimitLayer::new(MemoryStore::new(), KeyedPolicy::new(policy, KeyExtractor::peer_ip()));
/// let stats = layer.stats();
/// assert_eq!(stats.snapshot().allowed, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Stats {
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    allowed: AtomicU64,
    denied: AtomicU64,
    shadow_denied: AtomicU64,
    store_errors: AtomicU64,
    failed_closed: AtomicU64,
    rejected_keys: AtomicU64,
    degraded: AtomicU64,
    no_peer_address: AtomicU64,
    blocked: AtomicU64,
    refunds: AtomicU64,
    refund_failures: AtomicU64,
    charges: AtomicU64,
    unrecorded_charges: AtomicU64,
}

/// The counts at one moment; see each field for what it counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Requests passed on to the inner service: outcome [`Allowed`](tollgate::Outcome::Allowed),
    /// [`ShadowDenied`](tollgate::Outcome::ShadowDenied) or
    /// [`Degraded`](tollgate::Outcome::Degraded), or no rule applied.
    pub allowed: u64,
    /// Requests answered `429 Too Many Requests`: outcome [`Denied`](tollgate::Outcome::Denied).
    pub denied: u64,
    /// Shadow-mode rules that would have denied, one per rule and request, whatever the
    /// request's outcome (they never denied it themselves).
    pub shadow_denied: u64,
    /// Requests on which the store failed, whatever the failure modes then decided.
    pub store_errors: u64,
    /// Requests answered `503 Service Unavailable`: outcome [`Error`](tollgate::Outcome::Error),
    /// a store failure met a `FailClosed` rule.
    pub failed_closed: u64,
    /// Requests answered `400 Bad Request`: no key with [`MissingKey::Reject`](crate::MissingKey),
    /// or a key longer than the store accepts.
    pub rejected_keys: u64,
    /// Requests a failure mode decided, in part or whole, instead of the store (Redis away, a
    /// full memory store), whatever it said.
    pub degraded: u64,
    /// Requests answered `500 Internal Server Error` because a rule keys on the client address
    /// and the request carries no peer address: the app was served without
    /// `into_make_service_with_connect_info::<SocketAddr>()`.
    pub no_peer_address: u64,
    /// Requests answered `403 Forbidden`: a key on a deny list
    /// ([`Blocked`](tollgate::Outcome::Blocked)).
    pub blocked: u64,
    /// Rules given back their cost because the inner service answered 5xx, with
    /// [`refund_on_server_error`](crate::RateLimitLayerBuilder::refund_on_server_error).
    pub refunds: u64,
    /// Such refunds the store failed to carry out (the spend stays).
    pub refund_failures: u64,
    /// Costs charged after the response by a [`ChargeAfterLayer`](crate::ChargeAfterLayer).
    pub charges: u64,
    /// Such charges recorded nowhere: the store failed and the policy's failure mode could
    /// not record them (`FailOpen`, `FailClosed`, or a full `Local` limiter).
    pub unrecorded_charges: u64,
}

impl Stats {
    /// The counts now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let c = &self.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StatsSnapshot {
            allowed: load(&c.allowed),
            denied: load(&c.denied),
            shadow_denied: load(&c.shadow_denied),
            store_errors: load(&c.store_errors),
            failed_closed: load(&c.failed_closed),
            rejected_keys: load(&c.rejected_keys),
            degraded: load(&c.degraded),
            no_peer_address: load(&c.no_peer_address),
            blocked: load(&c.blocked),
            refunds: load(&c.refunds),
            refund_failures: load(&c.refund_failures),
            charges: load(&c.charges),
            unrecorded_charges: load(&c.unrecorded_charges),
        }
    }

    pub(crate) fn bump(&self, counter: Counter) {
        let c = &self.counters;
        let target = match counter {
            Counter::Allowed => &c.allowed,
            Counter::Denied => &c.denied,
            Counter::ShadowDenied => &c.shadow_denied,
            Counter::StoreError => &c.store_errors,
            Counter::FailedClosed => &c.failed_closed,
            Counter::RejectedKey => &c.rejected_keys,
            Counter::Degraded => &c.degraded,
            Counter::NoPeerAddress => &c.no_peer_address,
            Counter::Blocked => &c.blocked,
            Counter::Refund => &c.refunds,
            Counter::RefundFailed => &c.refund_failures,
            Counter::Charge => &c.charges,
            Counter::UnrecordedCharge => &c.unrecorded_charges,
        };
        target.fetch_add(1, Ordering::Relaxed);
    }
}

/// One of the counters, for [`Stats::bump`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Counter {
    Allowed,
    Denied,
    ShadowDenied,
    StoreError,
    FailedClosed,
    RejectedKey,
    Degraded,
    NoPeerAddress,
    Blocked,
    Refund,
    RefundFailed,
    Charge,
    UnrecordedCharge,
}
