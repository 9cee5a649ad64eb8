//! envoyproxy/ratelimit's environment settings, read so that its deployment manifests start
//! tollgate unchanged: [`EnvoyEnv::from_env`] reads the variables that mean something here and
//! turns them into tollgate's options; the binary uses them where no tollgate flag (or
//! `TOLLGATE_*` variable) says otherwise.
//!
//! | variable | tollgate |
//! |---|---|
//! | `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`, `RUNTIME_APPDIRECTORY` | `--config <root>/<subdirectory>/<appdirectory>` (defaults `/srv/runtime_data/current`, empty, `config`), when any of the three is set |
//! | `RUNTIME_IGNOREDOTFILES`, `RUNTIME_WATCH_ROOT` | checked; dot files are always skipped and the directory is watched |
//! | `REDIS_URL` | `--store`: `host:port` (or a unix socket path) becomes `redis://host:port` |
//! | `REDIS_TYPE` | `single` (default), `cluster` (`REDIS_URL` lists the nodes, comma separated) or `sentinel` (`REDIS_URL` is `<master-name>,host:port,host:port`: the name the sentinels monitor the master under, then at least one sentinel), which becomes `redis+sentinel://host:port,host:port/<master-name>` |
//! | `REDIS_SOCKET_TYPE` | `tcp` or `unix`; unset, a `REDIS_URL` starting with `/` is a socket |
//! | `REDIS_AUTH` | `password` or `user:password`, put in the store URL (with `sentinel`: the master's) |
//! | `REDIS_SENTINEL_AUTH` | with `sentinel`: the sentinels' `password` or `user:password`, the URL's `sentinel_auth` |
//! | `REDIS_TLS` | `true`: `rediss://` (`rediss+cluster://` with `cluster`, `rediss+sentinel://` with `sentinel`, to the sentinels and the master) |
//! | `HOST`, `PORT` | `--http` (defaults `0.0.0.0`, `8080`, as upstream), when either is set |
//! | `GRPC_HOST`, `GRPC_PORT` | `--grpc` (defaults `0.0.0.0`, `8081`), when either is set |
//! | `DEBUG_HOST`, `DEBUG_PORT` | `--debug-addr` (default host `0.0.0.0`), when `DEBUG_PORT` is set |
//! | `SHADOW_MODE`, `QUOTA_MODE`, `MERGE_DOMAIN_CONFIG`, `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, `NEAR_LIMIT_RATIO`, `RESPONSE_DYNAMIC_METADATA`, `LIMIT_RESPONSE_HEADERS_ENABLED`, `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER` | [`Compat`] |
//! | `LOG_LEVEL` | the log level when `RUST_LOG` is not set ([`log_level`]) |
//! | `USE_STATSD`, `STATSD_*`, `STATS_FLUSH_INTERVAL`, `EXTRA_TAGS`, `DISABLE_STATS`, `USE_PROMETHEUS`, `PROMETHEUS_*`, `USE_DOG_STATSD` | statsd and the Prometheus listener (see `stats_args`) |
//! | `LOG_FORMAT` | `text` or `json`, when `--log-format` is not given (read by `main`, before the logs start) |
//! | `CONFIG_TYPE` | `FILE` (default) or `GRPC_XDS_SOTW`: the limits over xDS, with the `CONFIG_GRPC_XDS_*`, `XDS_CLIENT_*` and `FORCE_START_WITHOUT_INITIAL_CONFIG` variables (see `xds_args`); the `RUNTIME_*` directory is then unused |
//! | `GRPC_SERVER_USE_TLS` | `true`: TLS on the gRPC listener, from `GRPC_SERVER_TLS_CERT` and `GRPC_SERVER_TLS_KEY` (both required then), like `--grpc-tls-cert` and `--grpc-tls-key` |
//! | `GRPC_CLIENT_TLS_CACERT` | with TLS on: client certificates required and verified against this CA, like `--grpc-client-ca` |
//! | `GRPC_SERVER_TLS_CA_CERT` | Envoy Gateway's name for it, read the same way when `GRPC_CLIENT_TLS_CACERT` is unset (upstream does not read it, and so verifies no client certificate there) |
//! | `GRPC_CLIENT_TLS_SAN` | with a client CA: the DNS name or IP address the client certificate must carry, like `--grpc-client-san`; without a client CA it is refused |
//! | `BACKEND_TYPE`, `REDIS_PERSECOND`, `GRPC_UDS` | accepted at their defaults (`redis`, false, unset); anything else is refused, since tollgate cannot do it and would otherwise serve something else than asked |
//!
//! Every other variable of upstream's (tracing, pool sizes) is ignored, as
//! upstream ignores variables it does not know. An empty value counts as unset. A value that
//! cannot be read is an error naming the variable (`PORT=eighty: expected a port number`), so a
//! typo stops the start instead of being served around.
//!
//! The TLS variables other than `GRPC_SERVER_USE_TLS` mean nothing while it is off, as upstream
//! reads them.
//!
//! Booleans are read as Go reads them (`1`, `t`, `T`, `TRUE`, `true`, `True`, and the same for
//! false), because upstream's manifests are written for Go.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use tollgate_server::{ResponseHeaders, Settings};

