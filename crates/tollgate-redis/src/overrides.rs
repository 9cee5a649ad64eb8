//! Runtime overrides in Redis, read by the decision script itself.
//!
//! A **key override** is a hash next to the key's state (`<state>:ovr`, same hash tag, so the
//! same cluster slot): `a` the algorithm, `p1`..`p3` its parameters in the rule record's format,
//! and `d` the override as set (for reading it back). Every rule of every decision passes that
//! name in KEYS, and the script swaps in the parameters when the hash exists
//! (`lua/prelude.lua`): an override set by any instance applies on the next decision of every
//! instance, in the same round trip, on standalone Redis and on a cluster alike. Its expiry is
//! the hash's own TTL.
//!
//! A **prefix override** cannot be read that way: the keys it covers hash to any slot. Every
//! prefix override of every policy lives in one hash (`<prefix>{:}prefixes`), at most
//! [`MAX_PREFIX_OVERRIDES`] per policy (counted by `lua/override_prefix.lua` when it sets a new
//! one, dropping the lapsed ones it meets), that each instance keeps
//! a copy of and reloads whole (one `HGETALL`, by a task of its own: no decision waits for it,
//! except the very first one of the store) when a decision finds its copy older than the
//! store's refresh interval (`RedisStoreBuilder::override_refresh`, 1 s by default). The
//! instance resolves a key's longest prefix override from its copy and sends those parameters
//! in the rule record; a key override read by the script still wins.
//! The bound: a prefix override set, changed or removed on one instance applies on another
//! within one refresh interval plus the reload's round trip (at once on the instance that set
//! it, which changes its copy in place); decisions stay one round trip, and each instance adds
//! one `HGETALL` per interval while it decides.
//!
//! Each policy's key overrides are also listed, in three keys of the `{:}` slot that
//! `lua/override_keys.lua` writes together: `<prefix>{:}keys:<policy>` (key → the override as
//! set), `{:}key-order:<policy>` (the keys in byte order, for
//! [`list_overrides`](tollgate::OverrideStore::list_overrides) a page at a time) and
//! `{:}key-expiry:<policy>` (the keys that lapse, by when, so that lapsed ones are dropped
//! without a scan). The list is the bound: at most [`MAX_KEY_OVERRIDES`] per policy. On a cluster
//! it is in another slot than the override, so a key is listed (or refused) before its override
//! is written, and unlisted after it is removed: an override is never in force unlisted.
//!
//! Setting or removing a key override also drops the key's cached denial here and, through the
//! reset channel, on the other instances, so a raised limit is not hidden behind a denial cached
//! under the old one. Setting a prefix override drops every cached denial of this instance; the
//! other instances' cached denials of keys under the prefix last until their wait ends (they are
//! only ever kept until then).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tollgate::overrides::{
    MAX_KEY_OVERRIDES, MAX_PAGE, MAX_PREFIX_OVERRIDES, Override, OverridePage, OverrideTable, OverrideTarget,
};
use tollgate::{Algorithm, Anchor, Clock, Error, Policy, Rate, StoreErrorKind};

use crate::deny_cache::DenyCache;
use crate::keys::KeyNames;
use crate::scripts::params;
use crate::transport::Transport;

/// Each instance's copy of the prefix overrides, and when it was loaded (µs, local clock).
pub(crate) struct PrefixCache {
    copy: RwLock<Copy>,
    /// At most one reload at a time.
    reloading: tokio::sync::Mutex<()>,
    max_age_us: u64,
}

#[derive(Default)]
struct Copy {
    table: OverrideTable,
    /// When it was loaded; `None` before the first load.
    loaded_at_us: Option<u64>,
    /// Bumped by every change made here, so that a reload that read Redis before the change
    /// does not install what it read over it.
    generation: u64,
}

impl PrefixCache {
    pub(crate) fn new(max_age: Duration) -> Self {
        PrefixCache {
            copy: RwLock::new(Copy::default()),
            reloading: tokio::sync::Mutex::new(()),
            max_age_us: max_age.as_micros() as u64,
        }
    }

