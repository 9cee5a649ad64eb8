//! The gRPC listener's TLS flags of `serve` (`--grpc-tls-cert`, `--grpc-tls-key`,
//! `--grpc-client-ca`, `--grpc-client-san`, each with a `TOLLGATE_*` variable), put together
//! with envoyproxy/ratelimit's variables (`GRPC_SERVER_USE_TLS` and the files it names, read by
//! `envoy_env`): a flag wins over the variable for the same setting.
//!
//! The combination is checked here, before anything starts, so that a client CA without TLS or a
//! client name without a CA is refused instead of quietly meaning nothing. The files themselves
//! are read by the server (`tollgate_server::ServerTls`), whose errors name the file; this module
//! adds the flag or variable that gave it ([`GrpcTls::name_error`]), so the message points at the
//! setting to fix.

use std::path::PathBuf;

use clap::Args;
use tollgate_server::{TlsError, TlsFiles, TlsSetting};

use crate::envoy_env::GrpcTlsEnv;

#[derive(Args, Debug, Clone, Default)]
pub(crate) struct GrpcTlsArgs {
    /// Serve the gRPC port (rate limit and health services) over TLS with this PEM certificate
    /// chain (with --grpc-tls-key; as GRPC_SERVER_USE_TLS=true with GRPC_SERVER_TLS_CERT, which is
    /// read too). Reloaded when the file changes.
    #[arg(
        long,
        env = "TOLLGATE_GRPC_TLS_CERT",
        value_name = "PEM",
        requires = "grpc_tls_key"
    )]
    grpc_tls_cert: Option<PathBuf>,
    /// The private key of --grpc-tls-cert, PEM: PKCS#8, PKCS#1 (RSA) or SEC1 (EC) [default:
    /// GRPC_SERVER_TLS_KEY with GRPC_SERVER_USE_TLS=true].
    #[arg(
        long,
        env = "TOLLGATE_GRPC_TLS_KEY",
        value_name = "PEM",
        requires = "grpc_tls_cert"
    )]
    grpc_tls_key: Option<PathBuf>,
    /// Require a client certificate issued by a CA of this PEM file on the TLS gRPC port
    /// [default: GRPC_CLIENT_TLS_CACERT, else Envoy Gateway's GRPC_SERVER_TLS_CA_CERT, with
    /// GRPC_SERVER_USE_TLS=true].
    #[arg(long, env = "TOLLGATE_GRPC_CLIENT_CA", value_name = "PEM")]
    grpc_client_ca: Option<PathBuf>,
    /// With --grpc-client-ca: the DNS name or IP address the client certificate must carry as a
    /// subject alternative name [default: GRPC_CLIENT_TLS_SAN].
    #[arg(long, env = "TOLLGATE_GRPC_CLIENT_SAN", value_name = "NAME")]
    grpc_client_san: Option<String>,
}

/// The gRPC listener's TLS, with the flag or variable that gave each setting.
#[derive(Debug, Clone)]
pub(crate) struct GrpcTls {
    /// What the server reads.
    pub files: TlsFiles,
    /// For each setting, the flag or variable that gave it: cert, key, client CA, client name.
    names: [&'static str; 4],
}

impl GrpcTlsArgs {
    /// The flags put together with upstream's variables (`upstream`); `None` when neither turns
    /// TLS on, an error naming the flag when a setting needs one that is missing.
    pub(crate) fn merge(&self, upstream: Option<GrpcTlsEnv>) -> Result<Option<GrpcTls>, String> {
        let pick = |flag: &Option<PathBuf>, name: &'static str, env: Option<(&'static str, PathBuf)>| {
            flag.clone().map(|path| (name, path)).or(env)
        };
        let (env_cert, env_key, env_ca, env_san) = match upstream {
            Some(env) => (
                Some(("GRPC_SERVER_TLS_CERT", env.cert)),
                Some(("GRPC_SERVER_TLS_KEY", env.key)),
                env.client_ca,
                env.client_san.map(|san| ("GRPC_CLIENT_TLS_SAN", san)),
            ),
            None => (None, None, None, None),
        };
        let cert = pick(&self.grpc_tls_cert, "--grpc-tls-cert", env_cert);
        let key = pick(&self.grpc_tls_key, "--grpc-tls-key", env_key);
        let client_ca = pick(&self.grpc_client_ca, "--grpc-client-ca", env_ca);
        let client_san = self
            .grpc_client_san
            .clone()
            .map(|san| ("--grpc-client-san", san))
            .or(env_san);
        let (Some((cert_name, cert)), Some((key_name, key))) = (cert, key) else {
            if client_ca.is_some() || client_san.is_some() {
                return Err(
                    "--grpc-client-ca and --grpc-client-san need TLS on the gRPC port: \
                            --grpc-tls-cert and --grpc-tls-key (or GRPC_SERVER_USE_TLS=true)"
                        .to_owned(),
                );
            }
            return Ok(None);
        };
        if client_san.is_some() && client_ca.is_none() {
            return Err(
                "--grpc-client-san needs --grpc-client-ca: the name is checked on a client \
                 certificate that CA verified"
                    .to_owned(),
            );
        }
        let (ca_name, client_ca) =
            client_ca.map_or(("--grpc-client-ca", None), |(name, path)| (name, Some(path)));
        let (san_name, client_name) =
            client_san.map_or(("--grpc-client-san", None), |(name, san)| (name, Some(san)));
        Ok(Some(GrpcTls {
            files: TlsFiles {
                client_ca,
                client_name,
                ..TlsFiles::new(cert, key)
            },
            names: [cert_name, key_name, ca_name, san_name],
        }))
    }
}

