//! Limits over xDS: the `--xds-*` flags (each also a `TOLLGATE_XDS_*` variable) and upstream's
//! `CONFIG_TYPE=GRPC_XDS_SOTW` variables, which Envoy Gateway sets on the rate limit Deployment
//! it creates. A flag wins over upstream's variable; upstream's variables apply only with
//! `CONFIG_TYPE=GRPC_XDS_SOTW`, as upstream reads them.
//!
//! | upstream variable | flag | default |
//! |---|---|---|
//! | `CONFIG_GRPC_XDS_SERVER_URL` | `--xds-server` | `localhost:18000` |
//! | `CONFIG_GRPC_XDS_NODE_ID` | `--xds-node-id` | `default` |
//! | `CONFIG_GRPC_XDS_NODE_METADATA` (`k=v,k=v`) | `--xds-node-metadata` | none |
//! | `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS` (`k:v,k:v`) | `--xds-header k:v` (repeated) | none |
//! | `CONFIG_GRPC_XDS_SERVER_USE_TLS` | `--xds-tls` | off |
//! | `CONFIG_GRPC_XDS_SERVER_TLS_CACERT` | `--xds-ca` | the system's roots only |
//! | `CONFIG_GRPC_XDS_CLIENT_TLS_CERT`, `_KEY` | `--xds-client-cert`, `--xds-client-key` | none |
//! | `CONFIG_GRPC_XDS_SERVER_TLS_SAN` | `--xds-server-name` | the host of the address |
//! | `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL` | checked, then unused (upstream's has no effect either) | |
//! | `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`, `_MAX_INTERVAL` | `--xds-backoff-initial`, `--xds-backoff-max` | `10s`, `60s` |
//! | `XDS_CLIENT_BACKOFF_RANDOM_FACTOR` (the multiplier) | `--xds-backoff-factor` | `0.5` |
//! | `XDS_CLIENT_BACKOFF_JITTER` | `--xds-backoff-jitter` | `true` |
//! | `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES` | `--xds-max-message-bytes` | 4 MiB |
//! | `FORCE_START_WITHOUT_INITIAL_CONFIG` | `--xds-start-without-config` | off: listen once the first push is answered |

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tollgate_server::xds::Backoff;
use tollgate_server::{XdsOptions, XdsSource, XdsTls};

use crate::env_var::{EnvError, boolean};
use crate::listener_args::duration;

/// The `--xds-*` flags.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct XdsArgs {
    /// Take the limits from this xDS management server (`host:port`), instead of a config file
    /// (as CONFIG_TYPE=GRPC_XDS_SOTW with CONFIG_GRPC_XDS_SERVER_URL, which are read too).
    #[arg(long, env = "TOLLGATE_XDS_SERVER")]
    xds_server: Option<String>,
    /// The node id the management server knows this server by [default: default].
    #[arg(long, env = "TOLLGATE_XDS_NODE_ID")]
    xds_node_id: Option<String>,
    /// The node's metadata, `key=value,key=value`.
    #[arg(long, env = "TOLLGATE_XDS_NODE_METADATA")]
    xds_node_metadata: Option<String>,
    /// A header sent on the xDS stream, `name:value` (repeat the flag for more).
    #[arg(long = "xds-header")]
    xds_headers: Vec<String>,
    /// Connect to the management server over TLS.
    #[arg(long, env = "TOLLGATE_XDS_TLS")]
    xds_tls: bool,
    /// A PEM file of CA certificates for the management server's certificate (added to the
    /// system's roots).
    #[arg(long, env = "TOLLGATE_XDS_CA")]
    xds_ca: Option<PathBuf>,
    /// The client certificate (PEM) presented to a management server that asks for one.
    #[arg(long, env = "TOLLGATE_XDS_CLIENT_CERT", requires = "xds_client_key")]
    xds_client_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, env = "TOLLGATE_XDS_CLIENT_KEY", requires = "xds_client_cert")]
    xds_client_key: Option<PathBuf>,
    /// The name the management server's certificate must carry [default: the host of
    /// --xds-server].
    #[arg(long, env = "TOLLGATE_XDS_SERVER_NAME")]
    xds_server_name: Option<String>,
    /// The first wait before reconnecting [default: 10s].
    #[arg(long, env = "TOLLGATE_XDS_BACKOFF_INITIAL", value_parser = duration)]
    xds_backoff_initial: Option<Duration>,
    /// The longest wait before reconnecting [default: 60s].
    #[arg(long, env = "TOLLGATE_XDS_BACKOFF_MAX", value_parser = duration)]
    xds_backoff_max: Option<Duration>,
    /// What each attempt multiplies the wait by [default: 0.5, so every wait is the first].
    #[arg(long, env = "TOLLGATE_XDS_BACKOFF_FACTOR", value_parser = factor)]
    xds_backoff_factor: Option<f64>,
    /// Draw each wait between the first and the computed one [default: true].
    #[arg(long, env = "TOLLGATE_XDS_BACKOFF_JITTER")]
    xds_backoff_jitter: Option<bool>,
    /// The largest push accepted, in bytes [default: 4 MiB].
    #[arg(long, env = "TOLLGATE_XDS_MAX_MESSAGE_BYTES")]
    xds_max_message_bytes: Option<usize>,
    /// Listen at once, with no limits until the first push, instead of after it (as
    /// FORCE_START_WITHOUT_INITIAL_CONFIG=true, which is read too).
    #[arg(long, env = "TOLLGATE_XDS_START_WITHOUT_CONFIG")]
    xds_start_without_config: bool,
}