    fn fresh(&self, now_us: u64) -> bool {
        self.copy
            .read()
            .loaded_at_us
            .is_some_and(|at| now_us.saturating_sub(at) < self.max_age_us)
    }

    fn loaded(&self) -> bool {
        self.copy.read().loaded_at_us.is_some()
    }

    /// Whether the copy holds any prefix override.
    pub(crate) fn any(&self) -> bool {
        !self.copy.read().table.is_empty()
    }

    /// Applies a change made by this instance to the copy at once.
    fn change(&self, apply: impl FnOnce(&mut OverrideTable)) {
        let mut copy = self.copy.write();
        apply(&mut copy.table);
        copy.generation += 1;
    }

    /// `policy` with the longest prefix override of `key` from the copy, if any.
    pub(crate) fn in_force(&self, policy: &Policy, key: &[u8], now_us: u64) -> Option<Policy> {
        let copy = self.copy.read();
        if copy.table.is_empty() {
            return None;
        }
        copy.table
            .find_prefix(policy.name(), key, now_us)
            .filter(|o| o.algorithm.name() == policy.algorithm().name())
            .map(|o| o.apply_to(policy))
    }

    /// The longest prefix override of `key` from the copy.
    fn find(&self, policy: &Policy, key: &[u8], now_us: u64) -> Option<Override> {
        self.copy.read().table.find_prefix(policy.name(), key, now_us)
    }
}

/// Runtime overrides in Redis, for one store: the core's
/// [`OverrideStore`](tollgate::OverrideStore) operations, and this instance's copy of the prefix
/// overrides that decisions read.
pub(crate) struct Overrides {
    transport: Arc<Transport>,
    keys: KeyNames,
    deny_cache: Option<Arc<DenyCache>>,
    /// Local time, for expiries and the copy's age.
    clock: Arc<dyn Clock>,
    prefixes: PrefixCache,
}

impl Overrides {
    pub(crate) fn new(
        transport: Arc<Transport>,
        keys: KeyNames,
        deny_cache: Option<Arc<DenyCache>>,
        clock: Arc<dyn Clock>,
        max_age: Duration,
    ) -> Self {
        Overrides {
            transport,
            keys,
            deny_cache,
            clock,
            prefixes: PrefixCache::new(max_age),
        }
    }

    /// This instance's copy of the prefix overrides.
    pub(crate) fn prefixes(&self) -> &PrefixCache {
        &self.prefixes
    }

