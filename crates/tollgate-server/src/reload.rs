//! Reloading the limits while serving: on SIGHUP, and when the config's files change.
//!
//! The watcher watches the config's *directory* (a file's parent, or the directory itself),
//! because Kubernetes ConfigMaps update by swapping a `..data` symlink, which reports an event on
//! the directory and none on the file. Events come in bursts (an editor writes, renames, touches),
//! so they are debounced, and the files are hashed so a burst that changes nothing reloads
//! nothing. A broken config is rejected with a log line and a metric, and the previous limits
//! keep serving; counters live in the store, so they survive every reload.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::metrics;
use crate::state::SharedState;

/// How long the files must be quiet before a change is reloaded.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// Loads `path` and swaps it in, or keeps the current limits if it is broken. Returns whether
/// the new limits are being served.
pub fn reload(state: &SharedState, path: &Path) -> bool {
    match tollgate_config::load_with(path, &state.settings.load) {
        Ok(limits) => {
            state.limits.store(Arc::new(limits));
            metrics::config_reload(true);
            println!("tollgate: reloaded {}", path.display());
            true
        }
        Err(err) => {
            metrics::config_reload(false);
            eprintln!("tollgate: reload rejected, still serving the previous config: {err}");
            false
        }
    }
}

/// Starts listening for SIGHUP and returns the task that reloads on each one. The handler is in
/// place when this returns (a SIGHUP before it would end the process).
#[cfg(unix)]
pub fn on_sighup(state: SharedState, path: PathBuf) -> Option<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())
        .map_err(|err| eprintln!("tollgate: cannot listen for SIGHUP ({err}); reload on file change only"))
        .ok()?;
    Some(async move {
        while hangups.recv().await.is_some() {
            reload(&state, &path);
        }
    })
}

/// Starts watching the config's files and returns the task that reloads them on change, for as
/// long as the server runs. The watch is in place when this returns, so no change made after it
/// is missed; `None` (with a log line) when the directory cannot be watched.
pub fn on_change(state: SharedState, path: PathBuf) -> Option<impl Future<Output = ()> + Send + 'static> {
    let (events, mut changed) = mpsc::unbounded_channel();
    let watched = if path.is_dir() {
        path.clone()
    } else {
        path.parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    };
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = events.send(());
        }
    });
    let mut watcher = watcher
        .and_then(|mut watcher| {
            watcher
                .watch(&watched, RecursiveMode::NonRecursive)
                .map(|()| watcher)
        })
        .map_err(|err| {
            eprintln!(
                "tollgate: cannot watch {}: {err}; reload on SIGHUP only",
                watched.display()
            )
        })
        .ok()?;
    let mut served = fingerprint(&path);
    Some(async move {
        while changed.recv().await.is_some() {
            // Wait for the burst to end.
            while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, changed.recv()).await {}
            let now = fingerprint(&path);
            if now != served {
                served = now;
                reload(&state, &path);
            }
        }
        // Keeps the watch alive for as long as events are read.
        let _ = watcher.unwatch(&watched);
    })
}

/// A hash of the config's bytes (every file of a directory, by name), to skip reloads that
/// would change nothing. Unreadable files hash as absent; loading reports them.
fn fingerprint(path: &Path) -> u64 {
    let mut hasher = DefaultHasher::new();
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        files.sort();
        for file in files {
            file.hash(&mut hasher);
            std::fs::read(&file).ok().hash(&mut hasher);
        }
    } else {
        std::fs::read(path).ok().hash(&mut hasher);
    }
    hasher.finish()
}