use crate::env_var::{EnvError, boolean};

/// What upstream's variables ask for, in tollgate's terms; `None` where they say nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct EnvoyEnv {
    /// The config directory, from `RUNTIME_*`.
    pub config: Option<PathBuf>,
    /// The store URL, from `REDIS_*`.
    pub store: Option<String>,
    /// The HTTP address, from `HOST` and `PORT`.
    pub http: Option<SocketAddr>,
    /// The gRPC address, from `GRPC_HOST` and `GRPC_PORT`.
    pub grpc: Option<SocketAddr>,
    /// The debug address, from `DEBUG_HOST` and `DEBUG_PORT`.
    pub debug: Option<SocketAddr>,
    /// TLS on the gRPC listener, from `GRPC_SERVER_USE_TLS` and the files it names.
    pub grpc_tls: Option<GrpcTlsEnv>,
    /// The switches that change answers.
    pub compat: Compat,
    /// The limits over xDS, from `CONFIG_TYPE=GRPC_XDS_SOTW` and its variables.
    pub xds: Option<tollgate_server::XdsSource>,
    /// statsd and the Prometheus listener, from `USE_STATSD`, `USE_PROMETHEUS` and theirs.
    pub stats: crate::stats_args::Stats,
}

/// The gRPC listener's TLS as upstream's variables give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrpcTlsEnv {
    /// `GRPC_SERVER_TLS_CERT`.
    pub cert: PathBuf,
    /// `GRPC_SERVER_TLS_KEY`.
    pub key: PathBuf,
    /// The client CA and the variable that named it: `GRPC_CLIENT_TLS_CACERT`, else Envoy
    /// Gateway's `GRPC_SERVER_TLS_CA_CERT`.
    pub client_ca: Option<(&'static str, PathBuf)>,
    /// `GRPC_CLIENT_TLS_SAN`.
    pub client_san: Option<String>,
}

/// upstream's switches that change what the service answers, carried to the server, which
/// applies them to its [`Settings`] with [`Compat::apply`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Compat {
    /// `SHADOW_MODE`: every request answered `OK`, its limits decided and counted only.
    pub shadow_mode: bool,
    /// `QUOTA_MODE`: every descriptor in quota mode.
    pub quota_mode: bool,
    /// `MERGE_DOMAIN_CONFIG`: descriptors of one domain may come from several files.
    pub merge_domain_config: bool,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: a request over the limit records no charge.
    pub stop_charges_when_over: bool,
    /// `NEAR_LIMIT_RATIO` (0 < r <= 1, upstream's default 0.8): when a hit counts as near the
    /// limit in the per-descriptor statistics.
    pub near_limit_ratio: Option<f32>,
    /// `RESPONSE_DYNAMIC_METADATA`: answers carry dynamic metadata.
    pub response_dynamic_metadata: bool,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`, with the names from `LIMIT_LIMIT_HEADER`,
    /// `LIMIT_REMAINING_HEADER` and `LIMIT_RESET_HEADER` (upstream's defaults
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`).
    pub response_headers: Option<HeaderNames>,
}

/// The names of the rate limit headers an answer carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderNames {
    /// The limit (`LIMIT_LIMIT_HEADER`).
    pub limit: String,
    /// The budget left (`LIMIT_REMAINING_HEADER`).
    pub remaining: String,
    /// The seconds to the reset (`LIMIT_RESET_HEADER`).
    pub reset: String,
}