    /// Keeps this instance's copy of the prefix overrides fresh. Before the first load the
    /// caller waits for it (one `HGETALL`); after that a copy older than the refresh interval is
    /// reloaded by a task of its own while decisions go on with the copy they have, so no
    /// decision ever waits for a reload. A reload that fails keeps the old copy.
    pub(crate) async fn refresh_prefixes(self: &Arc<Self>) {
        let now_us = self.clock.now_us();
        if self.prefixes.fresh(now_us) {
            return;
        }
        if self.prefixes.loaded() {
            // One reload at a time: while one is under way, there is nothing to start.
            if self.prefixes.reloading.try_lock().is_err() {
                return;
            }
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let overrides = self.clone();
                runtime.spawn(async move { overrides.reload_prefixes().await });
            }
            return;
        }
        self.reload_prefixes().await;
    }

    /// Reads every prefix override from Redis into the copy (unless another reload is under
    /// way, or this instance changed the copy meanwhile).
    pub(crate) async fn reload_prefixes(&self) {
        let cache = &self.prefixes;
        let Ok(_reloading) = cache.reloading.try_lock() else {
            return;
        };
        let now_us = self.clock.now_us();
        if cache.fresh(now_us) {
            return;
        }
        let generation = cache.copy.read().generation;
        let loaded = self.load_prefixes(now_us).await;
        let mut copy = cache.copy.write();
        match loaded {
            Ok(table) if copy.generation == generation => copy.table = table,
            // Changed here meanwhile: what was read may miss the change; read again soon.
            Ok(_) => return,
            // Redis is away: keep the copy, and try again after an interval rather than on
            // every decision.
            Err(_) => {}
        }
        copy.loaded_at_us = Some(now_us);
    }

    async fn load_prefixes(&self, now_us: u64) -> Result<OverrideTable, Error> {
        let name = self.keys.prefix_overrides();
        let entries: Vec<(Vec<u8>, String)> = self.command(redis::cmd("HGETALL").arg(&name)).await?;
        let mut table = OverrideTable::default();
        for (field, value) in entries {
            let (policy, prefix) = split_field(&field).ok_or_else(|| corrupt(&field))?;
            let (algorithm, expires_at_us) = decode(&value).ok_or_else(|| corrupt(value.as_bytes()))?;
            if expires_at_us.is_some_and(|at| at <= now_us) {
                continue;
            }
            let _ = table.set(
                policy,
                OverrideTarget::Prefix(prefix.to_vec()),
                algorithm,
                expires_at_us,
                now_us,
            );
        }
        Ok(table)
    }

    /// One plain command, bounded by the store's deadline.
    async fn command<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        self.transport.command(cmd).await
    }

    fn state_name(&self, policy: &Policy, key: &[u8]) -> Vec<u8> {
        self.keys.state(policy.hash_tag(), policy.name(), key)
    }

    /// Drops every cached denial of the key here and on the other instances.
    async fn forget_denials(&self, state: &[u8]) {
        if let Some(cache) = &self.deny_cache {
            cache.remove(state);
        }
        self.transport.publish(state).await;
    }

    /// [`OverrideStore::set_override`](tollgate::OverrideStore::set_override).
    pub(crate) async fn set(&self, policy: &Policy, value: &Override) -> Result<(), Error> {
        let checked = Override::new(
            policy,
            value.target.clone(),
            value.algorithm.clone(),
            value.expires_in,
        )?;
        let now_us = self.clock.now_us();
        let expires_at_us = checked
            .expires_in
            .map(|ttl| now_us.saturating_add(ttl.as_micros() as u64));
        let encoded = encode(&checked.algorithm, expires_at_us);
        match &checked.target {
            OverrideTarget::Key(key) => {
                // Listed first, within the policy's bound: an override is never in force
                // without its line in the list, so the bound holds whatever fails after.
                let at = expires_at_us.map_or(String::new(), |at| at.to_string());
                let args = [
                    "add".to_owned(),
                    now_us.to_string(),
                    hex(key),
                    encoded.clone(),
                    at,
                    MAX_KEY_OVERRIDES.to_string(),
                ];
                let listed: Vec<u64> = self.list_call(policy, &args).await?;
                if listed.first() != Some(&1) {
                    return Err(Error::TooManyOverrides {
                        policy: policy.name().to_owned(),
                        kind: "key",
                        max: MAX_KEY_OVERRIDES,
                    });
                }
                let state = self.state_name(policy, key);
                let name = KeyNames::override_of(&state);
                let [p1, p2, p3] = params(&checked.algorithm, now_us);
                let ttl_ms = checked
                    .expires_in
                    .map_or(String::new(), |ttl| ttl.as_millis().max(1).to_string());
                let args = [
                    checked.algorithm.name().to_owned(),
                    p1,
                    p2,
                    p3,
                    encoded.clone(),
                    ttl_ms,
                ];
                self.transport
                    .call::<u64>(
                        &self.transport.scripts().set_override,
                        &[name, state.clone()],
                        &args,
                    )
                    .await?;
                self.forget_denials(&state).await;
            }
            OverrideTarget::Prefix(prefix) => {
                let hash = self.keys.prefix_overrides();
                let field = join_field(policy.name(), prefix);
                let own = join_field(policy.name(), b"");
                let args = [
                    hex(&field),
                    encoded.clone(),
                    String::from_utf8_lossy(&own).into_owned(),
                    MAX_PREFIX_OVERRIDES.to_string(),
                    now_us.to_string(),
                ];
                let set: Vec<u64> = self
                    .transport
                    .call(&self.transport.scripts().override_prefix, &[hash], &args)
                    .await?;
                if set.first() != Some(&1) {
                    return Err(Error::TooManyOverrides {
                        policy: policy.name().to_owned(),
                        kind: "prefix",
                        max: MAX_PREFIX_OVERRIDES,
                    });
                }
                // Cached denials here may be of keys the prefix covers: drop them all. Other
                // instances keep theirs until their wait ends.
                if let Some(cache) = &self.deny_cache {
                    cache.clear();
                }
                self.prefixes.change(|table| {
                    let _ = table.set(
                        policy.name(),
                        checked.target.clone(),
                        checked.algorithm.clone(),
                        expires_at_us,
                        now_us,
                    );
                });
            }
        }
        Ok(())
    }

    /// [`OverrideStore::get_override`](tollgate::OverrideStore::get_override).
    pub(crate) async fn get(
        &self,
        policy: &Policy,
        target: &OverrideTarget,
    ) -> Result<Option<Override>, Error> {
        target.validate()?;
        let now_us = self.clock.now_us();
        match target {
            OverrideTarget::Key(key) => {
                let name = KeyNames::override_of(&self.state_name(policy, key));
                let encoded: Option<String> = self.command(redis::cmd("HGET").arg(&name).arg("d")).await?;
                let Some(encoded) = encoded else {
                    return Ok(None);
                };
                let ttl_ms: i64 = self.command(redis::cmd("PTTL").arg(&name)).await?;
                let (algorithm, _) = decode(&encoded).ok_or_else(|| corrupt(encoded.as_bytes()))?;
                Ok(Some(Override {
                    target: target.clone(),
                    algorithm,
                    expires_in: u64::try_from(ttl_ms).ok().map(Duration::from_millis),
                }))
            }
            OverrideTarget::Prefix(prefix) => {
                let hash = self.keys.prefix_overrides();
                let field = join_field(policy.name(), prefix);
                let value: Option<String> = self.command(redis::cmd("HGET").arg(&hash).arg(&field)).await?;
                Ok(value
                    .map(|v| decode(&v).ok_or_else(|| corrupt(v.as_bytes())))
                    .transpose()?
                    .filter(|(_, at)| at.is_none_or(|at| at > now_us))
                    .map(|(algorithm, at)| Override {
                        target: target.clone(),
                        algorithm,
                        expires_in: at.map(|at| Duration::from_micros(at - now_us)),
                    }))
            }
        }
    }

    /// One call of the listing script on `policy`'s three listing keys.
    async fn list_call<T: redis::FromRedisValue>(
        &self,
        policy: &Policy,
        args: &[String],
    ) -> Result<T, Error> {
        let name = policy.name();
        let keys = [
            self.keys.key_overrides(name),
            self.keys.key_override_order(name),
            self.keys.key_override_expiry(name),
        ];
        self.transport
            .call(&self.transport.scripts().override_keys, &keys, args)
            .await
    }

    /// [`OverrideStore::list_overrides`](tollgate::OverrideStore::list_overrides): keys from the
    /// policy's list, a page at a time in byte order (one script call, which also drops lapsed
    /// ones), then prefixes from the hash of every prefix override (one read: at most
    /// [`MAX_PREFIX_OVERRIDES`] of them are the policy's).
    pub(crate) async fn list(
        &self,
        policy: &Policy,
        after: Option<&OverrideTarget>,
        limit: usize,
    ) -> Result<OverridePage, Error> {
        let limit = limit.clamp(1, MAX_PAGE);
        let now_us = self.clock.now_us();
        let mut listed: Vec<Override> = Vec::with_capacity(limit + 1);
        if !matches!(after, Some(OverrideTarget::Prefix(_))) {
            let from = match after {
                Some(OverrideTarget::Key(key)) => hex(key),
                _ => String::new(),
            };
            let args = [
                "page".to_owned(),
                now_us.to_string(),
                from,
                (limit + 1).to_string(),
            ];
            let flat: Vec<Vec<u8>> = self.list_call(policy, &args).await?;
            for pair in flat.chunks_exact(2) {
                let text = std::str::from_utf8(&pair[1]).map_err(|_| corrupt(&pair[1]))?;
                let (algorithm, at) = decode(text).ok_or_else(|| corrupt(&pair[1]))?;
                listed.push(Override {
                    target: OverrideTarget::Key(pair[0].clone()),
                    algorithm,
                    expires_in: at.map(|at| Duration::from_micros(at.saturating_sub(now_us))),
                });
            }
        }
        if listed.len() <= limit {
            let prefixes = self.load_prefixes(now_us).await?;
            let after = match after {
                Some(prefix @ OverrideTarget::Prefix(_)) => Some(prefix),
                _ => None,
            };
            let page = prefixes.page(policy.name(), after, limit + 1 - listed.len(), now_us);
            listed.extend(page.overrides);
        }
        let more = listed.len() > limit;
        listed.truncate(limit);
        Ok(OverridePage {
            next: more.then(|| listed.last().map(|o| o.target.clone())).flatten(),
            overrides: listed,
        })
    }

    /// [`OverrideStore::remove_override`](tollgate::OverrideStore::remove_override).
    pub(crate) async fn remove(&self, policy: &Policy, target: &OverrideTarget) -> Result<bool, Error> {
        target.validate()?;
        match target {
            OverrideTarget::Key(key) => {
                let state = self.state_name(policy, key);
                let removed: u64 = self
                    .command(redis::cmd("DEL").arg(KeyNames::override_of(&state)))
                    .await?;
                let args = ["remove".to_owned(), self.clock.now_us().to_string(), hex(key)];
                self.list_call::<Vec<u64>>(policy, &args).await?;
                self.forget_denials(&state).await;
                Ok(removed > 0)
            }
            OverrideTarget::Prefix(prefix) => {
                let hash = self.keys.prefix_overrides();
                // Removing a lapsed override removes nothing that was in force.
                let live = self.get(policy, target).await?.is_some();
                let field = join_field(policy.name(), prefix);
                self.command::<u64>(redis::cmd("HDEL").arg(&hash).arg(&field))
                    .await?;
                let now_us = self.clock.now_us();
                self.prefixes.change(|table| {
                    table.remove(policy.name(), target, now_us);
                });
                Ok(live)
            }
        }
    }

    /// [`OverrideStore::override_for`](tollgate::OverrideStore::override_for).
    pub(crate) async fn of_key(
        self: &Arc<Self>,
        policy: &Policy,
        key: &[u8],
    ) -> Result<Option<Override>, Error> {
        tollgate::store::validate_key(key)?;
        if let Some(exact) = self.get(policy, &OverrideTarget::key(key)).await? {
            return Ok(Some(exact));
        }
        self.refresh_prefixes().await;
        let now_us = self.clock.now_us();
        Ok(self.prefixes.find(policy, key, now_us))
    }
}

