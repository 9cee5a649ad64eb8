//! The allow and deny lists the server decides with: the config's entries (global and per
//! policy) and the entries added through the admin API, compiled together into the engine's
//! [`AccessLists`].
//!
//! **Where admin entries live.** In the store, so that they apply to the whole fleet:
//!
//! - memory store: in this process (the store is per process anyway);
//! - Redis and Redis Cluster: one hash, `<prefix>{access-lists}` (see
//!   `tollgate_redis::RedisStore::access_entries`). The instance that adds or removes an entry
//!   applies it at once; every instance asks for the hash's version every [`REFRESH_EVERY`] and
//!   reads the hash again (in pages) when it changed, so another instance applies a change
//!   within that (plus the read). If the store cannot be read, an instance keeps the entries it
//!   read last.
//!
//! Admin entries survive config reloads; config entries are replaced by each reload. A reload
//! recompiles the lists at once; limits swapped in directly (`state.limits.store(..)`) are seen
//! by the next refresh. An admin change, here or read from the store, is applied to the lists in
//! force one entry at a time (O(log n): see [`AccessLists`]), never by compiling them again, and
//! each entry is held once, shared by the admin set and the lists.
//!
//! **Bounds.** At most [`MAX_MEMORY_ENTRIES`] admin entries taking at most [`MAX_MEMORY_BYTES`]
//! together (as [`AccessEntry::encoded_len`] counts them), the same as Redis keeps: a full store
//! answers the add with [`Added::Full`] or [`Added::TooLarge`] (HTTP 409).
//!
//! Every change through the admin API is logged at `info` with `audit = true`, the action and
//! the entry.

use std::collections::BTreeMap;
use std::ops::Bound;
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

/// The most bytes admin entries take in a memory store, as Redis
/// ([`tollgate_redis::MAX_ACCESS_BYTES`]).
pub(crate) const MAX_MEMORY_BYTES: usize = tollgate_redis::MAX_ACCESS_BYTES;

/// The admin entries and what the lists in force were compiled from.
#[derive(Default)]
pub(crate) struct AccessAdmin {
    /// The admin entries: the only copy on a memory store, the last read of the store's on
    /// Redis. Each entry is shared with the lists in force, not copied.
    entries: Mutex<Admin>,
    /// The limits the lists in force were compiled with, to notice a swap.
    compiled_from: Mutex<Option<Arc<Limits>>>,
}

/// Entry → when it was added (ms since the Unix epoch), and the bytes they take together.
#[derive(Default)]
struct Admin {
    at_ms: BTreeMap<Arc<AccessEntry>, u64>,
    bytes: usize,
    /// On Redis: the store's version these entries were read at, `None` when unknown (not read
    /// yet, or changed during the read).
    version: Option<u64>,
}

impl Admin {
    fn insert(&mut self, entry: Arc<AccessEntry>, at_ms: u64) {
        let size = entry.encoded_len();
        if self.at_ms.insert(entry, at_ms).is_none() {
            self.bytes += size;
        }
    }

    fn remove(&mut self, entry: &AccessEntry) -> Option<Arc<AccessEntry>> {
        let (entry, _) = self.at_ms.remove_entry(entry)?;
        self.bytes -= entry.encoded_len();
        Some(entry)
    }
}

/// An entry as `GET /v1/admin/access` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listing {
    /// The entry.
    pub entry: Arc<AccessEntry>,
    /// Where it comes from.
    pub source: Source,
    /// When an admin entry was added, ms since the Unix epoch.
    pub added_at_ms: Option<u64>,
}

/// Where a listed entry comes from; the config's come first in a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Source {
    /// The config file.
    Config,
    /// The admin API.
    Admin,
}

impl Source {
    /// `config` or `admin`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Config => "config",
            Source::Admin => "admin",
        }
    }
}