impl GrpcTls {
    /// `err` from the server, with a TLS fault prefixed by the flag or variable that gave the
    /// file at fault: `GRPC_SERVER_TLS_CERT: certificate /certs/tls.crt: cannot read it: ...`.
    pub(crate) fn name_error(&self, err: anyhow::Error) -> anyhow::Error {
        let Some(tls) = err.downcast_ref::<TlsError>() else {
            return err;
        };
        let [cert, key, ca, name] = self.names;
        let setting = match tls.setting() {
            TlsSetting::Cert => cert,
            TlsSetting::Key => key,
            TlsSetting::ClientCa => ca,
            TlsSetting::ClientName => name,
            _ => "gRPC TLS",
        };
        anyhow::anyhow!("{setting}: {tls}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        tls: GrpcTlsArgs,
    }

    fn flags(args: &[&str]) -> GrpcTlsArgs {
        Flags::try_parse_from(std::iter::once("tollgate").chain(args.iter().copied()))
            .expect("valid flags")
            .tls
    }

    fn upstream() -> GrpcTlsEnv {
        GrpcTlsEnv {
            cert: "/certs/tls.crt".into(),
            key: "/certs/tls.key".into(),
            client_ca: Some(("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt".into())),
            client_san: None,
        }
    }

    #[test]
    fn nothing_asked_serves_plaintext() {
        assert!(flags(&[]).merge(None).expect("fine").is_none());
    }

    #[test]
    fn flags_win_over_upstreams_variables_one_setting_at_a_time() {
        let tls = flags(&[
            "--grpc-client-ca=/mine/ca.pem",
            "--grpc-client-san=envoy.internal",
        ])
        .merge(Some(upstream()))
        .expect("fine")
        .expect("TLS on");
        assert_eq!(
            tls.files,
            TlsFiles {
                client_ca: Some("/mine/ca.pem".into()),
                client_name: Some("envoy.internal".into()),
                ..TlsFiles::new("/certs/tls.crt", "/certs/tls.key")
            }
        );
        assert_eq!(
            tls.names,
            [
                "GRPC_SERVER_TLS_CERT",
                "GRPC_SERVER_TLS_KEY",
                "--grpc-client-ca",
                "--grpc-client-san"
            ]
        );
    }

    #[test]
    fn settings_that_need_another_are_refused() {
        let err = flags(&["--grpc-client-ca=/ca.pem"]).merge(None).unwrap_err();
        assert!(err.contains("need TLS on the gRPC port"), "{err}");
        let err = flags(&[
            "--grpc-tls-cert=/c",
            "--grpc-tls-key=/k",
            "--grpc-client-san=envoy",
        ])
        .merge(None)
        .unwrap_err();
        assert!(
            err.starts_with("--grpc-client-san needs --grpc-client-ca"),
            "{err}"
        );
        let alone = Flags::try_parse_from(["tollgate", "--grpc-tls-cert=/c"]).map(|_| ());
        assert!(alone.unwrap_err().to_string().contains("--grpc-tls-key"));
    }

    #[test]
    fn a_tls_error_is_named_by_the_setting_that_gave_the_file() {
        let tls = flags(&[]).merge(Some(upstream())).expect("fine").expect("TLS on");
        let err = tollgate_server::ServerTls::load(tls.files.clone()).unwrap_err();
        let named = tls.name_error(err.into()).to_string();
        assert!(
            named.starts_with("GRPC_SERVER_TLS_CERT: certificate /certs/tls.crt: cannot read it"),
            "{named}"
        );
        let other = tls.name_error(anyhow::anyhow!("cannot listen")).to_string();
        assert_eq!(other, "cannot listen");
    }
}
