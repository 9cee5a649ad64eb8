//! Allow and deny list entries kept in Redis, so that an entry added through one instance's
//! admin API applies on every instance of the fleet.
//!
//! The entries live in one small hash, `<prefix>{access-lists}` (a name no rate limit state can
//! have: see `keys`), one field per entry in [`AccessEntry::encode`]'s text, with the time it
//! was added (milliseconds since the Unix epoch, from Redis's clock) as the value, and a field
//! `bytes` with the sum of the entries' field lengths, for [`MAX_ACCESS_BYTES`]. The hash is
//! configuration rather than a counter: every write sets its TTL to the longest period tollgate
//! knows (1000 days), so it lives while it is in use. `lua/access.lua` does each operation in
//! one step, through the same breaker and deadline as decisions.
//!
//! Nothing reads the hash inside a decision: an instance compares the hash's `version` field with
//! that of its copy and, when it changed, reads the hash in pages (`HSCAN`) and applies the
//! difference; how often is the server's choice (the staleness bound it documents).

use tollgate::access::{AccessEntry, Added};
use tollgate::{Error, StoreErrorKind};

use crate::transport::Transport;

/// The most entries the hash holds: every instance compiles all of them, so their number is
/// bounded like any other memory.
///
/// ```
/// assert_eq!(tollgate_redis::MAX_ACCESS_ENTRIES, 100_000);
/// ```
pub const MAX_ACCESS_ENTRIES: usize = 100_000;

/// The most bytes the entries take together, as
/// [`AccessEntry::encoded_len`](tollgate::access::AccessEntry::encoded_len) counts them (about
/// their policy and value): 16 MiB. A value may be 8 KiB, so the count alone would let the hash
/// (and every instance's copy of it) reach 800 MB.
///
/// ```
/// assert_eq!(tollgate_redis::MAX_ACCESS_BYTES, 16 << 20);
/// ```
pub const MAX_ACCESS_BYTES: usize = 16 << 20;

/// Fields one page of a read asks for: with values of up to 8 KiB, about 1 MiB at most, well
/// within a call's deadline.
const PAGE_FIELDS: usize = 128;

/// One field of the hash and its value, as `HSCAN` answers them.
type Field = (Vec<u8>, Vec<u8>);

/// The hash `name`'s version: counted up by every add and remove, `None` before the first (or
/// for a hash written by a version that did not count).
pub(crate) async fn version(transport: &Transport, name: Vec<u8>) -> Result<Option<u64>, Error> {
    transport
        .command(redis::cmd("HGET").arg(name).arg("version"))
        .await
}

/// Every entry in the hash `name` with when it was added (ms since the Unix epoch), read in
/// pages of [`PAGE_FIELDS`] (each its own call, within the deadline; entries added or removed
/// meanwhile may be missed, as `HSCAN` says). Fields that do not decode (the counters, or
/// entries written by another version) are skipped.
pub(crate) async fn entries(transport: &Transport, name: Vec<u8>) -> Result<Vec<(AccessEntry, u64)>, Error> {
    let mut cursor = 0u64;
    let mut out = Vec::new();
    loop {
        let (next, page): (u64, Vec<Field>) = transport
            .command(
                redis::cmd("HSCAN")
                    .arg(&name)
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(PAGE_FIELDS),
            )
            .await?;
        out.extend(page.into_iter().filter_map(|(field, at)| {
            let entry = AccessEntry::decode(std::str::from_utf8(&field).ok()?).ok()?;
            let at_ms = std::str::from_utf8(&at).ok()?.parse().ok()?;
            Some((entry, at_ms))
        }));
        if next == 0 {
            // HSCAN may return a field twice: keep one.
            out.sort_by(|a, b| a.0.cmp(&b.0));
            out.dedup_by(|a, b| a.0 == b.0);
            return Ok(out);
        }
        cursor = next;
    }
}

/// Adds `entry` to the hash `name` (an entry already there keeps its time), unless it holds
/// [`MAX_ACCESS_ENTRIES`] already or the entry would take it past [`MAX_ACCESS_BYTES`].
pub(crate) async fn add(transport: &Transport, name: Vec<u8>, entry: &AccessEntry) -> Result<Added, Error> {
    let args = [
        "add".to_owned(),
        entry.encode(),
        MAX_ACCESS_ENTRIES.to_string(),
        ttl_ms(),
        MAX_ACCESS_BYTES.to_string(),
    ];
    let reply: Vec<u64> = transport
        .call(&transport.scripts().access, &[name], &args)
        .await?;
    match reply[..] {
        [1, _] => Ok(Added::New),
        [0, _] => Ok(Added::AlreadyThere),
        [2, held] => Ok(Added::Full { held }),
        [3, held_bytes] => Ok(Added::TooLarge {
            held_bytes,
            max_bytes: MAX_ACCESS_BYTES as u64,
        }),
        _ => Err(Error::store(
            StoreErrorKind::Script,
            format!("unexpected reply from the access script: {reply:?}"),
        )),
    }
}

/// Removes `entry` from the hash `name`; `false` when it was not there.
pub(crate) async fn remove(transport: &Transport, name: Vec<u8>, entry: &AccessEntry) -> Result<bool, Error> {
    let args = [
        "remove".to_owned(),
        entry.encode(),
        String::new(),
        ttl_ms(),
        String::new(),
    ];
    let reply: Vec<u64> = transport
        .call(&transport.scripts().access, &[name], &args)
        .await?;
    Ok(reply.first() == Some(&1))
}

fn ttl_ms() -> String {
    tollgate::bounds::MAX_PERIOD.as_millis().to_string()
}
