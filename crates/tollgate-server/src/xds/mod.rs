//! Limits pushed over xDS, as envoyproxy/ratelimit's `CONFIG_TYPE=GRPC_XDS_SOTW` takes them:
//! the way Envoy Gateway (and Envoy AI Gateway's quota policies) configure their rate limit
//! service, with no config file at all.
//!
//! The client opens one aggregated discovery stream (`AggregatedDiscoveryService/
//! StreamAggregatedResources`, state of the world: every push carries the whole config) to the
//! management server and asks for every `ratelimit.config.ratelimit.v3.RateLimitConfig`. Each push
//! is a reload: its resources become config files (the private `resources` module) that go
//! through the same loading, validation, change log, metrics and `on_change` migrations as a file
//! reload ([`reload::apply`](crate::reload)). A push that loads is ACKed with its version; one that does
//! not is NACKed with the last accepted version and an `error_detail` naming the problem, and the
//! limits being served stay as they were. A stream that breaks keeps the limits too: the client
//! reconnects after a backoff and asks again, sending the version it holds.
//!
//! The backoff is upstream's: `initial * factor^attempt`, jittered between `initial` and that
//! when asked, clamped to `[initial, max]`; with upstream's defaults (10 s, 60 s, factor 0.5)
//! every wait is 10 s. Unlike upstream's, the attempt count starts again after a stream that
//! delivered a push, so a server restarted once an hour is not waited for at the longest delay.

pub(crate) mod resources;

use std::path::PathBuf;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use tokio::sync::{mpsc, oneshot};
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::ops::metrics;
use crate::runtime::SharedState;

/// Where and how to fetch the limits: upstream's `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*`
/// settings.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct XdsOptions {
    /// The management server, `host:port` (or a URL with its scheme).
    pub server: String,
    /// The node id the server keys its snapshots by (upstream's default `default`).
    pub node_id: String,
    /// The node's metadata, string values.
    pub node_metadata: Vec<(String, String)>,
    /// Metadata (headers) sent on the stream.
    pub headers: Vec<(String, String)>,
    /// TLS to the server, when it is on.
    pub tls: Option<XdsTls>,
    /// How long to wait between attempts.
    pub backoff: Backoff,
    /// The largest push accepted, in bytes (gRPC's default 4 MiB when `None`).
    pub max_message_bytes: Option<usize>,
}

impl XdsOptions {
    /// Options for `server` and `node_id`, with upstream's defaults for the rest.
    ///
    /// ```
    /// let options = tollgate_server::XdsOptions::new("envoy-gateway:18001", "envoy-ratelimit");
    /// assert_eq!(options.backoff.initial, std::time::Duration::from_secs(10));
    /// assert!(options.tls.is_none());
    /// ```
    pub fn new(server: impl Into<String>, node_id: impl Into<String>) -> Self {
        XdsOptions {
            server: server.into(),
            node_id: node_id.into(),
            node_metadata: Vec::new(),
            headers: Vec::new(),
            tls: None,
            backoff: Backoff::default(),
            max_message_bytes: None,
        }
    }

    /// Checks what can be checked before connecting: the headers are valid gRPC metadata and the
    /// TLS files can be read. The error names the setting.
    pub fn validate(&self) -> anyhow::Result<()> {
        for (name, value) in &self.headers {
            header(name, value)?;
        }
        if let Some(tls) = &self.tls {
            tls.config(&self.server)?;
        }
        Ok(())
    }
}

/// TLS to the management server: its CA (added to the system's roots), the name to verify it by,
/// and a client certificate when the server asks for one (mutual TLS).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct XdsTls {
    /// A PEM file of CA certificates the server's certificate may chain to.
    pub ca: Option<PathBuf>,
    /// The client certificate chain and key (PEM), sent when both are set.
    pub client_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    pub client_key: Option<PathBuf>,
    /// The name the server's certificate must carry, instead of the host of the address.
    pub server_name: Option<String>,
}

impl XdsTls {
    /// TLS with the system's roots only.
    pub fn new() -> Self {
        XdsTls::default()
    }

    fn config(&self, server: &str) -> anyhow::Result<ClientTlsConfig> {
        let read = |what: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|err| anyhow::anyhow!("xDS {what} {}: {err}", path.display()))
        };
        let mut config = ClientTlsConfig::new().with_native_roots();
        if let Some(ca) = &self.ca {
            config = config.ca_certificate(Certificate::from_pem(read("CA file", ca)?));
        }
        if let (Some(cert), Some(key)) = (&self.client_cert, &self.client_key) {
            config = config.identity(Identity::from_pem(
                read("client certificate", cert)?,
                read("client key", key)?,
            ));
        }
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => host_of(server).to_owned(),
        };
        Ok(config.domain_name(name))
    }
}