impl Compat {
    /// Turns on in `settings` what these switches ask for; a switch left off changes nothing,
    /// so a setting made another way stays.
    ///
    /// (See the tests at the bottom for an example.)
    pub(crate) fn apply(&self, settings: &mut Settings) {
        let envoy = &mut settings.envoy;
        envoy.global_shadow_mode |= self.shadow_mode;
        envoy.global_quota_mode |= self.quota_mode;
        envoy.stop_charges_when_over |= self.stop_charges_when_over;
        envoy.response_dynamic_metadata |= self.response_dynamic_metadata;
        if let Some(ratio) = self.near_limit_ratio {
            envoy.near_limit_ratio = ratio;
        }
        if let Some(names) = &self.response_headers {
            envoy.response_headers = Some(ResponseHeaders::new(
                names.limit.clone(),
                names.remaining.clone(),
                names.reset.clone(),
            ));
        }
        if self.merge_domain_config {
            settings.load = settings.load.with_merge_domains(true);
        }
    }
}

/// Upstream's default `RUNTIME_ROOT`.
const RUNTIME_ROOT: &str = "/srv/runtime_data/current";

impl EnvoyEnv {
    /// Reads the process environment.
    pub(crate) fn from_env() -> Result<Self, EnvError> {
        Self::from_lookup(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Reads the variables through `lookup` (a name to its value), so tests need no process
    /// environment.
    ///
    /// (See the tests at the bottom for an example.)
    pub(crate) fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let xds = match get("CONFIG_TYPE") {
            None => None,
            Some(kind) if kind.eq_ignore_ascii_case("FILE") => None,
            Some(kind) if kind.eq_ignore_ascii_case("GRPC_XDS_SOTW") => {
                Some(crate::xds_args::from_env(&get)?)
            }
            Some(kind) => {
                return Err(EnvError::new(
                    "CONFIG_TYPE",
                    &kind,
                    "expected FILE or GRPC_XDS_SOTW",
                ));
            }
        };
        if let Some(value) = get("BACKEND_TYPE")
            && !value.eq_ignore_ascii_case("redis")
        {
            return Err(EnvError::new("BACKEND_TYPE", &value, "only redis is supported"));
        }
        if boolean("REDIS_PERSECOND", get("REDIS_PERSECOND"))? {
            return Err(EnvError::new("REDIS_PERSECOND", "true", "not supported"));
        }
        if let Some(value) = get("GRPC_UDS") {
            return Err(EnvError::new(
                "GRPC_UDS",
                &value,
                "a unix socket listener is not supported; use GRPC_HOST and GRPC_PORT",
            ));
        }
        if let Some(level) = get("LOG_LEVEL")
            && log_level(&level).is_none()
        {
            return Err(EnvError::new(
                "LOG_LEVEL",
                &level,
                "expected trace, debug, info, warn, error, fatal or panic",
            ));
        }
        // Checked so a typo is caught; dot files are always skipped and the directory watched.
        boolean("RUNTIME_IGNOREDOTFILES", get("RUNTIME_IGNOREDOTFILES"))?;
        boolean("RUNTIME_WATCH_ROOT", get("RUNTIME_WATCH_ROOT"))?;

        let runtime = ["RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"].map(&get);
        // Over xDS the limits come from the management server: the runtime directory is unused.
        let config = (xds.is_none() && runtime.iter().any(Option::is_some)).then(|| {
            let [root, subdirectory, app] = runtime;
            let mut path = PathBuf::from(root.unwrap_or_else(|| RUNTIME_ROOT.to_owned()));
            if let Some(subdirectory) = subdirectory {
                path.push(subdirectory);
            }
            path.push(app.unwrap_or_else(|| "config".to_owned()));
            path
        });

        let near_limit_ratio = get("NEAR_LIMIT_RATIO")
            .map(|value| match value.trim().parse::<f32>() {
                Ok(ratio) if ratio > 0.0 && ratio <= 1.0 => Ok(ratio),
                _ => Err(EnvError::new(
                    "NEAR_LIMIT_RATIO",
                    &value,
                    "expected a number above 0 and at most 1, like 0.8",
                )),
            })
            .transpose()?;

        Ok(EnvoyEnv {
            config,
            store: store(&get)?,
            http: listener(&get, "HOST", "PORT", 8080, false)?,
            grpc: listener(&get, "GRPC_HOST", "GRPC_PORT", 8081, false)?,
            debug: listener(&get, "DEBUG_HOST", "DEBUG_PORT", 6070, true)?,
            grpc_tls: grpc_tls(&get)?,
            compat: Compat {
                shadow_mode: boolean("SHADOW_MODE", get("SHADOW_MODE"))?,
                quota_mode: boolean("QUOTA_MODE", get("QUOTA_MODE"))?,
                merge_domain_config: boolean("MERGE_DOMAIN_CONFIG", get("MERGE_DOMAIN_CONFIG"))?,
                stop_charges_when_over: boolean(
                    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
                    get("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"),
                )?,
                near_limit_ratio,
                response_dynamic_metadata: boolean(
                    "RESPONSE_DYNAMIC_METADATA",
                    get("RESPONSE_DYNAMIC_METADATA"),
                )?,
                response_headers: header_names(&get)?,
            },
            xds,
            stats: crate::stats_args::from_env(&get)?,
        })
    }
}

/// upstream's `LOG_LEVEL` (logrus's names, any case) as a `tracing` level filter; `None` when
/// it is not one. The binary uses it when `RUST_LOG` is not set.
///
/// (See the tests at the bottom for an example.)
pub(crate) fn log_level(value: &str) -> Option<&'static str> {
    Some(match value.trim().to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" | "fatal" | "panic" => "error",
        _ => return None,
    })
}

