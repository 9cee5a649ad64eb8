//! TLS on a listener (the Envoy rate limit service's gRPC port, as envoyproxy/ratelimit offers it
//! with `GRPC_SERVER_USE_TLS`): the server's certificate chain and key, and optionally a client
//! CA, which then makes a verified client certificate a condition of every connection, and a
//! name that certificate must carry ([`client_name`]).
//!
//! The files are read when the server starts, where each fault is an error naming the file and
//! what is wrong with it ([`pem`]; a key that does not match the certificate too), and again on
//! [`ServerTls::reload`], which `tollgate serve` calls when the files change: certificates are
//! rotated by replacing files (Kubernetes swaps a secret's `..data` symlink), and a server that
//! kept the old ones would fail every handshake once they expire.
//!
//! Why a whole [`ServerConfig`] swapped behind an [`ArcSwap`], rather than a certificate resolver:
//! the client CA lives in the config's verifier, so one swap rotates the certificate, the key and
//! the CA together, and a handshake sees either the old set or the new one, never a mix. An
//! accepted connection takes the config current at that moment; one already open keeps the
//! session it has. A reload that fails (a half-written file, a key that does not match yet) keeps
//! the previous config (`tollgate serve` logs a warning), so a botched rotation never takes TLS
//! away.
//!
//! TLS 1.2 and 1.3 on the ring provider, ALPN `h2` (gRPC's).

mod client_name;
mod pem;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use tokio_rustls::TlsAcceptor;

use crate::ops::metrics;

/// The files (and the name) a TLS listener is set up from.
///
/// ```
/// use tollgate_server::TlsFiles;
///
/// let files = TlsFiles {
///     client_ca: Some("/certs/ca.crt".into()),
///     ..TlsFiles::new("/certs/tls.crt", "/certs/tls.key")
/// };
/// assert_eq!(files.paths().len(), 3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain, PEM: its own certificate first, then any intermediates.
    pub cert: PathBuf,
    /// The server's private key, PEM: PKCS#8 (`PRIVATE KEY`), PKCS#1 (`RSA PRIVATE KEY`) or SEC1
    /// (`EC PRIVATE KEY`).
    pub key: PathBuf,
    /// When set, every client must present a certificate issued by one of the CAs in this PEM
    /// file (mutual TLS); without one the handshake fails.
    pub client_ca: Option<PathBuf>,
    /// When set (with `client_ca`), the client certificate must also carry this DNS name or IP
    /// address among its subject alternative names (a `*.` wildcard in the certificate matches).
    pub client_name: Option<String>,
}

impl TlsFiles {
    /// Server TLS from a certificate chain and its key, without client certificates.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        TlsFiles {
            cert: cert.into(),
            key: key.into(),
            client_ca: None,
            client_name: None,
        }
    }

    /// Every file read, to watch for changes: the certificate, the key and the client CA.
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.cert.clone(), self.key.clone()];
        paths.extend(self.client_ca.clone());
        paths
    }
}

/// Which setting of [`TlsFiles`] an error is about, so a caller can name the flag or variable
/// that gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsSetting {
    /// [`TlsFiles::cert`].
    Cert,
    /// [`TlsFiles::key`].
    Key,
    /// [`TlsFiles::client_ca`].
    ClientCa,
    /// [`TlsFiles::client_name`].
    ClientName,
}

impl fmt::Display for TlsSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsSetting::Cert => "certificate",
            TlsSetting::Key => "key",
            TlsSetting::ClientCa => "client CA",
            TlsSetting::ClientName => "client name",
        })
    }
}

/// TLS files that cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read (missing, no permission).
    #[error("{setting} {}: cannot read it: {error}", path.display())]
    Read {
        /// Which file.
        setting: TlsSetting,
        /// Its path.
        path: PathBuf,
        /// Why it could not be read.
        error: std::io::Error,
    },
    /// A file was read but holds nothing usable as that setting.
    #[error("{setting} {}: {why}", path.display())]
    Unusable {
        /// Which file.
        setting: TlsSetting,
        /// Its path.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The key is not the certificate's.
    #[error("key {}: does not match the certificate {}", key.display(), cert.display())]
    KeyMismatch {
        /// The certificate chain's file.
        cert: PathBuf,
        /// The key's file.
        key: PathBuf,
    },
    /// The client name is neither a DNS name nor an IP address.
    #[error("client name {name:?}: expected a DNS name or an IP address")]
    ClientName {
        /// The name, as given.
        name: String,
    },
    /// A client name without a client CA: there would be no verified certificate to check it on.
    #[error(
        "client name {name:?}: needs a client CA; the name is checked on a client certificate the CA verified"
    )]
    NameWithoutCa {
        /// The name, as given.
        name: String,
    },
}

