//! Reloading the limits while serving: on SIGHUP, and when the config's files change; and the
//! gRPC listener's TLS files the same way ([`on_tls_change`]), since certificates are rotated by
//! replacing files.
//!
//! The watcher watches the config's *directory* (a file's parent, or the directory itself),
//! because Kubernetes ConfigMaps update by swapping a `..data` symlink, which reports an event on
//! the directory and none on the file. Events come in bursts (an editor writes, renames, touches),
//! so they go through a debouncer (`notify-debouncer-full`), and the files are hashed so a burst
//! that changes nothing reloads nothing. Only events that can change a file count: opening and
//! reading files (as hashing and loading do) is ignored, so the watcher never wakes itself up.
//! A broken config is rejected with a log line and a metric, and the previous limits keep
//! serving; counters live in the store, so they survive every reload. A reload logs each policy
//! it changes and what its `on_change` does to that policy's keys (`tollgate_config::changes`):
//! a warning where keys start with a whole budget, so no change resets them silently.
//!
//! SIGHUP is caught in every mode, so it never ends the process: without a config file there is
//! nothing to reload, which is logged.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode};
use notify_debouncer_full::DebounceEventResult;
use tokio::sync::mpsc;

use tollgate_config::changes::{Keys, PolicyChange};

use crate::ops::metrics;
use crate::ops::recorder::RECORDER;
use crate::runtime::{ServerTls, SharedState};

/// How long the files must be quiet before a change is reloaded.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// The largest config file hashed; larger ones hash by their metadata (loading refuses them).
const MAX_HASHED: u64 = tollgate_config::MAX_FILE_BYTES;

/// Loads `path` and swaps it in, or keeps the current limits if it is broken. Returns whether
/// the new limits are being served.
pub fn reload(state: &SharedState, path: &Path) -> bool {
    let shown = path.display().to_string();
    apply(
        state,
        &shown,
        tollgate_config::load_with(path, &state.settings.load),
    )
}

/// Swaps in `loaded`, the limits read from `source` (a path, or `xds` for a push), or keeps the
/// current limits when it is an error: every way limits change goes through here, so each logs,
/// counts and records the same. Returns whether the new limits are being served.
pub(crate) fn apply(
    state: &SharedState,
    source: &str,
    loaded: Result<tollgate_config::Limits, tollgate_config::ConfigError>,
) -> bool {
    match loaded {
        Ok(limits) => {
            log_changes(&limits.changes_from(&state.limits.load()));
            state.limits.store(Arc::new(limits));
            state.access.apply(state.served());
            metrics::config_reload(true);
            crate::ops::statsd::config_load(true);
            RECORDER.reloaded(Ok(()));
            tracing::info!(config = %source, "config reloaded");
            true
        }
        Err(err) => {
            metrics::config_reload(false);
            crate::ops::statsd::config_load(false);
            RECORDER.reloaded(Err(err.to_string()));
            tracing::warn!(
                config = %source,
                error = %err,
                "config reload rejected; still serving the previous config"
            );
            false
        }
    }
}

/// The most policy changes a reload logs one by one; the rest are counted in one line.
const MAX_CHANGES_LOGGED: usize = 100;

/// One log line per changed policy (see the module docs), at most [`MAX_CHANGES_LOGGED`].
fn log_changes(changes: &[PolicyChange]) {
    for change in changes.iter().take(MAX_CHANGES_LOGGED) {
        let fingerprint = |f: Option<tollgate::Fingerprint>| f.map(|f| f.to_string()).unwrap_or_default();
        let (before, after) = (
            fingerprint(change.fingerprints.0),
            fingerprint(change.fingerprints.1),
        );
        let starts_fresh = matches!(change.keys, Keys::Migrated(tollgate::OnChange::Reset))
            || (change.keys == Keys::Fresh && change.before.is_some());
        if starts_fresh {
            tracing::warn!(policy = %change.name, before, after, "policy changed: {change}");
        } else {
            tracing::info!(policy = %change.name, before, after, "policy changed: {change}");
        }
    }
    if let Some(more) = changes.len().checked_sub(MAX_CHANGES_LOGGED).filter(|n| *n > 0) {
        tracing::info!(
            more,
            "{more} more policies changed; `tollgate check-config NEW --against OLD` lists them all"
        );
    }
}

/// Starts listening for SIGHUP and returns the task that reloads `path` on each one (or logs
/// that there is nothing to reload when there is no config file). The handler is in place when
/// this returns (a SIGHUP before it would end the process).
#[cfg(unix)]
pub fn on_sighup(
    state: SharedState,
    path: Option<PathBuf>,
) -> Option<impl Future<Output = ()> + Send + 'static> {
    on_hangup(move || match &path {
        Some(path) => {
            reload(&state, path);
        }
        None => tracing::info!("SIGHUP: serving the built-in demo policies; there is no config to reload"),
    })
}

/// Starts listening for SIGHUP and returns the task that calls `reload` on each one; `None`,
/// with a log line, when the signal cannot be caught.
#[cfg(unix)]
pub fn on_hangup(
    mut reload: impl FnMut() + Send + 'static,
) -> Option<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())
        .map_err(|err| tracing::warn!(error = %err, "cannot listen for SIGHUP; reload on file change only"))
        .ok()?;
    Some(async move {
        while hangups.recv().await.is_some() {
            reload();
        }
    })
}

