//! Limits over xDS, through the real binary started with the environment Envoy Gateway gives
//! its rate limit Deployment (`CONFIG_TYPE=GRPC_XDS_SOTW` and its variables, TLS on the gRPC
//! port with client certificates, Redis, the Prometheus listener; paths and addresses pointed
//! at test files and loopback), against a management server in this test: a tonic aggregated
//! discovery service over mutual TLS, as Envoy Gateway's is, that records every request the
//! client sends (subscriptions, ACKs and NACKs). Envoy's calls come over mutual TLS too.
//!
//! The cases of envoyproxy/ratelimit's `test/integration/xds_sotw_integration_test.go` and of
//! its provider test, translated: the basic config's answers, a reload by push, and the
//! state-of-the-world replacement; then what upstream does not test: NACKs that keep the old
//! limits, a management server that goes away and comes back, the wait for the first push.

mod binary;

use std::collections::HashMap;
use std::pin::Pin;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use binary::{Server, TOLLGATE};
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor as ConfigDescriptor, RateLimitPolicy, RateLimitUnit,
};

const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// A snapshot: its version and resources.
type Snapshot = (String, Vec<RateLimitConfig>);

/// What the management server saw.
#[derive(Default)]
struct Seen {
    requests: Vec<DiscoveryRequest>,
    headers: Vec<HashMap<String, String>>,
}

/// The management server: serves the current snapshot on every stream, and each new one as it
/// is set.
#[derive(Clone)]
struct Management {
    snapshot: watch::Sender<Snapshot>,
    seen: Arc<Mutex<Seen>>,
    requests: mpsc::UnboundedSender<DiscoveryRequest>,
    /// Set while the server is going away: every stream ends.
    down: watch::Sender<bool>,
}

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Management {
    type StreamAggregatedResourcesStream = Responses;
    type DeltaAggregatedResourcesStream =
        Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, Status>> + Send>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let headers = request
            .metadata()
            .iter()
            .filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(key, value) => {
                    Some((key.to_string(), value.to_str().unwrap_or_default().to_owned()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        self.seen.lock().expect("seen").headers.push(headers);
        let mut inbound = request.into_inner();
        let mut snapshots = self.snapshot.subscribe();
        let mut down = self.down.subscribe();
        let seen = Arc::clone(&self.seen);
        let requests = self.requests.clone();
        let (out, outbox) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut nonce = 0u32;
            let mut subscribed = false;
            loop {
                tokio::select! {
                    request = inbound.message() => {
                        let Ok(Some(request)) = request else { break };
                        seen.lock().expect("seen").requests.push(request.clone());
                        let _ = requests.send(request);
                        if subscribed {
                            continue;
                        }
                        subscribed = true;
                    }
                    changed = snapshots.changed(), if subscribed => {
                        if changed.is_err() {
                            break;
                        }
                    }
                    _ = down.wait_for(|down| *down) => break,
                }
                let (version, configs) = snapshots.borrow_and_update().clone();
                nonce += 1;
                let response = DiscoveryResponse {
                    version_info: version,
                    resources: configs.iter().map(any).collect(),
                    type_url: TYPE_URL.into(),
                    nonce: nonce.to_string(),
                    ..Default::default()
                };
                if out.send(Ok(response)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(outbox),
        )))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented("state of the world only"))
    }
}

fn any(config: &RateLimitConfig) -> Any {
    Any {
        type_url: TYPE_URL.into(),
        value: config.encode_to_vec(),
    }
}

/// The certificates of a mutual TLS setup, as files: a CA, the management server's certificate
/// (for `xds.test` and 127.0.0.1) and the client's.
struct Certificates {
    dir: tempfile::TempDir,
    ca: String,
    /// The management server's.
    server: (String, String),
    /// Envoy's, for its calls to the rate limit service.
    envoy: (String, String),
}

impl Certificates {
    fn new() -> Self {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let signed = |names: Vec<String>| {
            let key = rcgen::KeyPair::generate().expect("key");
            let cert = rcgen::CertificateParams::new(names)
                .expect("params")
                .signed_by(&key, &issuer)
                .expect("signed");
            (cert.pem(), key.serialize_pem())
        };
        let server = signed(vec!["xds.test".into(), "127.0.0.1".into()]);
        // tollgate's own, as Envoy Gateway mounts it: the gRPC port's certificate and the xDS
        // client's both.
        let client = signed(vec!["envoy-ratelimit".into(), "localhost".into()]);
        let envoy = signed(vec!["envoy".into()]);
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("ca.crt"), ca.pem()).expect("write");
        std::fs::write(dir.path().join("tls.crt"), &client.0).expect("write");
        std::fs::write(dir.path().join("tls.key"), &client.1).expect("write");
        std::fs::write(dir.path().join("statsd-conf.yaml"), "mappings: []\n").expect("write");
        Certificates {
            dir,
            ca: ca.pem(),
            server,
            envoy,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }
}

