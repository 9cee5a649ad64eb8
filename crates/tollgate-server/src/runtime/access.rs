//! The allow and deny lists the server decides with: the config's entries (global and per
//! policy) and the entries added through the admin API, compiled together into the engine's
//! [`AccessLists`].
//!
//! **Where admin entries live.** In the store, so that they apply to the whole fleet:
//!
//! - memory store: in this process (the store is per process anyway);
//! - Redis and Redis Cluster: one hash, `<prefix>{access-lists}` (see
//!   `tollgate_redis::RedisStore::access_entries`). The instance that adds or removes an entry
//!   applies it at once; every instance reads the hash again every [`REFRESH_EVERY`], so
//!   another instance applies a change within that (plus one store round trip). If the store
//!   cannot be read, an instance keeps the entries it read last.
//!
//! Admin entries survive config reloads; config entries are replaced by each reload. A reload
//! recompiles the lists at once; limits swapped in directly (`state.limits.store(..)`) are seen
//! by the next refresh. Every change through the admin API is logged at `info` with
//! `audit = true`, the action and the entry.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tollgate::access::{AccessEntry, AccessLists, Added};
use tollgate::{Engine, Error};
use tollgate_config::Limits;

use super::store::AnyStore;

/// How often an instance reads the store's entries again: the most another instance's change
/// takes to apply here (plus a round trip).
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// The most admin entries a memory store keeps (Redis keeps [`tollgate_redis::MAX_ACCESS_ENTRIES`]).
pub(crate) const MAX_MEMORY_ENTRIES: usize = tollgate_redis::MAX_ACCESS_ENTRIES;

/// The admin entries and what the lists in force were compiled from.
#[derive(Default)]
pub(crate) struct AccessAdmin {
    /// Entry → when it was added (ms since the Unix epoch): the only copy on a memory store,
    /// the last read of the store's on Redis.
    entries: Mutex<BTreeMap<AccessEntry, u64>>,
    /// The limits the lists in force were compiled with, to notice a swap.
    compiled_from: Mutex<Option<Arc<Limits>>>,
}

/// An entry as `GET /v1/admin/access` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listing {
    /// The entry.
    pub entry: AccessEntry,
    /// `config` or `admin`.
    pub source: &'static str,
    /// When an admin entry was added, ms since the Unix epoch.
    pub added_at_ms: Option<u64>,
}