/// The prefix hash's field for (policy, prefix): the policy's length, `:`, the policy, the
/// prefix. The length makes the split exact whatever bytes either holds.
fn join_field(policy: &str, prefix: &[u8]) -> Vec<u8> {
    let mut field = format!("{}:{policy}", policy.len()).into_bytes();
    field.extend_from_slice(prefix);
    field
}

fn split_field(field: &[u8]) -> Option<(&str, &[u8])> {
    let colon = field.iter().position(|&b| b == b':')?;
    let len: usize = std::str::from_utf8(&field[..colon]).ok()?.parse().ok()?;
    let rest = &field[colon + 1..];
    let policy = std::str::from_utf8(rest.get(..len)?).ok()?;
    Some((policy, &rest[len..]))
}

/// An override as text: its expiry (µs since the Unix epoch, `-` for none) then the algorithm
/// with its parameters as given (rates as count and period, so they read back as set).
fn encode(algorithm: &Algorithm, expires_at_us: Option<u64>) -> String {
    let at = expires_at_us.map_or("-".to_owned(), |at| at.to_string());
    let rate = |r: Rate| format!("{} {}", r.count(), r.period().as_micros());
    let body = match algorithm {
        Algorithm::FixedWindow(p) => format!(
            "{} {} {}",
            p.limit(),
            p.window_us(),
            match p.anchor() {
                Anchor::Epoch => "epoch",
                Anchor::FirstHit => "first_hit",
            }
        ),
        Algorithm::SlidingLog(p) => format!("{} {}", p.limit(), p.window_us()),
        Algorithm::SlidingWindow(p) => format!("{} {}", p.limit(), p.window_us()),
        Algorithm::TokenBucket(p) => format!("{} {}", p.capacity(), rate(p.refill())),
        Algorithm::LeakyBucket(p) => format!("{} {}", p.capacity(), rate(p.leak())),
        Algorithm::Gcra(p) => format!("{} {}", rate(p.rate()), p.burst()),
        // Never stored: `Override::new` refuses calendar quotas. Written so it reads back as
        // nothing, should one ever be.
        Algorithm::CalendarQuota(p) => p.limit().to_string(),
    };
    format!("{at} {} {body}", algorithm.name())
}