/// A running management server.
struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    down: watch::Sender<bool>,
}

impl Running {
    /// Ends every stream and stops serving.
    async fn stop(mut self) {
        self.down.send_replace(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // The server's tasks end with the runtime's; the stream tasks end when their clients go.
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.task).await;
    }
}

/// Serves `management` on `listener` over mutual TLS.
fn serve(management: &Management, certificates: &Certificates, listener: tokio::net::TcpListener) -> Running {
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(&certificates.server.0, &certificates.server.1))
        .client_ca_root(Certificate::from_pem(&certificates.ca));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    management.down.send_replace(false);
    let service = AggregatedDiscoveryServiceServer::new(management.clone());
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .tls_config(tls)
            .expect("tls")
            .add_service(service)
            .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener), async {
                let _ = stopped.await;
            })
            .await
            .expect("management server");
    });
    Running {
        stop: Some(stop),
        task,
        down: management.down.clone(),
    }
}

fn limited(key: &str, value: &str, unit: RateLimitUnit, requests_per_unit: u32) -> ConfigDescriptor {
    ConfigDescriptor {
        key: key.into(),
        value: value.into(),
        rate_limit: Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn config(name: &str, descriptors: Vec<ConfigDescriptor>) -> RateLimitConfig {
    RateLimitConfig {
        name: name.into(),
        domain: name.into(),
        descriptors,
    }
}

/// upstream's initial snapshot: `basic` and `another`.
fn initial() -> Vec<RateLimitConfig> {
    vec![
        config(
            "basic",
            vec![
                limited("key1", "", RateLimitUnit::Second, 50),
                limited("one_per_minute", "", RateLimitUnit::Minute, 1),
            ],
        ),
        config(
            "another",
            vec![
                limited("key2", "", RateLimitUnit::Minute, 20),
                limited("key3", "", RateLimitUnit::Hour, 10),
                limited("key4", "", RateLimitUnit::Day, 20),
            ],
        ),
    ]
}

/// upstream's pushed `reload` domain.
fn reload_domain() -> RateLimitConfig {
    config(
        "reload",
        vec![
            limited("key1", "", RateLimitUnit::Second, 50),
            limited("block", "", RateLimitUnit::Second, 0),
        ],
    )
}

fn ask(domain: &str, entries: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: entries
            .iter()
            .map(|(key, value)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: (*key).into(),
                    value: (*value).into(),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

async fn call(
    rls: &mut RateLimitServiceClient<tonic::transport::Channel>,
    domain: &str,
    entries: &[(&str, &str)],
) -> RateLimitResponse {
    rls.should_rate_limit(ask(domain, entries))
        .await
        .expect("answered")
        .into_inner()
}

/// The next request the client sends, within a bound.
async fn next(requests: &mut mpsc::UnboundedReceiver<DiscoveryRequest>) -> DiscoveryRequest {
    tokio::time::timeout(Duration::from_secs(30), requests.recv())
        .await
        .expect("the client answered within 30 s")
        .expect("the management server runs")
}

/// A client of the rate limit service over mutual TLS, as Envoy Gateway's Envoy calls it.
async fn rls_client(
    grpc: &str,
    certificates: &Certificates,
) -> RateLimitServiceClient<tonic::transport::Channel> {
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&certificates.ca))
        .identity(Identity::from_pem(&certificates.envoy.0, &certificates.envoy.1))
        .domain_name("localhost");
    let channel = tonic::transport::Endpoint::from_shared(grpc.replace("http://", "https://"))
        .expect("an address")
        .tls_config(tls)
        .expect("tls")
        .connect()
        .await
        .expect("connect over mutual TLS");
    RateLimitServiceClient::new(channel)
}

/// Envoy Gateway's environment for the rate limit container (its default Deployment's list, in
/// its order), pointed at this test's files and loopback addresses: the gRPC and HTTP
/// listeners on port 0 by flag, read from what the binary prints; Redis a real server.
fn envoy_gateway_env(xds: &str, certificates: &Certificates, redis: &str) -> Vec<(String, String)> {
    let data = certificates.dir.path().join("data");
    std::fs::create_dir_all(&data).expect("runtime root");
    [
        ("RUNTIME_ROOT", data.to_string_lossy().into_owned()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        ("RUNTIME_WATCH_ROOT", "false".into()),
        ("LOG_LEVEL", "info".into()),
        ("USE_STATSD", "false".into()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".into()),
        ("CONFIG_GRPC_XDS_SERVER_URL", xds.into()),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit".into()),
        ("GRPC_SERVER_USE_TLS", "true".into()),
        ("GRPC_SERVER_TLS_CERT", certificates.path("tls.crt")),
        ("GRPC_SERVER_TLS_KEY", certificates.path("tls.key")),
        ("GRPC_SERVER_TLS_CA_CERT", certificates.path("ca.crt")),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".into()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", certificates.path("tls.crt")),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", certificates.path("tls.key")),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", certificates.path("ca.crt")),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", redis.into()),
        ("USE_PROMETHEUS", "true".into()),
        ("PROMETHEUS_ADDR", "127.0.0.1:0".into()),
        ("PROMETHEUS_MAPPER_YAML", certificates.path("statsd-conf.yaml")),
        // Beyond Envoy Gateway's list: the name its management server's certificate carries
        // here (Envoy Gateway's is the address's host), node metadata and stream headers, and
        // short waits before reconnecting.
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.test".into()),
        (
            "CONFIG_GRPC_XDS_NODE_METADATA",
            "cluster=edge,zone=a=b,ignored".into(),
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "x-tenant:blue".into(),
        ),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "200ms".into()),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1s".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn tollgate_with(env: &[(String, String)]) -> Command {
    let mut command = Command::new(TOLLGATE);
    command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateways_environment_serves_pushed_limits_acks_nacks_and_survives_the_server_going_away() {
    let certificates = Certificates::new();
    let (snapshot, _) = watch::channel(("1".to_owned(), initial()));
    let (requests_in, mut requests) = mpsc::unbounded_channel();
    let management = Management {
        snapshot,
        seen: Arc::default(),
        requests: requests_in,
        down: watch::channel(false).0,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let xds_addr = listener.local_addr().expect("addr");
    let running = serve(&management, &certificates, listener);
    let redis = tollgate_testkit::RedisServer::start();
    let env = envoy_gateway_env(&xds_addr.to_string(), &certificates, &redis.addr().to_string());
    let mut server = tokio::task::block_in_place(|| Server::start_command(&mut tollgate_with(&env), &[]));
    let prometheus = tokio::task::block_in_place(|| server.wait_for("prometheus listening on "));
    let prometheus = prometheus
        .rsplit(' ')
        .next()
        .expect("an address")
        .trim()
        .to_owned();

    // The subscription, then the ACK of snapshot 1.
    let subscribe = next(&mut requests).await;
    assert_eq!(subscribe.type_url, TYPE_URL);
    assert!(subscribe.resource_names.is_empty());
    assert_eq!(
        (subscribe.version_info.as_str(), subscribe.response_nonce.as_str()),
        ("", "")
    );
    let node = subscribe.node.expect("a node");
    assert_eq!(node.id, "envoy-ratelimit");
    let metadata = node.metadata.expect("metadata").fields;
    let text = |name: &str| match &metadata[name].kind {
        Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(s)) => s.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (text("cluster"), text("zone"), metadata.len()),
        ("edge".into(), "a=b".into(), 2)
    );
    assert_eq!(
        management.seen.lock().expect("seen").headers[0]
            .get("x-tenant")
            .map(String::as_str),
        Some("blue")
    );
    let ack = next(&mut requests).await;
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("1", "1")
    );
    assert!(ack.error_detail.is_none());

    // upstream's basic config: an unknown domain passes without a limit; key1 is 50 a second;
    // key2 20 a minute, the 21st call over; two descriptors decided together.
    let mut rls = rls_client(&server.grpc, &certificates).await;
    let unknown = call(&mut rls, "foo", &[("hello", "world")]).await;
    assert_eq!(unknown.overall_code, Code::Ok as i32);
    assert!(unknown.statuses[0].current_limit.is_none());
    let basic = call(&mut rls, "basic", &[("key1", "foo")]).await;
    assert_eq!(basic.statuses[0].limit_remaining, 49);
    assert_eq!(
        basic.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(50)
    );
    for i in 1..=25u32 {
        let answer = call(&mut rls, "another", &[("key2", "r1")]).await;
        let expected = if i <= 20 { Code::Ok } else { Code::OverLimit };
        assert_eq!(answer.overall_code, expected as i32, "call {i}");
        assert_eq!(
            answer.statuses[0].limit_remaining,
            20u32.saturating_sub(i),
            "call {i}"
        );
    }
    for i in 1..=15u32 {
        let answer = call(&mut rls, "another", &[("key2", "r2"), ("key3", "r2")]).await;
        let expected = if i <= 10 { Code::Ok } else { Code::OverLimit };
        assert_eq!(answer.overall_code, expected as i32, "call {i}");
        assert_eq!(
            answer.statuses[1].limit_remaining,
            10u32.saturating_sub(i),
            "call {i}"
        );
    }

    // key4 a day: asked again a moment later, the time to the reset is shorter.
    let first = call(&mut rls, "another", &[("key4", "durTest")]).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let second = call(&mut rls, "another", &[("key4", "durTest")]).await;
    let reset = |r: &RateLimitResponse| r.statuses[0].duration_until_reset.as_ref().map(|d| d.seconds);
    assert!(
        reset(&second) < reset(&first),
        "{:?} then {:?}",
        reset(&first),
        reset(&second)
    );

    // A push is a reload: the `reload` domain appears (block: 0 a second refuses at once).
    let before = call(&mut rls, "reload", &[("block", "foo")]).await;
    assert_eq!(before.overall_code, Code::Ok as i32);
    let mut pushed = initial();
    pushed.push(reload_domain());
    management.snapshot.send_replace(("2".into(), pushed));
    let ack = next(&mut requests).await;
    assert_eq!((ack.version_info.as_str(), ack.error_detail), ("2", None));
    assert_eq!(
        call(&mut rls, "reload", &[("block", "foo")]).await.overall_code,
        Code::OverLimit as i32
    );
    assert_eq!(
        call(&mut rls, "reload", &[("key1", "foo")]).await.statuses[0].limit_remaining,
        49
    );

    // A broken push (one domain twice) is NACKed with the version being served, naming the
    // problem; the pushed limits keep answering.
    let mut broken = initial();
    broken.push(reload_domain());
    broken.push(reload_domain());
    management.snapshot.send_replace(("3".into(), broken));
    let nack = next(&mut requests).await;
    assert_eq!(nack.version_info, "2");
    let detail = nack.error_detail.expect("a NACK says why").message;
    assert!(detail.contains("reload"), "{detail}");
    assert_eq!(
        call(&mut rls, "reload", &[("block", "foo")]).await.overall_code,
        Code::OverLimit as i32
    );

    // The management server goes away: the limits keep answering; when it is back on the same
    // address, the client subscribes again with the version it serves and takes the next push.
    running.stop().await;
    assert_eq!(
        call(&mut rls, "reload", &[("block", "foo")]).await.overall_code,
        Code::OverLimit as i32
    );
    // State of the world: snapshot 4 drops the `reload` domain.
    management.snapshot.send_replace(("4".into(), initial()));
    let listener = tokio::net::TcpListener::bind(xds_addr)
        .await
        .expect("the same address again");
    let running = serve(&management, &certificates, listener);
    let resubscribe = loop {
        let request = next(&mut requests).await;
        if request.response_nonce.is_empty() {
            break request;
        }
    };
    assert_eq!(resubscribe.version_info, "2");
    let ack = next(&mut requests).await;
    assert_eq!((ack.version_info.as_str(), ack.error_detail), ("4", None));
    assert_eq!(
        call(&mut rls, "reload", &[("block", "foo")]).await.overall_code,
        Code::Ok as i32
    );
    // What the dashboard and metrics say of it.
    let metrics = reqwest::get(format!("http://{prometheus}/metrics"))
        .await
        .expect("metrics where Envoy Gateway scrapes them")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("tollgate_xds_pushes_total{outcome=\"nacked\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("tollgate_xds_connected 1"), "{metrics}");
    running.stop().await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_force_start_the_listeners_open_once_the_first_push_is_answered() {
    let certificates = Certificates::new();
    let (snapshot, _) = watch::channel(("7".to_owned(), vec![reload_domain()]));
    let (requests_in, mut requests) = mpsc::unbounded_channel();
    let management = Management {
        snapshot,
        seen: Arc::default(),
        requests: requests_in,
        down: watch::channel(false).0,
    };
    // The management server is not there yet: the binary waits, not listening.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let xds_addr = listener.local_addr().expect("addr");
    drop(listener);
    let redis = tollgate_testkit::RedisServer::start();
    let mut env = envoy_gateway_env(&xds_addr.to_string(), &certificates, &redis.addr().to_string());
    env.retain(|(k, _)| k != "FORCE_START_WITHOUT_INITIAL_CONFIG");
    let mut child = tollgate_testkit::ChildProcess::start(tollgate_with(&env).args([
        "serve",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
    ]));
    let waiting = tokio::task::block_in_place(|| child.wait_for("tollgate: "));
    assert!(waiting.contains("waiting for the first push"), "{waiting}");
    let listener = tokio::net::TcpListener::bind(xds_addr).await.expect("bind");
    let running = serve(&management, &certificates, listener);
    let _subscribe = next(&mut requests).await;
    let grpc = tokio::task::block_in_place(|| child.wait_for_addr("grpc listening on "));
    let mut rls = rls_client(&format!("http://{grpc}"), &certificates).await;
    assert_eq!(
        call(&mut rls, "reload", &[("block", "x")]).await.overall_code,
        Code::OverLimit as i32
    );
    running.stop().await;
}