/// Starts watching the config's files and returns the task that reloads them on change, for as
/// long as the server runs. The watch is in place when this returns, so no change made after it
/// is missed; `None` (with a log line) when the directory cannot be watched.
pub fn on_change(state: SharedState, path: PathBuf) -> Option<impl Future<Output = ()> + Send + 'static> {
    watch(path.clone(), move || {
        reload(&state, &path);
    })
}

/// Watches the config at `path` and returns the task that calls `changed` each time its bytes
/// change (debounced, compared by hash); what `tollgate serve` and `tollgate proxy` reload with.
pub fn watch(
    path: PathBuf,
    changed: impl FnMut() + Send + 'static,
) -> Option<impl Future<Output = ()> + Send + 'static> {
    watch_paths(vec![path], Watched::Config, changed)
}

/// Starts watching a listener's TLS files (certificate, key, client CA) and returns the task
/// that reloads them when their bytes change ([`ServerTls::reload`]: a broken file keeps the
/// previous ones). Like [`on_change`], the watch is in place when this returns; `None` (with a
/// log line) when a directory cannot be watched.
pub fn on_tls_change(tls: ServerTls) -> Option<impl Future<Output = ()> + Send + 'static> {
    watch_paths(tls.files().paths(), Watched::Tls, move || {
        reload_tls(&tls);
    })
}

/// Reads `tls`'s files again ([`ServerTls::reload`]) and logs the result: new connections use
/// them, or, when they cannot be used, still the previous ones. Returns whether the new files are
/// in use.
pub fn reload_tls(tls: &ServerTls) -> bool {
    let cert = tls.files().cert.display();
    match tls.reload() {
        Ok(()) => {
            tracing::info!(cert = %cert, "TLS files reloaded; new connections use them");
            true
        }
        Err(err) => {
            tracing::warn!(
                cert = %cert,
                error = %err,
                "TLS files reload rejected; new connections still use the previous ones"
            );
            false
        }
    }
}

/// What a watch is for: the config's counts in the config metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watched {
    Config,
    Tls,
}

/// Watches the directories of `paths` (each file's parent, or a directory itself) and returns
/// the task that calls `changed` each time the bytes of `paths` change.
fn watch_paths(
    paths: Vec<PathBuf>,
    watched: Watched,
    mut changed: impl FnMut() + Send + 'static,
) -> Option<impl Future<Output = ()> + Send + 'static> {
    let (events, mut bursts) = mpsc::unbounded_channel();
    let mut dirs: Vec<PathBuf> = paths.iter().map(|path| directory_of(path)).collect();
    dirs.sort();
    dirs.dedup();
    let debouncer =
        notify_debouncer_full::new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
            let Ok(batch) = result else { return };
            // Reading a file (hashing it, loading it) is an event too; only a change counts.
            if batch
                .iter()
                .any(|event| !matches!(event.kind, EventKind::Access(_)))
            {
                let _ = events.send(());
            }
        });
    let mut debouncer = match debouncer {
        Ok(debouncer) => debouncer,
        Err(err) => {
            cannot_watch(
                watched,
                dirs.first().map_or(Path::new("."), PathBuf::as_path),
                &err,
            );
            return None;
        }
    };
    for dir in &dirs {
        if let Err(err) = debouncer.watch(dir, RecursiveMode::NonRecursive) {
            cannot_watch(watched, dir, &err);
            return None;
        }
    }
    let fingerprint_all = move || {
        let mut hasher = DefaultHasher::new();
        for path in &paths {
            fingerprint(path).hash(&mut hasher);
        }
        hasher.finish()
    };
    let mut served = fingerprint_all();
    Some(async move {
        while bursts.recv().await.is_some() {
            if watched == Watched::Config {
                metrics::config_watch_event();
            }
            let now = fingerprint_all();
            if now != served {
                served = now;
                if watched == Watched::Config {
                    metrics::config_change_seen();
                }
                changed();
            }
        }
        // Keeps the watch alive for as long as events are read.
        for dir in &dirs {
            let _ = debouncer.unwatch(dir);
        }
    })
}

/// The directory watched for `path`: itself when it is one, else its parent. A directory and
/// not the file, because Kubernetes updates a ConfigMap or a Secret by swapping a `..data`
/// symlink, which reports an event on the directory and none on the file.
fn directory_of(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    }
}

/// The warning of a watch that could not start, saying what still reloads.
fn cannot_watch(watched: Watched, dir: &Path, err: &notify::Error) {
    match watched {
        Watched::Config => tracing::warn!(
            dir = %dir.display(),
            error = %err,
            "cannot watch the config directory; reload on SIGHUP only"
        ),
        Watched::Tls => tracing::warn!(
            dir = %dir.display(),
            error = %err,
            "cannot watch the TLS files' directory; they are reloaded on SIGHUP only"
        ),
    }
}

/// A hash of the config's bytes (every regular file of a directory, by name), to skip reloads
/// that would change nothing. Unreadable files hash as absent and files that are not regular
/// (a FIFO, a device) or too large are never opened; loading reports them.
fn fingerprint(path: &Path) -> u64 {
    let mut hasher = DefaultHasher::new();
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        files.sort();
        for file in files {
            file.hash(&mut hasher);
            contents(&file).hash(&mut hasher);
        }
    } else {
        contents(path).hash(&mut hasher);
    }
    hasher.finish()
}

/// A file's bytes, if it is a regular file small enough to be a config.
fn contents(path: &Path) -> Option<Vec<u8>> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_HASHED {
        return Some(format!("{:?}", (meta.len(), meta.modified().ok())).into_bytes());
    }
    std::fs::read(path).ok()
}
