//! The writer: one background thread that takes lines off the queue, hashes their keys when
//! asked, encodes and appends them, and rotates the file before a line would take it past its
//! size, so the disk the log takes is bounded whatever the traffic. Every line it cannot write
//! is counted, by reason, never retried.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};

use super::hash::KeyedHash;
use super::line::LogLine;

/// Lines dropped, by reason, and written; also in Prometheus.
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) full: AtomicU64,
    pub(super) too_long: AtomicU64,
    pub(super) io: AtomicU64,
    pub(super) written: AtomicU64,
    /// Lines queued and not yet taken by the writer.
    pub(super) queued: AtomicU64,
}

impl Counts {
    pub(super) fn drop_line(&self, reason: &'static str) {
        self.drop_lines(reason, 1);
    }

    pub(super) fn drop_lines(&self, reason: &'static str, n: u64) {
        let count = match reason {
            "full" => &self.full,
            "too_long" => &self.too_long,
            _ => &self.io,
        };
        count.fetch_add(n, Ordering::Relaxed);
        metrics::counter!("tollgate_decision_log_dropped_total", "reason" => reason).increment(n);
    }
}

/// The writer's loop: each line hashed (if asked), encoded and written; the file flushed
/// whenever the queue runs empty, so a quiet server's log is on disk within a moment.
pub(super) fn write_lines(
    receiver: &Receiver<LogLine>,
    mut file: RotatingFile,
    hash: Option<&KeyedHash>,
    counts: &Counts,
) {
    let mut buffer = Vec::with_capacity(512);
    loop {
        let mut line = match receiver.try_recv() {
            Ok(line) => line,
            Err(TryRecvError::Empty) => {
                if file.flush().is_err() {
                    counts.drop_line("io");
                }
                match receiver.recv() {
                    Ok(line) => line,
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        counts.queued.fetch_sub(1, Ordering::Relaxed);
        if let Some(hash) = hash {
            hash.hide_keys(&mut line);
        }
        buffer.clear();
        if serde_json::to_writer(&mut buffer, &line).is_err() {
            counts.drop_line("io");
            continue;
        }
        buffer.push(b'\n');
        match file.write_line(&buffer) {
            Ok(true) => {
                counts.written.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("tollgate_decision_log_lines_total").increment(1);
            }
            Ok(false) => counts.drop_line("too_long"),
            Err(err) => {
                counts.drop_line("io");
                if IO_LOG.due() {
                    tracing::warn!(error = %err, "cannot write the decision log (sampled: at most one line a minute)");
                }
            }
        }
    }
    if file.flush().is_err() {
        counts.drop_line("io");
    }
}

static IO_LOG: tollgate_tower::LogSampler =
    tollgate_tower::LogSampler::new(std::time::Duration::from_secs(60));

/// A file that is rotated before a line would take it past `max_bytes`, keeping `keep`
/// rotated files.
pub(super) struct RotatingFile {
    path: PathBuf,
    file: BufWriter<File>,
    size: u64,
    max_bytes: u64,
    keep: usize,
}

impl RotatingFile {
    pub(super) fn open(path: &Path, max_bytes: u64, keep: usize) -> io::Result<RotatingFile> {
        // A FIFO or a device would block the open or the writes; a directory cannot be written.
        if let Ok(meta) = std::fs::metadata(path)
            && !meta.is_file()
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file (a FIFO, a device or a directory): the decision log writes to a file it can rotate",
            ));
        }
        let file = create_options().append(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_owned(),
            file: BufWriter::with_capacity(64 * 1024, file),
            size,
            max_bytes,
            keep,
        })
    }

    /// Writes `line` whole; `false` when it alone is longer than a file may be.
    fn write_line(&mut self, line: &[u8]) -> io::Result<bool> {
        let len = line.len() as u64;
        if len > self.max_bytes {
            return Ok(false);
        }
        if self.size + len > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += len;
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }

    /// `PATH.{n}` becomes `PATH.{n+1}` (the last one is replaced), `PATH` becomes `PATH.1`, and
    /// a new empty `PATH` is opened.
    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        if self.keep > 0 {
            for n in (1..self.keep).rev() {
                match std::fs::rename(rotated(&self.path, n), rotated(&self.path, n + 1)) {
                    Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
                    _ => {}
                }
            }
            std::fs::rename(&self.path, rotated(&self.path, 1))?;
        } else {
            // Nothing is kept: the file is removed and made again, never truncated in place,
            // so a symlinked path loses the link, not the file it pointed to.
            match std::fs::remove_file(&self.path) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
        let file = create_options().write(true).truncate(true).open(&self.path)?;
        self.file = BufWriter::with_capacity(64 * 1024, file);
        self.size = 0;
        Ok(())
    }
}

/// How the log's files are created: readable by their owner only (mode 0600), since lines hold
/// keys (addresses, user ids) unless they are hashed.
fn create_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// `PATH.n`, the `n`th newest rotated file of `path`.
///
/// ```
/// use std::path::Path;
/// use tollgate_server::decision_log::rotated;
///
/// assert_eq!(rotated(Path::new("/var/log/decisions.jsonl"), 2), Path::new("/var/log/decisions.jsonl.2"));
/// ```
pub fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(format!(".{n}"));
    PathBuf::from(name)
}
