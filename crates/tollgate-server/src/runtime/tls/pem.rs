//! Reading the PEM files of a TLS listener: the certificate chain, the private key and the
//! client CA. Each error names the file and says what is wrong with it, because a TLS mistake
//! otherwise only shows as handshakes failing later, far from its cause.
//!
//! Files are read with limits, as config files are: only regular files (a FIFO would block the
//! read forever) and at most [`MAX_PEM_BYTES`] (a certificate bundle is kilobytes).

use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::{TlsError, TlsSetting};

/// The largest PEM file read: far above any certificate chain or CA bundle in use.
pub(super) const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// The bytes of the file `setting` names, if it is a regular file of a sane size.
fn read(setting: TlsSetting, path: &Path) -> Result<Vec<u8>, TlsError> {
    let unreadable = |error: std::io::Error| TlsError::Read {
        setting,
        path: path.to_path_buf(),
        error,
    };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if !meta.is_file() {
        return Err(TlsError::unusable(setting, path, "not a regular file"));
    }
    if meta.len() > MAX_PEM_BYTES {
        return Err(TlsError::unusable(
            setting,
            path,
            format!(
                "{} bytes, more than a PEM file of certificates or keys holds (at most {MAX_PEM_BYTES})",
                meta.len()
            ),
        ));
    }
    std::fs::read(path).map_err(unreadable)
}

/// The certificates of a PEM file, in order (for a chain: the server's own first).
pub(super) fn certificates(
    setting: TlsSetting,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(setting, path)?;
    let mut certificates = Vec::new();
    for (i, cert) in CertificateDer::pem_slice_iter(&bytes).enumerate() {
        let cert = cert.map_err(|err| {
            TlsError::unusable(
                setting,
                path,
                format!("certificate {} is not valid PEM: {err}", i + 1),
            )
        })?;
        certificates.push(cert);
    }
    if certificates.is_empty() {
        let hint = if bytes.starts_with(&[0x30]) {
            " (it looks like DER: convert it with `openssl x509 -inform der -in FILE -out FILE.pem`)"
        } else {
            ""
        };
        return Err(TlsError::unusable(
            setting,
            path,
            format!("no certificate in it; expected `-----BEGIN CERTIFICATE-----` blocks{hint}"),
        ));
    }
    Ok(certificates)
}

/// The private key of a PEM file: PKCS#8 (`PRIVATE KEY`), PKCS#1 (`RSA PRIVATE KEY`) or SEC1
/// (`EC PRIVATE KEY`), whichever comes first.
pub(super) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(TlsSetting::Key, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|err| {
        let why = match err {
            pem::Error::NoItemsFound => {
                "no private key in it; expected a `PRIVATE KEY`, `RSA PRIVATE KEY` or \
                 `EC PRIVATE KEY` block (an encrypted key must be decrypted first)"
                    .to_owned()
            }
            err => format!("not valid PEM: {err}"),
        };
        TlsError::unusable(TlsSetting::Key, path, why)
    })
}

/// The client CA bundle: every certificate in it becomes a trust anchor.
pub(super) fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for (i, cert) in certificates(TlsSetting::ClientCa, path)?.into_iter().enumerate() {
        roots.add(cert).map_err(|err| {
            TlsError::unusable(
                TlsSetting::ClientCa,
                path,
                format!("certificate {} is not a usable CA certificate: {err}", i + 1),
            )
        })?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(contents: &[u8]) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), contents).expect("write");
        file
    }

    #[test]
    fn each_error_names_the_file_and_the_fault() {
        let missing = Path::new("/nonexistent/tls.crt");
        let err = certificates(TlsSetting::Cert, missing).unwrap_err().to_string();
        assert!(
            err.starts_with("certificate /nonexistent/tls.crt: cannot read it: "),
            "{err}"
        );

        let text = file(b"hello\n");
        let err = certificates(TlsSetting::Cert, text.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("no certificate in it"), "{err}");
        assert!(err.contains(&text.path().display().to_string()), "{err}");

        let der = file(&[0x30, 0x82, 0x01, 0x0a]);
        let err = certificates(TlsSetting::ClientCa, der.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("client CA ") && err.contains("looks like DER"),
            "{err}"
        );

        let err = private_key(text.path()).unwrap_err().to_string();
        assert!(
            err.starts_with("key ") && err.contains("no private key in it"),
            "{err}"
        );

        let dir = tempfile::tempdir().expect("dir");
        let err = private_key(dir.path()).unwrap_err().to_string();
        assert!(err.ends_with("not a regular file"), "{err}");
    }

    #[test]
    fn keys_are_read_in_every_encoding() {
        let key = rcgen::KeyPair::generate().expect("key");
        let pkcs8 = file(key.serialize_pem().as_bytes());
        assert!(matches!(private_key(pkcs8.path()), Ok(PrivateKeyDer::Pkcs8(_))));
        // The same DER under the two older labels is read by label; the bytes are checked when
        // the key is loaded, not here.
        let relabel = |label: &str| file(key.serialize_pem().replace("PRIVATE KEY", label).as_bytes());
        let pkcs1 = relabel("RSA PRIVATE KEY");
        assert!(matches!(private_key(pkcs1.path()), Ok(PrivateKeyDer::Pkcs1(_))));
        let sec1 = relabel("EC PRIVATE KEY");
        assert!(matches!(private_key(sec1.path()), Ok(PrivateKeyDer::Sec1(_))));
    }
}