impl XdsArgs {
    /// The xDS source the flags and upstream's variables (`upstream`, from the environment) ask
    /// for; `None` when neither names a server.
    pub(crate) fn source(&self, upstream: Option<XdsSource>) -> Result<Option<XdsSource>, String> {
        let Some(mut source) = (match (&self.xds_server, upstream) {
            (Some(server), Some(mut upstream)) => {
                upstream.options.server.clone_from(server);
                Some(upstream)
            }
            (Some(server), None) => Some(XdsSource {
                options: XdsOptions::new(server.clone(), "default"),
                start_without_config: false,
            }),
            (None, upstream) => upstream,
        }) else {
            return Ok(None);
        };
        let options = &mut source.options;
        if let Some(id) = &self.xds_node_id {
            options.node_id.clone_from(id);
        }
        if let Some(metadata) = &self.xds_node_metadata {
            options.node_metadata = node_metadata(metadata);
        }
        for header in &self.xds_headers {
            let (name, value) = header
                .split_once(':')
                .ok_or_else(|| format!("--xds-header {header:?}: expected name:value"))?;
            options.headers.push((name.to_owned(), value.to_owned()));
        }
        let tls_asked = self.xds_tls
            || self.xds_ca.is_some()
            || self.xds_client_cert.is_some()
            || self.xds_server_name.is_some();
        if tls_asked {
            let tls = options.tls.get_or_insert_with(XdsTls::new);
            if self.xds_ca.is_some() {
                tls.ca.clone_from(&self.xds_ca);
            }
            if self.xds_client_cert.is_some() {
                tls.client_cert.clone_from(&self.xds_client_cert);
                tls.client_key.clone_from(&self.xds_client_key);
            }
            if self.xds_server_name.is_some() {
                tls.server_name.clone_from(&self.xds_server_name);
            }
        }
        let backoff = &mut options.backoff;
        if let Some(initial) = self.xds_backoff_initial {
            backoff.initial = initial;
        }
        if let Some(max) = self.xds_backoff_max {
            backoff.max = max;
        }
        if let Some(factor) = self.xds_backoff_factor {
            backoff.factor = factor;
        }
        if let Some(jitter) = self.xds_backoff_jitter {
            backoff.jitter = jitter;
        }
        if self.xds_max_message_bytes.is_some() {
            options.max_message_bytes = self.xds_max_message_bytes;
        }
        source.start_without_config |= self.xds_start_without_config;
        Ok(Some(source))
    }
}