/// What the lists are compiled from and into: the limits in force and the engine, over the store
/// that keeps the admin entries. Borrowed from the server's state, which holds an [`AccessAdmin`].
#[derive(Clone, Copy)]
pub(crate) struct Served<'a> {
    /// The limits in force, whose config entries are compiled in.
    pub limits: &'a ArcSwap<Limits>,
    /// The engine the lists are set on.
    pub engine: &'a Engine<AnyStore>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl AccessAdmin {
    /// Compiles the config's entries of the limits in force and the admin entries into the
    /// engine's lists.
    pub(crate) fn apply(&self, state: Served<'_>) {
        let limits = state.limits.load_full();
        let entries = lock(&self.entries);
        let lists = AccessLists::new(
            limits
                .access_entries()
                .iter()
                .cloned()
                .chain(entries.keys().cloned()),
        );
        drop(entries);
        state.engine.set_access_lists(lists);
        *lock(&self.compiled_from) = Some(limits);
    }

    /// Every entry in force: the config's, then the admin ones.
    pub(crate) fn listings(&self, state: Served<'_>) -> Vec<Listing> {
        let limits = state.limits.load_full();
        let mut out: Vec<Listing> = limits
            .access_entries()
            .iter()
            .map(|entry| Listing {
                entry: entry.clone(),
                source: "config",
                added_at_ms: None,
            })
            .collect();
        out.extend(lock(&self.entries).iter().map(|(entry, at)| Listing {
            entry: entry.clone(),
            source: "admin",
            added_at_ms: Some(*at),
        }));
        out
    }

    /// Adds an admin entry in the store and applies it here at once.
    pub(crate) async fn add(&self, state: Served<'_>, entry: AccessEntry) -> Result<Added, Error> {
        // Whether the entries read back from the store differ from those applied here.
        let mut reread = false;
        let added = match state.engine.store() {
            AnyStore::Memory(_) => {
                let mut entries = lock(&self.entries);
                if entries.contains_key(&entry) {
                    Added::AlreadyThere
                } else if entries.len() >= MAX_MEMORY_ENTRIES {
                    Added::Full {
                        held: entries.len() as u64,
                    }
                } else {
                    entries.insert(entry.clone(), now_ms());
                    Added::New
                }
            }
            AnyStore::Redis(store) => {
                let added = store.add_access_entry(&entry).await?;
                // The write is done: if the read back fails, apply the entry from here.
                reread = self.reread(state).await.unwrap_or_else(|_| {
                    lock(&self.entries).entry(entry.clone()).or_insert_with(now_ms);
                    true
                });
                added
            }
        };
        if added == Added::New {
            tracing::info!(
                target: "tollgate_server::access",
                audit = true,
                action = "access_list.add",
                policy = entry.policy().unwrap_or("*"),
                list = entry.list().as_str(),
                kind = entry.kind().as_str(),
                value = entry.value(),
                "access list entry added"
            );
        }
        if added == Added::New || reread {
            self.apply(state);
        }
        Ok(added)
    }

    /// Removes an admin entry from the store and applies that here at once; `false` when there
    /// was no such admin entry.
    pub(crate) async fn remove(&self, state: Served<'_>, entry: &AccessEntry) -> Result<bool, Error> {
        let mut reread = false;
        let removed = match state.engine.store() {
            AnyStore::Memory(_) => lock(&self.entries).remove(entry).is_some(),
            AnyStore::Redis(store) => {
                let removed = store.remove_access_entry(entry).await?;
                reread = self.reread(state).await.unwrap_or_else(|_| {
                    lock(&self.entries).remove(entry);
                    true
                });
                removed
            }
        };
        if removed {
            tracing::info!(
                target: "tollgate_server::access",
                audit = true,
                action = "access_list.remove",
                policy = entry.policy().unwrap_or("*"),
                list = entry.list().as_str(),
                kind = entry.kind().as_str(),
                value = entry.value(),
                "access list entry removed"
            );
        }
        if removed || reread {
            self.apply(state);
        }
        Ok(removed)
    }

    /// Reads the store's entries (Redis) into `entries`; whether they changed.
    async fn reread(&self, state: Served<'_>) -> Result<bool, Error> {
        let AnyStore::Redis(store) = state.engine.store() else {
            return Ok(false);
        };
        let read: BTreeMap<AccessEntry, u64> = store.access_entries().await?.into_iter().collect();
        let mut entries = lock(&self.entries);
        let changed = *entries != read;
        *entries = read;
        Ok(changed)
    }

    /// One refresh: reads the store's entries and recompiles the lists when they or the limits
    /// changed. A store that cannot be read keeps the entries read last.
    pub(crate) async fn refresh(&self, state: Served<'_>) {
        let changed = match self.reread(state).await {
            Ok(changed) => changed,
            Err(err) => {
                if REFRESH_LOG.due() {
                    tracing::warn!(target: "tollgate_server::access", error = %err, "cannot read the access list entries from the store; keeping the last ones read");
                }
                false
            }
        };
        let swapped = {
            let compiled = lock(&self.compiled_from);
            !compiled
                .as_ref()
                .is_some_and(|from| Arc::ptr_eq(from, &state.limits.load()))
        };
        if changed || swapped {
            self.apply(state);
        }
    }
}

static REFRESH_LOG: tollgate_tower::LogSampler = tollgate_tower::LogSampler::new(Duration::from_secs(60));