/// Reads what [`encode`] wrote; `None` for anything else.
fn decode(text: &str) -> Option<(Algorithm, Option<u64>)> {
    let mut parts = text.split(' ');
    let at = match parts.next()? {
        "-" => None,
        at => Some(at.parse().ok()?),
    };
    let name = parts.next()?;
    let mut n = || -> Option<u64> { parts.next()?.parse().ok() };
    let us = Duration::from_micros;
    let algorithm = match name {
        "fixed_window" => {
            let (limit, window) = (n()?, n()?);
            let anchor = match text.rsplit(' ').next()? {
                "epoch" => Anchor::Epoch,
                "first_hit" => Anchor::FirstHit,
                _ => return None,
            };
            Algorithm::fixed_window(limit, us(window), anchor).ok()?
        }
        "sliding_log" => Algorithm::sliding_log(n()?, us(n()?)).ok()?,
        "sliding_window" => Algorithm::sliding_window(n()?, us(n()?)).ok()?,
        "token_bucket" => {
            let capacity = n()?;
            Algorithm::token_bucket(capacity, Rate::new(n()?, us(n()?)).ok()?).ok()?
        }
        "leaky_bucket" => {
            let capacity = n()?;
            Algorithm::leaky_bucket(capacity, Rate::new(n()?, us(n()?)).ok()?).ok()?
        }
        "gcra" => {
            let rate = Rate::new(n()?, us(n()?)).ok()?;
            Algorithm::gcra(rate, n()?).ok()?
        }
        _ => return None,
    };
    Some((algorithm, at))
}

