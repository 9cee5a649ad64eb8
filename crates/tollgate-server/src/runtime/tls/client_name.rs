//! The name a client certificate must carry (envoyproxy/ratelimit's `GRPC_CLIENT_TLS_SAN`).
//!
//! Verifying a client certificate against a CA says only that the CA issued it; when one CA
//! issues certificates for many services, the name says which of them may call. Upstream checks
//! it as Go's `VerifyHostname` does, on the verified leaf: an IP address against the IP SANs, a
//! DNS name against the DNS SANs, case-insensitively, a `*.` wildcard in the certificate matching
//! one leftmost label; the subject's common name is not consulted. webpki's name check, the one
//! rustls applies to server certificates, does the same, so [`RequireName`] runs it on the client
//! certificate after the CA check.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::client::verify_server_name;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// A client certificate verifier that also requires `name` among the certificate's subject
/// alternative names.
#[derive(Debug)]
pub(super) struct RequireName {
    inner: Arc<dyn ClientCertVerifier>,
    name: ServerName<'static>,
}

impl RequireName {
    /// `inner` (the CA check), then `name`; `None` when `name` is neither a DNS name nor an IP
    /// address (an IPv6 address may come in brackets).
    pub(super) fn new(inner: Arc<dyn ClientCertVerifier>, name: &str) -> Option<Self> {
        let bare = name.trim().trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(bare).ok()?.to_owned();
        Some(RequireName { inner, name })
    }
}

impl ClientCertVerifier for RequireName {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self.inner.verify_client_cert(end_entity, intermediates, now)?;
        verify_server_name(&ParsedCertificate::try_from(end_entity)?, &self.name)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::RootCertStore;
    use rustls::server::WebPkiClientVerifier;

    struct Ca {
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
        der: CertificateDer<'static>,
    }

    fn ca() -> Ca {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let der = params.self_signed(&key).expect("CA").der().clone();
        Ca {
            issuer: rcgen::Issuer::new(params, key),
            der,
        }
    }

    fn client_cert(ca: &Ca, names: &[&str]) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "ignored.example");
        params
            .extended_key_usages
            .push(rcgen::ExtendedKeyUsagePurpose::ClientAuth);
        params
            .signed_by(&key, &ca.issuer)
            .expect("client cert")
            .der()
            .clone()
    }

    fn verifier(ca: &Ca, name: &str) -> RequireName {
        let mut roots = RootCertStore::empty();
        roots.add(ca.der.clone()).expect("root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .expect("verifier");
        RequireName::new(inner, name).expect("a name")
    }

    fn accepts(verifier: &RequireName, cert: &CertificateDer<'_>) -> bool {
        verifier.verify_client_cert(cert, &[], UnixTime::now()).is_ok()
    }

    #[test]
    fn names_match_as_go_matches_hostnames() {
        let ca = ca();
        let exact = client_cert(&ca, &["envoy.example.com"]);
        let wildcard = client_cert(&ca, &["*.example.com"]);
        let ip = client_cert(&ca, &["10.0.0.7", "::1"]);
        let cases = [
            ("envoy.example.com", &exact, true),
            ("ENVOY.Example.com", &exact, true),
            ("other.example.com", &exact, false),
            ("envoy.example.com", &wildcard, true),
            ("a.b.example.com", &wildcard, false),
            ("example.com", &wildcard, false),
            ("10.0.0.7", &ip, true),
            ("[::1]", &ip, true),
            ("10.0.0.8", &ip, false),
            // The common name is never a name to match.
            ("ignored.example", &exact, false),
        ];
        for (name, cert, expected) in cases {
            assert_eq!(accepts(&verifier(&ca, name), cert), expected, "{name}");
        }
    }

    #[test]
    fn the_ca_check_comes_first() {
        let (ours, theirs) = (ca(), ca());
        let foreign = client_cert(&theirs, &["envoy.example.com"]);
        assert!(!accepts(&verifier(&ours, "envoy.example.com"), &foreign));
    }

    #[test]
    fn a_name_that_is_no_host_name_is_refused() {
        let ca = ca();
        let inner = Arc::new(verifier(&ca, "x.example")) as Arc<dyn ClientCertVerifier>;
        for name in ["", "not a name", "*.example.com"] {
            assert!(RequireName::new(Arc::clone(&inner), name).is_none(), "{name:?}");
        }
    }
}