/// Upstream's xDS variables, read when `CONFIG_TYPE=GRPC_XDS_SOTW`.
pub(crate) fn from_env(get: &impl Fn(&str) -> Option<String>) -> Result<XdsSource, EnvError> {
    let server = get("CONFIG_GRPC_XDS_SERVER_URL").unwrap_or_else(|| "localhost:18000".to_owned());
    let node_id = get("CONFIG_GRPC_XDS_NODE_ID").unwrap_or_else(|| "default".to_owned());
    let mut options = XdsOptions::new(server, node_id);
    if let Some(metadata) = get("CONFIG_GRPC_XDS_NODE_METADATA") {
        options.node_metadata = node_metadata(&metadata);
    }
    if let Some(headers) = get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
        for pair in headers.split(',') {
            match pair.split(':').collect::<Vec<_>>()[..] {
                [name, value] => options.headers.push((name.to_owned(), value.to_owned())),
                _ => {
                    return Err(EnvError::new(
                        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
                        &headers,
                        "expected name:value pairs separated by commas",
                    ));
                }
            }
        }
    }
    if let Some(interval) = get("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL") {
        env_duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", &interval)?;
    }
    if boolean(
        "CONFIG_GRPC_XDS_SERVER_USE_TLS",
        get("CONFIG_GRPC_XDS_SERVER_USE_TLS"),
    )? {
        let mut tls = XdsTls::new();
        tls.ca = get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT").map(PathBuf::from);
        // Upstream sends a client certificate only when both files are named.
        if let (Some(cert), Some(key)) = (
            get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
            get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
        ) {
            tls.client_cert = Some(cert.into());
            tls.client_key = Some(key.into());
        }
        tls.server_name = get("CONFIG_GRPC_XDS_SERVER_TLS_SAN");
        options.tls = Some(tls);
    }
    let mut backoff = Backoff::default();
    if let Some(value) = get("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL") {
        backoff.initial = env_duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", &value)?;
    }
    if let Some(value) = get("XDS_CLIENT_BACKOFF_MAX_INTERVAL") {
        backoff.max = env_duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", &value)?;
    }
    if let Some(value) = get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR") {
        backoff.factor =
            factor(&value).map_err(|why| EnvError::new("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", &value, why))?;
    }
    if let Some(value) = get("XDS_CLIENT_BACKOFF_JITTER") {
        backoff.jitter = boolean("XDS_CLIENT_BACKOFF_JITTER", Some(value))?;
    }
    options.backoff = backoff;
    if let Some(value) = get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
        let bytes: usize = value.trim().parse().map_err(|_| {
            EnvError::new(
                "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
                &value,
                "expected a number of bytes",
            )
        })?;
        // Upstream's zero means gRPC's default.
        options.max_message_bytes = (bytes > 0).then_some(bytes);
    }
    Ok(XdsSource {
        options,
        start_without_config: boolean(
            "FORCE_START_WITHOUT_INITIAL_CONFIG",
            get("FORCE_START_WITHOUT_INITIAL_CONFIG"),
        )?,
    })
}

/// `k=v,k=v` as upstream reads it: split at the first `=`; an entry without one is skipped.
fn node_metadata(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|entry| entry.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// A Go duration variable (`10s`, `1m30s`, `500ms`).
fn env_duration(var: &'static str, value: &str) -> Result<Duration, EnvError> {
    duration(value).map_err(|why| EnvError::new(var, value, why))
}

/// A backoff multiplier: a positive number.
fn factor(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(factor) if factor > 0.0 && factor.is_finite() => Ok(factor),
        _ => Err("expected a positive number, like 0.5 or 2".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env_var::lookup as env;

    #[test]
    fn envoy_gateways_variables_give_an_mtls_source_that_starts_at_once() {
        let source = from_env(&env(&[
            ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ]))
        .expect("reads");
        assert!(source.start_without_config);
        assert_eq!(source.options.server, "envoy-gateway:18001");
        assert_eq!(source.options.node_id, "envoy-ratelimit");
        let tls = source.options.tls.expect("tls");
        assert_eq!(tls.ca, Some(PathBuf::from("/certs/ca.crt")));
        assert_eq!(tls.client_key, Some(PathBuf::from("/certs/tls.key")));
    }

    #[test]
    fn metadata_and_headers_are_read_as_upstream_reads_them() {
        let source = from_env(&env(&[
            ("CONFIG_GRPC_XDS_NODE_METADATA", "a=1,b=x=y,bad"),
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "k1:v1,k2:v2"),
        ]))
        .expect("reads");
        assert_eq!(
            source.options.node_metadata,
            [
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "x=y".to_owned())
            ]
        );
        assert_eq!(source.options.headers.len(), 2);
        assert_eq!(source.options.server, "localhost:18000");
        let err = from_env(&env(&[("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "k1:v1:x")])).unwrap_err();
        assert_eq!(err.var, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS");
        let err = from_env(&env(&[("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "soon")])).unwrap_err();
        assert_eq!(err.var, "XDS_CLIENT_BACKOFF_MAX_INTERVAL");
    }

    #[test]
    fn flags_win_over_upstreams_variables() {
        let upstream = from_env(&env(&[("CONFIG_GRPC_XDS_NODE_ID", "from-env")])).expect("reads");
        let args = XdsArgs {
            xds_node_id: Some("from-flag".into()),
            xds_backoff_initial: Some(Duration::from_millis(200)),
            ..XdsArgs::default()
        };
        let source = args.source(Some(upstream)).expect("valid").expect("a source");
        assert_eq!(source.options.node_id, "from-flag");
        assert_eq!(source.options.backoff.initial, Duration::from_millis(200));
        assert!(XdsArgs::default().source(None).expect("valid").is_none());
    }
}