/// `bytes` in lower-case hexadecimal: how a key travels to a script (arguments are text). Its
/// byte order is the bytes' order.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

fn corrupt(what: &[u8]) -> Error {
    Error::store(
        StoreErrorKind::Corrupt,
        format!(
            "override entry {:?} is not one tollgate wrote",
            String::from_utf8_lossy(what)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_reads_back_as_written() {
        let algorithms = [
            Algorithm::fixed_window(7, Duration::from_secs(60), Anchor::FirstHit).unwrap(),
            Algorithm::fixed_window(7, Duration::from_secs(60), Anchor::Epoch).unwrap(),
            Algorithm::sliding_log(5, Duration::from_millis(1500)).unwrap(),
            Algorithm::sliding_window(9, Duration::from_secs(3600)).unwrap(),
            Algorithm::token_bucket(10, Rate::new(7, Duration::from_secs(60)).unwrap()).unwrap(),
            Algorithm::leaky_bucket(3, Rate::per_second(2).unwrap()).unwrap(),
            Algorithm::gcra(Rate::per_minute(30).unwrap(), 4).unwrap(),
        ];
        for algorithm in algorithms {
            for at in [None, Some(1_700_000_000_000_000)] {
                assert_eq!(decode(&encode(&algorithm, at)), Some((algorithm.clone(), at)));
            }
        }
        assert_eq!(decode("- gcra 1"), None);
        assert_eq!(decode("x gcra 1 1000000 1"), None);
    }

    #[test]
    fn fields_split_where_they_were_joined() {
        for (policy, prefix) in [("a", &b"b:c"[..]), ("a:1", b""), ("12:x", b"3:y")] {
            assert_eq!(split_field(&join_field(policy, prefix)), Some((policy, prefix)));
        }
        assert_eq!(split_field(b"9:ab"), None);
    }
}
