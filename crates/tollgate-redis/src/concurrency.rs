//! Concurrency limits on Redis: the core's
//! [`ConcurrencyStore`](tollgate::concurrency::ConcurrencyStore) with one script call per acquire,
//! per release and per clear (`lua/concurrency.lua`, a port of `tollgate::concurrency::step`).
//!
//! A key's live leases are one sorted set (member: lease id, score: expiry in µs) under the
//! policy's hash tag, so a cluster decides each call on one node, atomically. The script drops
//! expired leases before anything else and sets the set's TTL to its last lease, so a key whose
//! holders all vanished costs nothing once their leases run out. Time is Redis's `TIME`, so every
//! instance of a fleet agrees on when a lease ends.
//!
//! Lease ids are made by the store ([`LeaseIds`](tollgate::concurrency::LeaseIds): a counter and a keyed hash of it) and sent with the
//! acquisition; two instances' ids meet with probability 2^-64, and the script refuses to
//! overwrite a live id (a `corrupt` error) rather than merge two leases into one.

use std::time::Duration;

use tollgate::Error;
use tollgate::concurrency::{Acquire, ConcurrencyPolicy, Full, InFlight, Lease, LeaseId, LeaseIds, Release};
use tollgate::store as core_store;

use crate::error::bad_reply;
use crate::keys::KeyNames;
use crate::transport::Transport;

/// [`ConcurrencyStore::acquire`](tollgate::concurrency::ConcurrencyStore::acquire): one call of
/// the script with a new id from `ids`.
pub(crate) async fn acquire(
    transport: &Transport,
    keys: &KeyNames,
    ids: &LeaseIds,
    policy: &ConcurrencyPolicy,
    key: &[u8],
) -> Result<Acquire, Error> {
    core_store::validate_key(key)?;
    let name = keys.leases(policy.hash_tag(), policy.name(), key);
    let id = ids.next();
    let args = [
        transport.script_now(),
        "acquire".to_owned(),
        id.to_string(),
        policy.max_in_flight().to_string(),
        policy.lease_timeout_us().to_string(),
    ];
    let reply: Vec<u64> = transport
        .call(&transport.scripts().concurrency, &[name], &args)
        .await?;
    let [granted, in_flight, at_us, now_us] = reply[..] else {
        return Err(bad_reply(&reply));
    };
    let wait = Duration::from_micros(at_us.saturating_sub(now_us));
    Ok(match granted {
        1 => Acquire::Granted(Lease {
            id,
            expires_in: wait,
            in_flight,
            limit: policy.max_in_flight(),
            degraded: false,
        }),
        _ => Acquire::Denied(Full {
            in_flight,
            limit: policy.max_in_flight(),
            retry_after: wait,
            degraded: false,
        }),
    })
}

/// [`ConcurrencyStore::release`](tollgate::concurrency::ConcurrencyStore::release): one call of
/// the script.
pub(crate) async fn release(
    transport: &Transport,
    keys: &KeyNames,
    policy: &ConcurrencyPolicy,
    key: &[u8],
    lease: LeaseId,
) -> Result<Release, Error> {
    core_store::validate_key(key)?;
    let name = keys.leases(policy.hash_tag(), policy.name(), key);
    let args = [transport.script_now(), "release".to_owned(), lease.to_string()];
    let reply: Vec<u64> = transport
        .call(&transport.scripts().concurrency, &[name], &args)
        .await?;
    match reply[..] {
        [1, in_flight, _] => Ok(Release::Released { in_flight }),
        [0, _, _] => Ok(Release::NotHeld),
        _ => Err(bad_reply(&reply)),
    }
}

/// [`ConcurrencyStore::clear_leases`](tollgate::concurrency::ConcurrencyStore::clear_leases):
/// one call of the script, which deletes the key's set.
pub(crate) async fn clear(
    transport: &Transport,
    keys: &KeyNames,
    policy: &ConcurrencyPolicy,
    key: &[u8],
) -> Result<u64, Error> {
    core_store::validate_key(key)?;
    let name = keys.leases(policy.hash_tag(), policy.name(), key);
    let args = [transport.script_now(), "clear".to_owned(), String::new()];
    let reply: Vec<u64> = transport
        .call(&transport.scripts().concurrency, &[name], &args)
        .await?;
    match reply[..] {
        [live, _] => Ok(live),
        _ => Err(bad_reply(&reply)),
    }
}

/// [`ConcurrencyStore::in_flight`](tollgate::concurrency::ConcurrencyStore::in_flight): one call
/// of the script, which writes nothing.
pub(crate) async fn in_flight(
    transport: &Transport,
    keys: &KeyNames,
    policy: &ConcurrencyPolicy,
    key: &[u8],
) -> Result<InFlight, Error> {
    core_store::validate_key(key)?;
    let name = keys.leases(policy.hash_tag(), policy.name(), key);
    let args = [transport.script_now(), "in_flight".to_owned()];
    let reply: Vec<u64> = transport
        .call(&transport.scripts().concurrency, &[name], &args)
        .await?;
    let [in_flight, first_us, last_us, now_us] = reply[..] else {
        return Err(bad_reply(&reply));
    };
    let after = |at_us: u64| (in_flight > 0).then(|| Duration::from_micros(at_us.saturating_sub(now_us)));
    Ok(InFlight {
        in_flight,
        limit: policy.max_in_flight(),
        next_expiry: after(first_us),
        last_expiry: after(last_us),
    })
}