/// How long to wait before reconnecting: upstream's `XDS_CLIENT_BACKOFF_*`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Backoff {
    /// The shortest wait (and the first).
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
    /// What each attempt multiplies the wait by (upstream calls it the random factor).
    pub factor: f64,
    /// Whether each wait is drawn between `initial` and the computed one.
    pub jitter: bool,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            factor: 0.5,
            jitter: true,
        }
    }
}

impl Backoff {
    /// The wait before attempt `attempt` (0 for the first retry).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_server::xds::Backoff;
    ///
    /// let upstream = Backoff::default();
    /// assert_eq!(upstream.delay(0, 0.3), Duration::from_secs(10));
    /// assert_eq!(upstream.delay(5, 0.9), Duration::from_secs(10));
    /// let mut doubling = Backoff::default();
    /// (doubling.factor, doubling.jitter) = (2.0, false);
    /// assert_eq!(doubling.delay(1, 0.0), Duration::from_secs(20));
    /// assert_eq!(doubling.delay(9, 0.0), Duration::from_secs(60));
    /// ```
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        if self.initial >= self.max {
            return self.max;
        }
        let min = self.initial.as_secs_f64();
        let mut wait = min * self.factor.powi(i32::try_from(attempt).unwrap_or(i32::MAX));
        if self.jitter {
            wait = random * (wait - min) + min;
        }
        let wait = wait.clamp(min, self.max.as_secs_f64());
        Duration::try_from_secs_f64(wait).unwrap_or(self.max)
    }
}

/// The host part of `host:port` or of a URL, to verify the server's certificate by.
fn host_of(server: &str) -> &str {
    let rest = server.split_once("://").map_or(server, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    if let Some(bracketed) = authority.strip_prefix('[') {
        return bracketed.split(']').next().unwrap_or(bracketed);
    }
    authority.rsplit_once(':').map_or(authority, |(host, _)| host)
}

/// One stream header as gRPC metadata; the error names it.
fn header(
    name: &str,
    value: &str,
) -> anyhow::Result<(
    MetadataKey<tonic::metadata::Ascii>,
    MetadataValue<tonic::metadata::Ascii>,
)> {
    let key = MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
        .map_err(|_| anyhow::anyhow!("xDS header {name:?}: not a valid header name"))?;
    let value = MetadataValue::try_from(value)
        .map_err(|_| anyhow::anyhow!("xDS header {name:?}: {value:?} is not a valid header value"))?;
    Ok((key, value))
}

/// Follows the management server for as long as the server runs: connects, applies each push,
/// and reconnects after a backoff whenever the stream ends. `first` is told when the first push
/// has been answered (applied or refused), for a start that waits for it.
pub(crate) async fn follow(state: SharedState, options: XdsOptions, mut first: Option<oneshot::Sender<()>>) {
    metrics::start_at_zero("tollgate_xds_pushes_total", "outcome", &["acked", "nacked"]);
    let mut accepted = String::new();
    let mut attempt = 0u32;
    loop {
        match stream(&state, &options, &mut accepted, &mut first).await {
            Ok(pushed) => {
                if pushed {
                    attempt = 0;
                }
                tracing::warn!(server = %options.server, "xDS stream closed; keeping the limits being served");
            }
            Err(err) => {
                tracing::warn!(server = %options.server, error = %err, "xDS stream failed; keeping the limits being served");
            }
        }
        metrics::xds_connected(false);
        let wait = options.backoff.delay(attempt, random_unit());
        attempt = attempt.saturating_add(1);
        tracing::info!(server = %options.server, wait_ms = wait.as_millis() as u64, "reconnecting to the xDS server");
        tokio::time::sleep(wait).await;
    }
}

/// A number in `[0, 1)` for the jitter, from the standard library's randomly keyed hasher.
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, RandomState};
    let bits = RandomState::new().hash_one(std::time::SystemTime::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// One stream: subscribe, then answer every push. Returns whether a push came, or the error that
/// ended it.
async fn stream(
    state: &SharedState,
    options: &XdsOptions,
    accepted: &mut String,
    first: &mut Option<oneshot::Sender<()>>,
) -> anyhow::Result<bool> {
    let channel = connect(options).await?;
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    if let Some(max) = options.max_message_bytes {
        client = client.max_decoding_message_size(max);
    }
    let node = node(options);
    let (requests, outbox) = mpsc::channel(4);
    // A new stream asks for the version being served, and names no nonce of the old stream.
    let subscribe = request(&node, accepted.clone(), String::new(), None);
    requests.send(subscribe).await?;
    let mut call = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(outbox));
    for (name, value) in &options.headers {
        let (key, value) = header(name, value)?;
        call.metadata_mut().insert(key, value);
    }
    let mut responses = client.stream_aggregated_resources(call).await?.into_inner();
    metrics::xds_connected(true);
    tracing::info!(server = %options.server, node = %options.node_id, "xDS stream open");
    let mut pushed = false;
    let mut refused: Option<(String, String)> = None;
    while let Some(response) = responses.message().await? {
        pushed = true;
        let verdict = if refused
            .as_ref()
            .is_some_and(|(version, _)| *version == response.version_info)
        {
            // The same version refused again (a server that resends on a NACK): answered the
            // same way without loading it again, and not at once, so the pair does not spin.
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err(refused.as_ref().map(|(_, why)| why.clone()).unwrap_or_default())
        } else {
            apply(state, &response)
        };
        let answer = match verdict {
            Ok(()) => {
                accepted.clone_from(&response.version_info);
                refused = None;
                metrics::xds_push(true);
                request(&node, accepted.clone(), response.nonce.clone(), None)
            }
            Err(why) => {
                metrics::xds_push(false);
                refused = Some((response.version_info.clone(), why.clone()));
                request(&node, accepted.clone(), response.nonce.clone(), Some(why))
            }
        };
        requests.send(answer).await?;
        if let Some(first) = first.take() {
            let _ = first.send(());
        }
    }
    Ok(pushed)
}

