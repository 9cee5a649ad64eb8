//! Checking a CA bundle (`rediss://` with [`RedisStoreBuilder::tls_ca_pem`]) before any
//! connection. A file that is not PEM, or holds no certificate, would otherwise be accepted and
//! only show at the first TLS handshake, lazily and far from its cause, as every connection
//! failing with an unknown issuer.
//!
//! [`RedisStoreBuilder::tls_ca_pem`]: crate::RedisStoreBuilder::tls_ca_pem

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::ConnectError;

/// Checks that `pem` is a PEM bundle of one or more well-formed certificates, as the TLS
/// connections will read it; the number of certificates.
///
/// ```
/// let err = tollgate_redis::check_ca_pem(b"not a certificate").unwrap_err();
/// assert!(err.to_string().contains("no PEM certificate"), "{err}");
/// ```
pub fn check_ca_pem(pem: &[u8]) -> Result<usize, ConnectError> {
    let bad = |why: String| ConnectError::BadCa { why };
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let cert = cert.map_err(|e| bad(format!("certificate {} is not valid PEM: {e}", i + 1)))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("certificate {} is not a valid certificate: {e}", i + 1)))?;
    }
    if roots.is_empty() {
        let hint = if pem.starts_with(&[0x30]) {
            " (it looks like DER: convert it with `openssl x509 -inform der -in FILE -out FILE.pem`)"
        } else {
            ""
        };
        return Err(bad(format!(
            "no PEM certificate in it; expected `-----BEGIN CERTIFICATE-----` blocks{hint}"
        )));
    }
    Ok(roots.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem_of_a_new_ca() -> String {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).expect("certificate").pem()
    }

    #[test]
    fn a_bundle_of_certificates_is_counted() {
        let one = pem_of_a_new_ca();
        assert_eq!(check_ca_pem(one.as_bytes()).expect("one"), 1);
        let two = format!("# comment\n{one}\n{}", pem_of_a_new_ca());
        assert_eq!(check_ca_pem(two.as_bytes()).expect("two"), 2);
    }

    #[test]
    fn what_is_not_a_pem_bundle_of_certificates_is_refused() {
        let key = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIB==\n-----END PRIVATE KEY-----\n";
        let broken = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
        for (what, pem, says) in [
            ("empty", &b""[..], "no PEM certificate"),
            ("text", b"hello\n", "no PEM certificate"),
            ("a key alone", key.as_bytes(), "no PEM certificate"),
            ("DER", &[0x30, 0x82, 0x01, 0x0a][..], "looks like DER"),
            (
                "not DER inside",
                broken.as_bytes(),
                "certificate 1 is not a valid certificate",
            ),
        ] {
            let err = check_ca_pem(pem).expect_err(what).to_string();
            assert!(err.contains(says), "{what}: {err}");
        }
    }
}