/// The rate limit header names when `LIMIT_RESPONSE_HEADERS_ENABLED` is on.
fn header_names(get: &impl Fn(&str) -> Option<String>) -> Result<Option<HeaderNames>, EnvError> {
    let name = |var: &'static str, default: &str| {
        let name = get(var).unwrap_or_else(|| default.to_owned());
        match header_name(&name) {
            Some(_) => Ok(name),
            None => Err(EnvError::new(var, &name, "expected an HTTP header name")),
        }
    };
    let names = HeaderNames {
        limit: name("LIMIT_LIMIT_HEADER", "RateLimit-Limit")?,
        remaining: name("LIMIT_REMAINING_HEADER", "RateLimit-Remaining")?,
        reset: name("LIMIT_RESET_HEADER", "RateLimit-Reset")?,
    };
    let enabled = boolean(
        "LIMIT_RESPONSE_HEADERS_ENABLED",
        get("LIMIT_RESPONSE_HEADERS_ENABLED"),
    )?;
    Ok(enabled.then_some(names))
}

/// `name` when it is an HTTP header name (a non-empty token), `None` otherwise.
pub(crate) fn header_name(name: &str) -> Option<&str> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    (!name.is_empty() && name.bytes().all(token)).then_some(name)
}

/// An address from a host and a port variable; with `port_required`, only when the port is set.
fn listener(
    get: &impl Fn(&str) -> Option<String>,
    host_var: &'static str,
    port_var: &'static str,
    default_port: u16,
    port_required: bool,
) -> Result<Option<SocketAddr>, EnvError> {
    let (host, port) = (get(host_var), get(port_var));
    if port.is_none() && (port_required || host.is_none()) {
        return Ok(None);
    }
    let ip = match host {
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        Some(host) if host.eq_ignore_ascii_case("localhost") => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| EnvError::new(host_var, &host, "expected an IP address like 0.0.0.0 or ::"))?,
    };
    let port = match port {
        None => default_port,
        Some(port) => port
            .trim()
            .parse()
            .map_err(|_| EnvError::new(port_var, &port, "expected a port number (0 to 65535)"))?,
    };
    Ok(Some(SocketAddr::new(ip, port)))
}

