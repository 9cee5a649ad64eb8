//! The deadline of each store call in tests: [`STORE_TIMEOUT`], the one place it is chosen.
//!
//! The stores default to 50 ms a call, which suits a production Redis next to the server. Tests
//! run on busy CI machines (two cores, a compiler and a cluster beside them) where one call in
//! thousands can take longer; with the default that call is a store error, the engine answers it
//! with the failure mode, and a test asserting exact counts goes red for no fault of the code.
//! So every test store gets this deadline instead: far above any answer time of a loaded machine,
//! yet a bound, so a store that truly hangs still fails the test.
//!
//! A test that exercises the deadline itself (a paused Redis, a call that must time out) sets its
//! own, next to a comment saying so.
//!
//! The test kit cannot build a Redis store itself (the Redis crate's tests depend on it), so it
//! shares the value, in the three shapes tests need:
//!
//! ```
//! use tollgate_testkit::{STORE_TIMEOUT, store_timeout_arg};
//!
//! // RedisStore::builder(target).timeout(STORE_TIMEOUT) for a library store;
//! // StoreOptions { timeout: STORE_TIMEOUT, ..StoreOptions::default() } for the server's;
//! // and for the binary:
//! let args = ["serve", "--store", "redis://127.0.0.1:6379", "--store-timeout", &store_timeout_arg()];
//! assert_eq!(args[4], format!("{}ms", STORE_TIMEOUT.as_millis()));
//! ```

use std::time::Duration;

/// The deadline of each store call in every test that does not exercise the deadline itself.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// [`STORE_TIMEOUT`] as the binaries' `--store-timeout` takes it (`5000ms`).
pub fn store_timeout_arg() -> String {
    format!("{}ms", STORE_TIMEOUT.as_millis())
}