impl TlsError {
    fn unusable(setting: TlsSetting, path: &Path, why: impl Into<String>) -> Self {
        TlsError::Unusable {
            setting,
            path: path.to_path_buf(),
            why: why.into(),
        }
    }

    /// The setting at fault.
    ///
    /// ```
    /// use tollgate_server::{ServerTls, TlsFiles, TlsSetting};
    ///
    /// let err = ServerTls::load(TlsFiles::new("/nonexistent/tls.crt", "/nonexistent/tls.key")).unwrap_err();
    /// assert_eq!(err.setting(), TlsSetting::Cert);
    /// assert!(err.to_string().starts_with("certificate /nonexistent/tls.crt: cannot read it"));
    /// ```
    pub fn setting(&self) -> TlsSetting {
        match self {
            TlsError::Read { setting, .. } | TlsError::Unusable { setting, .. } => *setting,
            TlsError::KeyMismatch { .. } => TlsSetting::Key,
            TlsError::ClientName { .. } | TlsError::NameWithoutCa { .. } => TlsSetting::ClientName,
        }
    }
}

/// A listener's TLS: the files, and the config built from them that new handshakes use, swapped
/// whole by [`reload`](ServerTls::reload). Clones share it.
///
/// ```no_run
/// use tollgate_server::{ServerTls, TlsFiles};
///
/// # fn main() -> Result<(), tollgate_server::TlsError> {
/// let tls = ServerTls::load(TlsFiles::new("/certs/tls.crt", "/certs/tls.key"))?;
/// // ... after the files were replaced:
/// tls.reload()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ServerTls(Arc<Shared>);

struct Shared {
    files: TlsFiles,
    config: ArcSwap<ServerConfig>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.0.files)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads the files and checks them: the certificate chain, the key (which must be the
    /// certificate's), the client CA and the client name.
    pub fn load(files: TlsFiles) -> Result<ServerTls, TlsError> {
        let config = server_config(&files)?;
        Ok(ServerTls(Arc::new(Shared {
            files,
            config: ArcSwap::from_pointee(config),
        })))
    }

    /// Reads the files again: new handshakes use them, open connections keep theirs. When they
    /// cannot be used, the error says why and the previous ones stay.
    /// `tollgate_tls_reloads_total{outcome}` counts both; `tollgate serve` logs them
    /// ([`reload::reload_tls`](crate::reload::reload_tls)).
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = server_config(&self.0.files);
        metrics::tls_reload(config.is_ok());
        self.0.config.store(Arc::new(config?));
        Ok(())
    }

    /// The files it reads.
    pub fn files(&self) -> &TlsFiles {
        &self.0.files
    }

    /// The acceptor of one new connection, with the files current now.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.0.config.load_full())
    }
}

/// The config `files` describe, every fault named.
fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = certified_key(files, &provider)?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|err| TlsError::unusable(TlsSetting::Cert, &files.cert, err.to_string()))?;
    let builder = match (&files.client_ca, &files.client_name) {
        (None, Some(name)) => return Err(TlsError::NameWithoutCa { name: name.clone() }),
        (None, None) => builder.with_no_client_auth(),
        (Some(ca), name) => {
            let roots = pem::roots(ca)?;
            // Client certificates are required: this verifier allows no unauthenticated client.
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|err| TlsError::unusable(TlsSetting::ClientCa, ca, err.to_string()))?;
            let verifier = match name {
                None => verifier,
                Some(name) => Arc::new(
                    client_name::RequireName::new(verifier, name)
                        .ok_or_else(|| TlsError::ClientName { name: name.clone() })?,
                ),
            };
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(key)));
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The certificate chain with its key, checked to belong together.
fn certified_key(files: &TlsFiles, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = pem::certificates(TlsSetting::Cert, &files.cert)?;
    ParsedCertificate::try_from(&chain[0]).map_err(|err| {
        TlsError::unusable(
            TlsSetting::Cert,
            &files.cert,
            format!("its first certificate cannot be used: {err}"),
        )
    })?;
    let key = pem::private_key(&files.key)?;
    let key = provider.key_provider.load_private_key(key).map_err(|err| {
        TlsError::unusable(
            TlsSetting::Key,
            &files.key,
            format!("not a usable RSA, ECDSA (P-256, P-384) or Ed25519 key: {err}"),
        )
    })?;
    let certified = CertifiedKey::new(chain, key);
    match certified.keys_match() {
        // Unknown: the key cannot tell its public half; the handshake's signature decides.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(Arc::new(certified))
        }
        Err(_) => Err(TlsError::KeyMismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
        }),
    }
}