/// The store URL from `REDIS_*`; `None` without `REDIS_URL`.
fn store(get: &impl Fn(&str) -> Option<String>) -> Result<Option<String>, EnvError> {
    let Some(url) = get("REDIS_URL") else {
        return Ok(None);
    };
    let tls = boolean("REDIS_TLS", get("REDIS_TLS"))?;
    let auth = get("REDIS_AUTH").map(|auth| match auth.split_once(':') {
        Some((user, password)) => format!("{}:{}@", encode(user), encode(password)),
        None => format!(":{}@", encode(&auth)),
    });
    let auth = auth.as_deref().unwrap_or_default();
    let (cluster, sentinel) = match get("REDIS_TYPE") {
        None => (false, false),
        Some(kind) if kind.eq_ignore_ascii_case("single") => (false, false),
        Some(kind) if kind.eq_ignore_ascii_case("cluster") => (true, false),
        Some(kind) if kind.eq_ignore_ascii_case("sentinel") => (false, true),
        Some(kind) => {
            return Err(EnvError::new(
                "REDIS_TYPE",
                &kind,
                "expected single, cluster or sentinel",
            ));
        }
    };
    let unix = match get("REDIS_SOCKET_TYPE") {
        None => url.starts_with('/'),
        Some(kind) if kind.eq_ignore_ascii_case("unix") => true,
        Some(kind) if kind.eq_ignore_ascii_case("tcp") => false,
        Some(kind) => return Err(EnvError::new("REDIS_SOCKET_TYPE", &kind, "expected tcp or unix")),
    };
    if url.contains("://") {
        // Already a URL: taken as it is, like `--store`.
        return Ok(Some(url));
    }
    if sentinel {
        // upstream's form: the master's name first, then the sentinels.
        let mut parts = url.split(',').map(str::trim).filter(|part| !part.is_empty());
        let name = parts.next().filter(|name| !name.contains(':'));
        let sentinels: Vec<&str> = parts.collect();
        let Some(name) = name.filter(|_| !sentinels.is_empty()) else {
            return Err(EnvError::new(
                "REDIS_URL",
                &url,
                "expected <master-name>,host:port[,host:port...] with REDIS_TYPE=sentinel",
            ));
        };
        let sentinel_auth = get("REDIS_SENTINEL_AUTH").map(|auth| match auth.split_once(':') {
            Some((user, password)) => format!("?sentinel_auth={}:{}", encode(user), encode(password)),
            None => format!("?sentinel_auth=:{}", encode(&auth)),
        });
        let scheme = if tls { "rediss+sentinel" } else { "redis+sentinel" };
        return Ok(Some(format!(
            "{scheme}://{auth}{}/{}{}",
            sentinels.join(","),
            encode(name),
            sentinel_auth.unwrap_or_default()
        )));
    }
    if cluster {
        let nodes: Vec<&str> = url
            .split(',')
            .map(str::trim)
            .filter(|node| !node.is_empty())
            .collect();
        if nodes.is_empty() {
            return Err(EnvError::new("REDIS_URL", &url, "expected host:port,host:port"));
        }
        // The credentials once, before the node list: they apply to every node.
        let scheme = if tls { "rediss+cluster" } else { "redis+cluster" };
        return Ok(Some(format!("{scheme}://{auth}{}", nodes.join(","))));
    }
    if unix {
        if tls {
            return Err(EnvError::new(
                "REDIS_TLS",
                "true",
                "TLS over a unix socket is not supported",
            ));
        }
        return Ok(Some(format!("unix://{url}")));
    }
    if url.contains(',') || !url.contains(':') {
        return Err(EnvError::new("REDIS_URL", &url, "expected host:port"));
    }
    let scheme = if tls { "rediss" } else { "redis" };
    Ok(Some(format!("{scheme}://{auth}{url}")))
}

/// The gRPC listener's TLS when `GRPC_SERVER_USE_TLS` is on; `None` while it is off, whatever
/// the other variables say (upstream reads them only then).
fn grpc_tls(get: &impl Fn(&str) -> Option<String>) -> Result<Option<GrpcTlsEnv>, EnvError> {
    if !boolean("GRPC_SERVER_USE_TLS", get("GRPC_SERVER_USE_TLS"))? {
        return Ok(None);
    }
    let (Some(cert), Some(key)) = (get("GRPC_SERVER_TLS_CERT"), get("GRPC_SERVER_TLS_KEY")) else {
        return Err(EnvError::new(
            "GRPC_SERVER_USE_TLS",
            "true",
            "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (PEM files of the certificate chain and its key)",
        ));
    };
    let client_ca = ["GRPC_CLIENT_TLS_CACERT", "GRPC_SERVER_TLS_CA_CERT"]
        .into_iter()
        .find_map(|var| get(var).map(|path| (var, PathBuf::from(path))));
    let client_san = get("GRPC_CLIENT_TLS_SAN");
    if let (Some(san), None) = (&client_san, &client_ca) {
        return Err(EnvError::new(
            "GRPC_CLIENT_TLS_SAN",
            san,
            "needs GRPC_CLIENT_TLS_CACERT: the name is checked on a client certificate that CA verified",
        ));
    }
    Ok(Some(GrpcTlsEnv {
        cert: cert.into(),
        key: key.into(),
        client_ca,
        client_san,
    }))
}

/// Percent-encodes what is not unreserved in a URL's user part.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
