//! Operations, the bottom layer beside [`runtime`](crate::runtime): what the server tells its
//! operators about what it decided and how it is doing. Every door reports here; nothing here
//! knows a door, so a new door cannot change what is counted, only call it.
//!
//! - [`count`]: the one path a [`tollgate::Verdict`] is counted by, for every door: Prometheus
//!   decision counters and the dashboard's tally and top keys, fed together.
//! - [`decision_log`]: the opt-in log of what each request asked and was answered, for
//!   `tollgate replay`; fed through [`count`], written by a background thread, bounded.
//! - [`recorder`]: the dashboard's bounded memory of recent decisions and most denied keys.
//! - [`metrics`]: the Prometheus recorder and every other metric (store, listeners, reloads,
//!   the proxy's requests).
//! - [`statsd`]: envoyproxy/ratelimit's statistics by its names over statsd, when asked for.

pub mod count;
pub mod decision_log;
pub(crate) mod hex;
pub mod metrics;
pub(crate) mod recorder;
pub mod statsd;
