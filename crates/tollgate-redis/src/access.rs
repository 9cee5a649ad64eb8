//! Allow and deny list entries kept in Redis, so that an entry added through one instance's
//! admin API applies on every instance of the fleet.
//!
//! The entries live in one small hash, `<prefix>{access-lists}` (a name no rate limit state can
//! have: see `keys`), one field per entry in [`AccessEntry::encode`]'s text, with the time it
//! was added (milliseconds since the Unix epoch, from Redis's clock) as the value. The hash is
//! configuration rather than a counter: every write sets its TTL to the longest period tollgate
//! knows (1000 days), so it lives while it is in use. `lua/access.lua` does each operation in
//! one step, through the same breaker and deadline as decisions.
//!
//! Nothing reads the hash inside a decision: an instance reads it whole and compiles it into its
//! lists; how often is the server's choice (the staleness bound it documents).

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

/// Every entry in the hash `name` with when it was added (ms since the Unix epoch). Fields that
/// do not decode (written by another version) are skipped.
pub(crate) async fn entries(transport: &Transport, name: Vec<u8>) -> Result<Vec<(AccessEntry, u64)>, Error> {
    let flat: Vec<Vec<u8>> = transport
        .call(&transport.scripts().access, &[name], &["list".to_owned()])
        .await?;
    Ok(flat
        .chunks_exact(2)
        .filter_map(|pair| {
            let entry = AccessEntry::decode(std::str::from_utf8(&pair[0]).ok()?).ok()?;
            let at_ms = std::str::from_utf8(&pair[1]).ok()?.parse().ok()?;
            Some((entry, at_ms))
        })
        .collect())
}

/// Adds `entry` to the hash `name` (an entry already there keeps its time), unless it holds
/// [`MAX_ACCESS_ENTRIES`] already.
pub(crate) async fn add(transport: &Transport, name: Vec<u8>, entry: &AccessEntry) -> Result<Added, Error> {
    let args = [
        "add".to_owned(),
        entry.encode(),
        MAX_ACCESS_ENTRIES.to_string(),
        ttl_ms(),
    ];
    let reply: Vec<u64> = transport
        .call(&transport.scripts().access, &[name], &args)
        .await?;
    match reply[..] {
        [1, _] => Ok(Added::New),
        [0, _] => Ok(Added::AlreadyThere),
        [2, held] => Ok(Added::Full { held }),
        _ => Err(Error::store(
            StoreErrorKind::Script,
            format!("unexpected reply from the access script: {reply:?}"),
        )),
    }
}

/// Removes `entry` from the hash `name`; `false` when it was not there.
pub(crate) async fn remove(transport: &Transport, name: Vec<u8>, entry: &AccessEntry) -> Result<bool, Error> {
    let args = ["remove".to_owned(), entry.encode(), String::new(), ttl_ms()];
    let reply: Vec<u64> = transport
        .call(&transport.scripts().access, &[name], &args)
        .await?;
    Ok(reply.first() == Some(&1))
}

fn ttl_ms() -> String {
    tollgate::bounds::MAX_PERIOD.as_millis().to_string()
}