/// Where a page of a listing starts: after this entry of this source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageStart {
    /// The entry.
    pub entry: Arc<AccessEntry>,
    /// Its source.
    pub source: Source,
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
    /// engine's lists: once at start and after a reload; admin changes are applied one entry at
    /// a time.
    pub(crate) fn apply(&self, state: Served<'_>) {
        let limits = state.limits.load_full();
        // Held while the lists are swapped in, so that no admin change lands between.
        let admin = lock(&self.entries);
        let mut lists = AccessLists::new(limits.access_entries().iter().cloned());
        for entry in admin.at_ms.keys() {
            lists.insert(Arc::clone(entry));
        }
        state.engine.set_access_lists(lists);
        drop(admin);
        *lock(&self.compiled_from) = Some(limits);
    }

    /// One page of the entries in force, ordered by entry and, for an entry both in the config
    /// and added by an admin, the config's first: at most `limit` after `after` (from the first
    /// when `None`), and whether more follow. The admin entries are read from their ordered set
    /// (O(log n + limit)); the config's are sorted for each page.
    /// The listed entry of `source` that `wanted` picks, if one is listed now: what a page
    /// cursor that names its entry by digest starts after.
    pub(crate) fn find(
        &self,
        state: Served<'_>,
        source: Source,
        wanted: impl Fn(&AccessEntry) -> bool,
    ) -> Option<PageStart> {
        let entry = match source {
            Source::Config => state
                .limits
                .load()
                .access_entries()
                .iter()
                .find(|entry| wanted(entry))
                .map(|entry| Arc::new(entry.clone())),
            Source::Admin => lock(&self.entries)
                .at_ms
                .keys()
                .find(|entry| wanted(entry))
                .map(Arc::clone),
        }?;
        Some(PageStart { entry, source })
    }

    pub(crate) fn page(
        &self,
        state: Served<'_>,
        after: Option<&PageStart>,
        limit: usize,
    ) -> (Vec<Listing>, bool) {
        let limits = state.limits.load_full();
        let past = |entry: &AccessEntry, source: Source| {
            after.is_none_or(|after| (entry, source) > (&*after.entry, after.source))
        };
        let mut config: Vec<&AccessEntry> = limits
            .access_entries()
            .iter()
            .filter(|entry| past(entry, Source::Config))
            .collect();
        config.sort_unstable();
        config.dedup();
        let admin = lock(&self.entries);
        let from = match after {
            Some(after) if after.source == Source::Admin => Bound::Excluded(&*after.entry),
            Some(after) => Bound::Included(&*after.entry),
            None => Bound::Unbounded,
        };
        let mut admin_entries = admin
            .at_ms
            .range::<AccessEntry, _>((from, Bound::Unbounded))
            .peekable();
        let mut config_entries = config.into_iter().peekable();
        let mut out = Vec::with_capacity(limit + 1);
        while out.len() <= limit {
            let take_config = match (config_entries.peek(), admin_entries.peek()) {
                (Some(c), Some((a, _))) => *c <= &***a,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_config {
                let Some(entry) = config_entries.next() else { break };
                out.push(Listing {
                    entry: Arc::new(entry.clone()),
                    source: Source::Config,
                    added_at_ms: None,
                });
            } else {
                let Some((entry, at)) = admin_entries.next() else {
                    break;
                };
                out.push(Listing {
                    entry: Arc::clone(entry),
                    source: Source::Admin,
                    added_at_ms: Some(*at),
                });
            }
        }
        let more = out.len() > limit;
        out.truncate(limit);
        (out, more)
    }

    /// Adds an admin entry in the store and applies it here at once; what happened, and when
    /// the entry was added (`None` when it was not).
    pub(crate) async fn add(
        &self,
        state: Served<'_>,
        entry: AccessEntry,
    ) -> Result<(Added, Option<u64>), Error> {
        let entry = Arc::new(entry);
        let added = match state.engine.store() {
            AnyStore::Memory(_) => {
                let mut admin = lock(&self.entries);
                if admin.at_ms.contains_key(&entry) {
                    Added::AlreadyThere
                } else if admin.at_ms.len() >= MAX_MEMORY_ENTRIES {
                    Added::Full {
                        held: admin.at_ms.len() as u64,
                    }
                } else if admin.bytes + entry.encoded_len() > MAX_MEMORY_BYTES {
                    Added::TooLarge {
                        held_bytes: admin.bytes as u64,
                        max_bytes: MAX_MEMORY_BYTES as u64,
                    }
                } else {
                    self.insert(state, &mut admin, &entry, now_ms());
                    Added::New
                }
            }
            AnyStore::Redis(store) => {
                let added = store.add_access_entry(&entry).await?;
                if matches!(added, Added::New | Added::AlreadyThere) {
                    // Here at once; the time is this instance's until the next refresh reads
                    // the store's.
                    let mut admin = lock(&self.entries);
                    if !admin.at_ms.contains_key(&entry) {
                        self.insert(state, &mut admin, &entry, now_ms());
                    }
                }
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
        let at_ms = lock(&self.entries).at_ms.get(&entry).copied();
        Ok((added, at_ms))
    }

    /// Removes an admin entry from the store and applies that here at once; `false` when there
    /// was no such admin entry.
    pub(crate) async fn remove(&self, state: Served<'_>, entry: &AccessEntry) -> Result<bool, Error> {
        let removed = match state.engine.store() {
            AnyStore::Memory(_) => self.forget(state, &mut lock(&self.entries), entry),
            AnyStore::Redis(store) => {
                let removed = store.remove_access_entry(entry).await?;
                self.forget(state, &mut lock(&self.entries), entry);
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
        Ok(removed)
    }

    /// Records an admin entry and adds it to the lists in force: O(log n), nothing rebuilt.
    fn insert(&self, state: Served<'_>, admin: &mut Admin, entry: &Arc<AccessEntry>, at_ms: u64) {
        admin.insert(Arc::clone(entry), at_ms);
        state
            .engine
            .change_access_lists(|lists| lists.insert(Arc::clone(entry)));
    }

    /// Forgets an admin entry and takes it out of the lists in force, unless the config lists
    /// it too; whether it was an admin entry.
    fn forget(&self, state: Served<'_>, admin: &mut Admin, entry: &AccessEntry) -> bool {
        if admin.remove(entry).is_none() {
            return false;
        }
        if !state.limits.load().access_entries().contains(entry) {
            state.engine.change_access_lists(|lists| lists.remove(entry));
        }
        true
    }

    /// Reads the store's entries (Redis), unless they are still at the version read last, and
    /// applies the difference with those applied here, one entry at a time.
    async fn reread(&self, state: Served<'_>) -> Result<(), Error> {
        let AnyStore::Redis(store) = state.engine.store() else {
            return Ok(());
        };
        let version = store.access_version().await?;
        if version.is_some() && version == lock(&self.entries).version {
            return Ok(());
        }
        let read: BTreeMap<AccessEntry, u64> = store.access_entries().await?.into_iter().collect();
        // Changed while it was read in pages: apply what was read, and read again next time.
        let unchanged = store.access_version().await? == version;
        let mut admin = lock(&self.entries);
        admin.version = version.filter(|_| unchanged);
        let gone: Vec<Arc<AccessEntry>> = admin
            .at_ms
            .keys()
            .filter(|entry| !read.contains_key(&***entry))
            .cloned()
            .collect();
        for entry in gone {
            self.forget(state, &mut admin, &entry);
        }
        for (entry, at_ms) in read {
            match admin.at_ms.get_mut(&entry) {
                Some(known) => *known = at_ms,
                None => self.insert(state, &mut admin, &Arc::new(entry), at_ms),
            }
        }
        Ok(())
    }

    /// One refresh: reads the store's entries and applies what changed, and recompiles the lists
    /// when the limits were swapped. A store that cannot be read keeps the entries read last.
    pub(crate) async fn refresh(&self, state: Served<'_>) {
        if let Err(err) = self.reread(state).await
            && REFRESH_LOG.due()
        {
            tracing::warn!(target: "tollgate_server::access", error = %err, "cannot read the access list entries from the store; keeping the last ones read");
        }
        let swapped = {
            let compiled = lock(&self.compiled_from);
            !compiled
                .as_ref()
                .is_some_and(|from| Arc::ptr_eq(from, &state.limits.load()))
        };
        if swapped {
            self.apply(state);
        }
    }
}

static REFRESH_LOG: tollgate_tower::LogSampler = tollgate_tower::LogSampler::new(Duration::from_secs(60));