/// Loads a push and serves it, or says why not.
fn apply(state: &SharedState, response: &DiscoveryResponse) -> Result<(), String> {
    let source = format!("xds version {:?}", response.version_info);
    let configs = match resources::decode(&response.resources) {
        Ok(configs) => configs,
        Err(why) => {
            metrics::config_reload(false);
            crate::ops::statsd::config_load(false);
            tracing::warn!(config = %source, error = %why, "config push rejected; still serving the previous config");
            return Err(why);
        }
    };
    let loaded = tollgate_config::parse_files(&resources::files(&configs), &state.settings.load);
    let why = loaded.as_ref().err().map(ToString::to_string);
    match crate::reload::apply(state, &source, loaded) {
        true => Ok(()),
        false => Err(why.unwrap_or_default()),
    }
}

/// A channel to the management server, over TLS when asked.
async fn connect(options: &XdsOptions) -> anyhow::Result<Channel> {
    let secure = options.tls.is_some();
    let url = if options.server.contains("://") {
        options.server.clone()
    } else if secure {
        format!("https://{}", options.server)
    } else {
        format!("http://{}", options.server)
    };
    let mut endpoint = Endpoint::from_shared(url)
        .map_err(|err| anyhow::anyhow!("xDS server {:?}: {err}", options.server))?
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10));
    if let Some(tls) = &options.tls {
        endpoint = endpoint.tls_config(tls.config(&options.server)?)?;
    }
    Ok(endpoint.connect().await?)
}

/// This server as the management server sees it.
fn node(options: &XdsOptions) -> Node {
    let fields = options
        .node_metadata
        .iter()
        .map(|(name, value)| {
            let value = Value {
                kind: Some(Kind::StringValue(value.clone())),
            };
            (name.clone(), value)
        })
        .collect();
    Node {
        id: options.node_id.clone(),
        metadata: Some(Struct { fields }),
        ..Default::default()
    }
}

/// A subscription, an ACK (no error) or a NACK.
fn request(node: &Node, version: String, nonce: String, error: Option<String>) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: version,
        node: Some(node.clone()),
        type_url: resources::type_url(),
        response_nonce: nonce,
        error_detail: error.map(|message| RpcStatus {
            // INVALID_ARGUMENT: the push, not the stream, is what is wrong.
            code: 3,
            message,
            details: Vec::new(),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_an_address_is_what_its_certificate_is_checked_against() {
        assert_eq!(host_of("envoy-gateway:18001"), "envoy-gateway");
        assert_eq!(host_of("https://xds.example:443/"), "xds.example");
        assert_eq!(host_of("[::1]:18000"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }

    #[test]
    fn jitter_stays_between_the_first_wait_and_the_computed_one() {
        let growing = Backoff {
            factor: 2.0,
            ..Backoff::default()
        };
        for random in [0.0, 0.5, 0.999] {
            let wait = growing.delay(1, random);
            assert!(
                (Duration::from_secs(10)..=Duration::from_secs(20)).contains(&wait),
                "{wait:?}"
            );
        }
        let flat = Backoff {
            initial: Duration::from_secs(5),
            max: Duration::from_secs(5),
            ..Backoff::default()
        };
        assert_eq!(flat.delay(3, 0.7), Duration::from_secs(5));
    }

    #[test]
    fn bad_headers_are_named() {
        let mut options = XdsOptions::new("127.0.0.1:1", "n");
        options.headers = vec![("x-ok".into(), "v".into())];
        assert!(options.validate().is_ok());
        options.headers = vec![("bad header".into(), "v".into())];
        assert!(
            options
                .validate()
                .unwrap_err()
                .to_string()
                .contains("\"bad header\"")
        );
    }
}
