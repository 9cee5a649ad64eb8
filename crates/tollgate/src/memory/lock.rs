//! The memory store's read-write lock: parking_lot's, or loom's in the model checks.
//!
//! The loom models of the hot-key memo ([`super::hot`]) race the store's own code: a memo's
//! lock-free step on one thread against a reset, an expiry sweep or a locked decision on
//! another. For loom to see those interleavings, the shard lock must be one of its own; under
//! `--cfg loom` (test builds only) this module wraps loom's lock behind the two methods the
//! store calls, so nothing else changes.

#[cfg(not(all(test, loom)))]
pub(crate) use parking_lot::{RwLock, RwLockWriteGuard};

#[cfg(all(test, loom))]
pub(crate) use model::{RwLock, RwLockWriteGuard};

#[cfg(all(test, loom))]
mod model {
    pub(crate) type RwLockReadGuard<'a, T> = loom::sync::RwLockReadGuard<'a, T>;
    pub(crate) type RwLockWriteGuard<'a, T> = loom::sync::RwLockWriteGuard<'a, T>;

    /// loom's lock, with parking_lot's signatures: a model never poisons a lock.
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            RwLock(loom::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().expect("a model never poisons a lock")
        }

        pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().expect("a model never poisons a lock")
        }
    }
}
