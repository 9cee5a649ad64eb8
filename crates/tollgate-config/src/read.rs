//! Reading one config file safely: only regular files, at most [`MAX_FILE_BYTES`], within
//! [`READ_TIMEOUT`].
//!
//! A config path is often given by a deployment tool, and a mistake must give an error, not a
//! server that hangs at start-up or on reload: a FIFO would block the open until someone writes
//! to it, `/dev/zero` would be read forever, and a file on a stalled network mount would block
//! the reader. So the file's type is checked before it is opened, the read stops one byte past
//! the cap, and the open and read run on a helper thread that the caller stops waiting for at
//! the timeout (a thread stuck in the kernel cannot be cancelled; it is left to finish and its
//! result is dropped).

use std::io::Read;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// The largest config file read: 4 MiB, far above any real config (the largest known
/// envoyproxy/ratelimit deployments are a few hundred KiB) and small enough to parse at once.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// How long opening and reading one config file may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The text of the config file at `path`, or an error saying what is wrong with it.
pub(crate) fn read_config_file(path: &Path) -> std::io::Result<String> {
    read_limited(path, MAX_FILE_BYTES, READ_TIMEOUT)
}

fn read_limited(path: &Path, max: u64, timeout: Duration) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind};
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket or device cannot be a config)",
        ));
    }
    if meta.len() > max {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("the file is {} bytes, above the maximum of {max}", meta.len()),
        ));
    }
    let (done, result) = mpsc::channel();
    let owned = path.to_owned();
    std::thread::Builder::new()
        .name("tollgate-config-read".to_owned())
        .spawn(move || {
            let read = || -> std::io::Result<Vec<u8>> {
                let mut bytes = Vec::new();
                std::fs::File::open(&owned)?
                    .take(max + 1)
                    .read_to_end(&mut bytes)?;
                Ok(bytes)
            };
            let _ = done.send(read());
        })?;
    let bytes = match result.recv_timeout(timeout) {
        Ok(read) => read?,
        Err(_) => {
            return Err(Error::new(
                ErrorKind::TimedOut,
                format!("reading did not finish within {timeout:?}"),
            ));
        }
    };
    if bytes.len() as u64 > max {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("the file grew past the maximum of {max} bytes while it was read"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| Error::new(ErrorKind::InvalidData, "the file is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_devices_and_oversized_files() {
        let err = read_config_file(Path::new("/dev/zero")).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'#'; 2048]).unwrap();
        let err = read_limited(&big, 1024, READ_TIMEOUT).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the file is 2048 bytes, above the maximum of 1024"
        );
        assert_eq!(read_limited(&big, 4096, READ_TIMEOUT).unwrap().len(), 2048);
    }
}
