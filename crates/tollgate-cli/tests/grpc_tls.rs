//! TLS on the real binary's gRPC port, as envoyproxy/ratelimit offers it (`GRPC_SERVER_USE_TLS`
//! and the files it names) and as Envoy Gateway starts it (`GRPC_SERVER_TLS_CA_CERT`), and through
//! tollgate's own flags: answers over TLS, refusals of plaintext, of missing, foreign or misnamed
//! client certificates, certificates rotated under open connections, and start-up errors that
//! name the setting and the file.
//!
//! Certificates are made here with rcgen; the RSA key (ring cannot generate one) and the SEC1
//! key come from the `openssl` command, which must be installed. Files are laid out as
//! Kubernetes mounts a secret (`tls.crt -> ..data/tls.crt`, `..data -> ..v1`), and rotated as it
//! rotates one: a new version directory and an atomic swap of the `..data` symlink.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};
use tollgate_testkit::ChildProcess;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Three requests a day per `client` value.
const CONFIG: &str = "\
domain: tls
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 3}
";

/// Every TLS setting the binary reads, removed from the child's environment so the machine
/// running the tests cannot change them.
const TLS_VARS: [&str; 10] = [
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_SERVER_TLS_CA_CERT",
    "GRPC_CLIENT_TLS_SAN",
    "TOLLGATE_GRPC_TLS_CERT",
    "TOLLGATE_GRPC_TLS_KEY",
    "TOLLGATE_GRPC_CLIENT_CA",
    "TOLLGATE_GRPC_CLIENT_SAN",
];

/// How long a single exchange may take before the test fails (a bound, not an expectation).
const EXCHANGE: Duration = Duration::from_secs(15);

// ---- certificates ----

/// A certificate authority.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let pem = params.self_signed(&key).expect("CA certificate").pem();
    Ca {
        issuer: Issuer::new(params, key),
        pem,
    }
}

/// A certificate and its key, PEM, with the certificate's DER to compare with what a server
/// presents.
struct Leaf {
    cert: String,
    key: String,
    der: CertificateDer<'static>,
}

/// A certificate for `names` issued by `ca`, for a server or a client, over an ECDSA key
/// (PKCS#8).
fn leaf(ca: &Ca, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Leaf {
    let key = KeyPair::generate().expect("key");
    let pem = key.serialize_pem();
    leaf_with_key(ca, names, usage, &key, pem)
}

/// A certificate for `names` over `key`, whose PEM (in whatever encoding) is `key_pem`.
fn leaf_with_key(
    ca: &Ca,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    key: &KeyPair,
    key_pem: String,
) -> Leaf {
    let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    let mut params = CertificateParams::new(names).expect("params");
    params.extended_key_usages.push(usage);
    let cert = params.signed_by(key, &ca.issuer).expect("certificate");
    Leaf {
        cert: cert.pem(),
        key: key_pem,
        der: cert.der().clone(),
    }
}

fn server_leaf(ca: &Ca) -> Leaf {
    leaf(
        ca,
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    )
}

fn client_leaf(ca: &Ca, names: &[&str]) -> Leaf {
    leaf(ca, names, ExtendedKeyUsagePurpose::ClientAuth)
}

/// `openssl ARGS` with `input` on stdin; its stdout. Fails loudly when openssl is missing.
fn openssl(args: &[&str], input: &str) -> String {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| {
            panic!("the openssl command is needed to make RSA and SEC1 keys (apt-get install openssl): {err}")
        });
    let mut stdin = child.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut stdin, input.as_bytes()).expect("write to openssl");
    drop(stdin);
    let output = child.wait_with_output().expect("run openssl");
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("PEM is text")
}

/// A server certificate over a new RSA key, the key written as PKCS#1 (`RSA PRIVATE KEY`).
fn rsa_server_leaf(ca: &Ca) -> Leaf {
    let pkcs1 = openssl(&["genrsa", "-traditional", "2048"], "");
    assert!(pkcs1.starts_with("-----BEGIN RSA PRIVATE KEY-----"), "{pkcs1}");
    let pkcs8 = openssl(&["pkcs8", "-topk8", "-nocrypt"], &pkcs1);
    let key = KeyPair::from_pkcs8_pem_and_sign_algo(&pkcs8, &rcgen::PKCS_RSA_SHA256).expect("RSA key");
    leaf_with_key(
        ca,
        &["localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
        &key,
        pkcs1,
    )
}

/// A server certificate over an ECDSA key written as SEC1 (`EC PRIVATE KEY`).
fn sec1_server_leaf(ca: &Ca) -> Leaf {
    let key = KeyPair::generate().expect("key");
    let sec1 = openssl(&["ec"], &key.serialize_pem());
    assert!(sec1.starts_with("-----BEGIN EC PRIVATE KEY-----"), "{sec1}");
    leaf_with_key(
        ca,
        &["localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
        &key,
        sec1,
    )
}

// ---- files, as Kubernetes mounts a secret ----

/// A directory laid out as a mounted Kubernetes secret: each file a symlink through `..data` to
/// the current version's directory.
struct Mount {
    dir: tempfile::TempDir,
    version: u32,
}

impl Mount {
    fn new(files: &[(&str, &str)]) -> Mount {
        let mut mount = Mount {
            dir: tempfile::tempdir().expect("temp dir"),
            version: 0,
        };
        mount.swap(files);
        for (name, _) in files {
            std::os::unix::fs::symlink(format!("..data/{name}"), mount.dir.path().join(name))
                .expect("symlink");
        }
        mount
    }

    fn path(&self, name: &str) -> String {
        self.dir
            .path()
            .join(name)
            .to_str()
            .expect("utf-8 path")
            .to_owned()
    }

    /// Writes a new version and points `..data` at it in one rename, as the kubelet does.
    fn swap(&mut self, files: &[(&str, &str)]) {
        self.version += 1;
        let version = format!("..v{}", self.version);
        let dir = self.dir.path().join(&version);
        std::fs::create_dir(&dir).expect("version dir");
        for (name, contents) in files {
            std::fs::write(dir.join(name), contents).expect("write");
        }
        let staged = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&version, &staged).expect("staged symlink");
        std::fs::rename(&staged, self.dir.path().join("..data")).expect("swap ..data");
    }
}

/// Plain files in a temporary directory.
fn files(files: &[(&str, &str)]) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let paths = files
        .iter()
        .map(|(name, contents)| {
            let path = dir.path().join(name);
            std::fs::write(&path, contents).expect("write");
            path.to_str().expect("utf-8 path").to_owned()
        })
        .collect();
    (dir, paths)
}

// ---- the server ----

/// `tollgate serve` on loopback with `args` and exactly `vars` of the TLS settings.
fn command(config: &Path, args: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(config)
        .args(args);
    for var in TLS_VARS {
        command.env_remove(var);
    }
    command.envs(vars.iter().copied());
    command
}

struct Server {
    child: ChildProcess,
    grpc: SocketAddr,
    _config: tempfile::NamedTempFile,
}

fn config_file() -> tempfile::NamedTempFile {
    let config = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(config.path(), CONFIG).expect("write the config");
    config
}

fn start(args: &[&str], vars: &[(&str, &str)]) -> Server {
    let config = config_file();
    let mut child = ChildProcess::start(&mut command(config.path(), args, vars));
    let grpc = child.wait_for_addr("grpc listening on ");
    child.wait_for("grpc TLS with certificate");
    Server {
        child,
        grpc,
        _config: config,
    }
}

/// Runs `tollgate serve` expecting it to stop at start: the line naming the fault, which must
/// contain every one of `expected`.
fn start_fails(args: &[&str], vars: &[(&str, &str)], expected: &[&str]) -> String {
    let config = config_file();
    let mut child = ChildProcess::start(&mut command(config.path(), args, vars));
    let line = child.wait_for("tollgate: ");
    let status = child.wait_exit();
    assert!(!status.success(), "it started: {line}");
    for part in expected {
        assert!(line.contains(part), "{part:?} not in {line:?}");
    }
    line
}

// ---- clients ----

/// A TLS channel to `addr` trusting `server_ca`, presenting `identity` when given.
async fn channel(addr: SocketAddr, server_ca: &Ca, identity: Option<&Leaf>) -> Result<Channel, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&server_ca.pem))
        .domain_name("localhost");
    if let Some(leaf) = identity {
        tls = tls.identity(Identity::from_pem(&leaf.cert, &leaf.key));
    }
    let endpoint = Endpoint::from_shared(format!("https://{addr}"))
        .and_then(|endpoint| endpoint.tls_config(tls))
        .map_err(|err| err.to_string())?;
    tokio::time::timeout(EXCHANGE, endpoint.connect())
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|err| format!("{err:?}"))
}

/// One `ShouldRateLimit` for `client=value` on `channel`: its overall code, or why it failed.
async fn ask(channel: &Channel, value: &str) -> Result<Code, String> {
    let request = RateLimitRequest {
        domain: "tls".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "client".to_owned(),
                value: value.to_owned(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let mut client = RateLimitServiceClient::new(channel.clone());
    let answer = tokio::time::timeout(EXCHANGE, client.should_rate_limit(request))
        .await
        .map_err(|_| "call timed out".to_owned())?
        .map_err(|status| format!("{status:?}"))?;
    Code::try_from(answer.into_inner().overall_code).map_err(|err| err.to_string())
}

/// Connects and asks once: the answer, or why the connection or the call failed (with TLS 1.3
/// a client may finish its side of the handshake before the server refuses its certificate).
async fn answered(
    addr: SocketAddr,
    server_ca: &Ca,
    identity: Option<&Leaf>,
    value: &str,
) -> Result<Code, String> {
    let channel = channel(addr, server_ca, identity).await?;
    ask(&channel, value).await
}

/// A raw TLS connection presenting `identity`, trusting `server_ca`, limited to `versions`.
async fn raw_tls(
    addr: SocketAddr,
    server_ca: &Ca,
    identity: Option<&Leaf>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(server_ca.pem.as_bytes()).expect("CA PEM"))
        .expect("root");
    let builder =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(leaf) => builder
            .with_client_auth_cert(
                vec![leaf.der.clone()],
                PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).expect("key PEM"),
            )
            .expect("client auth"),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let socket = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").expect("name");
    let mut stream = tokio::time::timeout(
        EXCHANGE,
        TlsConnector::from(Arc::new(config)).connect(name, socket),
    )
    .await
    .map_err(|_| std::io::Error::other("handshake timed out"))??;
    // The server's verdict on the client certificate (TLS 1.3) comes after the client's side of
    // the handshake: the server's first HTTP/2 bytes (its settings) say the connection stands, an
    // alert or a close that it was refused.
    stream.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
    stream.flush().await?;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(EXCHANGE, stream.read(&mut byte)).await {
        Ok(Ok(0)) => return Err(std::io::Error::other("closed by the server")),
        Ok(Err(err)) => return Err(err),
        Ok(Ok(_)) => {}
        Err(_) => return Err(std::io::Error::other("the server sent nothing")),
    }
    Ok(stream)
}

/// Retries `attempt` until it returns `Some` (15 s at most): for a reload, which follows a file
/// change by a debounce interval.
async fn eventually<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(value) = attempt().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what} did not happen within 15 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---- the cases ----

#[tokio::test]
async fn upstreams_variables_serve_rate_limits_and_health_over_tls_only() {
    let ca = ca("server CA");
    let server_leaf = server_leaf(&ca);
    let (_dir, paths) = files(&[("tls.crt", &server_leaf.cert), ("tls.key", &server_leaf.key)]);
    let server = start(
        &[],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &paths[0]),
            ("GRPC_SERVER_TLS_KEY", &paths[1]),
        ],
    );
    let tls = channel(server.grpc, &ca, None).await.expect("TLS channel");
    for _ in 0..3 {
        assert_eq!(ask(&tls, "first").await, Ok(Code::Ok));
    }
    assert_eq!(ask(&tls, "first").await, Ok(Code::OverLimit));
    let health = HealthClient::new(tls.clone())
        .check(HealthCheckRequest {
            service: "envoy.service.ratelimit.v3.RateLimitService".to_owned(),
        })
        .await
        .expect("health over TLS")
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);

    // TLS 1.2 and 1.3, and gRPC's ALPN.
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let stream = raw_tls(server.grpc, &ca, None, &[version])
            .await
            .unwrap_or_else(|err| panic!("{version:?}: {err}"));
        let session = stream.get_ref().1;
        assert_eq!(session.protocol_version(), Some(version.version));
        assert_eq!(session.alpn_protocol(), Some(&b"h2"[..]));
    }

    // A plaintext client (h2c, as a gRPC client without TLS speaks) gets no answer.
    let plaintext = async {
        let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc)).await?;
        let request = RateLimitRequest {
            domain: "tls".to_owned(),
            ..Default::default()
        };
        client.should_rate_limit(request).await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    let refused = tokio::time::timeout(EXCHANGE, plaintext)
        .await
        .expect("refused in time");
    assert!(refused.is_err(), "a plaintext client was answered");
    // The TLS connection is unaffected.
    assert_eq!(ask(&tls, "second").await, Ok(Code::Ok));
}

#[tokio::test]
async fn rsa_pkcs1_and_sec1_keys_are_served() {
    let ca = ca("server CA");
    for leaf in [rsa_server_leaf(&ca), sec1_server_leaf(&ca)] {
        let (_dir, paths) = files(&[("tls.crt", &leaf.cert), ("tls.key", &leaf.key)]);
        let server = start(&["--grpc-tls-cert", &paths[0], "--grpc-tls-key", &paths[1]], &[]);
        let first_line = leaf.key.lines().next().unwrap_or_default().to_owned();
        assert_eq!(
            answered(server.grpc, &ca, None, "keys").await,
            Ok(Code::Ok),
            "{first_line}"
        );
    }
}

#[tokio::test]
async fn envoy_gateways_ca_variable_requires_a_client_certificate_from_that_ca() {
    // Envoy Gateway issues the rate limit service's certificate and Envoy's client certificate
    // from one CA, and names it GRPC_SERVER_TLS_CA_CERT.
    let ca = ca("gateway CA");
    let server_leaf = server_leaf(&ca);
    let (_dir, paths) = files(&[
        ("tls.crt", &server_leaf.cert),
        ("tls.key", &server_leaf.key),
        ("ca.crt", &ca.pem),
    ]);
    let server = start(
        &[],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &paths[0]),
            ("GRPC_SERVER_TLS_KEY", &paths[1]),
            ("GRPC_SERVER_TLS_CA_CERT", &paths[2]),
        ],
    );
    let envoy = client_leaf(&ca, &["envoy"]);
    assert_eq!(
        answered(server.grpc, &ca, Some(&envoy), "envoy").await,
        Ok(Code::Ok)
    );
    let err = answered(server.grpc, &ca, None, "anonymous").await;
    assert!(err.is_err(), "a client without a certificate was answered");
    let stranger = client_leaf(&crate::ca("another CA"), &["envoy"]);
    let err = answered(server.grpc, &ca, Some(&stranger), "stranger").await;
    assert!(err.is_err(), "a certificate from another CA was answered");
    // Refusals close only their own connections.
    assert_eq!(
        answered(server.grpc, &ca, Some(&envoy), "envoy").await,
        Ok(Code::Ok)
    );
}

#[tokio::test]
async fn a_client_name_is_required_when_given() {
    let (server_ca, client_ca) = (ca("server CA"), ca("client CA"));
    let server_leaf = server_leaf(&server_ca);
    let (_dir, paths) = files(&[
        ("tls.crt", &server_leaf.cert),
        ("tls.key", &server_leaf.key),
        ("ca.crt", &client_ca.pem),
    ]);
    let server = start(
        &[
            "--grpc-tls-cert",
            &paths[0],
            "--grpc-tls-key",
            &paths[1],
            "--grpc-client-ca",
            &paths[2],
            "--grpc-client-san",
            "envoy.example.com",
        ],
        &[],
    );
    let wildcard = client_leaf(&client_ca, &["*.example.com"]);
    assert_eq!(
        answered(server.grpc, &server_ca, Some(&wildcard), "wildcard").await,
        Ok(Code::Ok)
    );
    let other = client_leaf(&client_ca, &["other.example.org", "10.0.0.1"]);
    let err = answered(server.grpc, &server_ca, Some(&other), "other").await;
    assert!(err.is_err(), "a certificate without the name was answered");
}

#[tokio::test]
async fn rotated_files_serve_new_connections_and_leave_open_ones_be() {
    let (server_ca, client_ca) = (ca("server CA 1"), ca("client CA 1"));
    let server_leaf = server_leaf(&server_ca);
    let mut mount = Mount::new(&[
        ("tls.crt", &server_leaf.cert),
        ("tls.key", &server_leaf.key),
        ("ca.crt", &client_ca.pem),
    ]);
    let mut server = start(
        &[
            "--grpc-tls-cert",
            &mount.path("tls.crt"),
            "--grpc-tls-key",
            &mount.path("tls.key"),
            "--grpc-client-ca",
            &mount.path("ca.crt"),
        ],
        &[],
    );
    let old_client = client_leaf(&client_ca, &["envoy"]);
    let open = channel(server.grpc, &server_ca, Some(&old_client))
        .await
        .expect("channel");
    assert_eq!(ask(&open, "open").await, Ok(Code::Ok));

    // Everything rotated at once: a server certificate from a new CA, and a new client CA.
    let (new_server_ca, new_client_ca) = (ca("server CA 2"), ca("client CA 2"));
    let new_leaf = self::server_leaf(&new_server_ca);
    mount.swap(&[
        ("tls.crt", &new_leaf.cert),
        ("tls.key", &new_leaf.key),
        ("ca.crt", &new_client_ca.pem),
    ]);
    let new_client = client_leaf(&new_client_ca, &["envoy"]);
    let presented = eventually("a handshake with the new files", || async {
        let stream = raw_tls(
            server.grpc,
            &new_server_ca,
            Some(&new_client),
            rustls::DEFAULT_VERSIONS,
        )
        .await
        .ok()?;
        stream
            .get_ref()
            .1
            .peer_certificates()
            .map(|chain| chain[0].clone())
    })
    .await;
    assert_eq!(presented, new_leaf.der, "the new certificate");
    server.child.printed("TLS files reloaded");
    assert_eq!(
        answered(server.grpc, &new_server_ca, Some(&new_client), "new").await,
        Ok(Code::Ok)
    );
    // The CA was rotated too: the old client certificate opens no new connection.
    let err = raw_tls(
        server.grpc,
        &new_server_ca,
        Some(&old_client),
        rustls::DEFAULT_VERSIONS,
    )
    .await;
    assert!(err.is_err(), "the old client CA still admits");
    // The connection opened before the rotation keeps being answered (were it reopened, its
    // client would not trust the new server certificate).
    assert_eq!(ask(&open, "open").await, Ok(Code::Ok));

    // A broken rotation keeps the files in use, with a warning.
    mount.swap(&[
        ("tls.crt", "not a certificate\n"),
        ("tls.key", &new_leaf.key),
        ("ca.crt", &new_client_ca.pem),
    ]);
    let warning = server.child.wait_for("TLS files reload rejected");
    assert!(warning.contains("no certificate in it"), "{warning}");
    let stream = raw_tls(
        server.grpc,
        &new_server_ca,
        Some(&new_client),
        rustls::DEFAULT_VERSIONS,
    )
    .await
    .expect("still served");
    assert_eq!(
        stream.get_ref().1.peer_certificates().expect("chain")[0],
        new_leaf.der
    );
}

#[tokio::test]
async fn the_first_byte_timeout_bounds_the_handshake() {
    let ca = ca("server CA");
    let server_leaf = server_leaf(&ca);
    let (_dir, paths) = files(&[("tls.crt", &server_leaf.cert), ("tls.key", &server_leaf.key)]);
    let server = start(
        &[
            "--grpc-tls-cert",
            &paths[0],
            "--grpc-tls-key",
            &paths[1],
            "--first-byte-timeout",
            "1s",
        ],
        &[],
    );
    // The first byte of a TLS record, then nothing: past the first byte, only the idle timeout
    // (two minutes) would close it, were the handshake not bounded.
    let mut socket = tokio::net::TcpStream::connect(server.grpc)
        .await
        .expect("connect");
    socket.write_all(&[0x16]).await.expect("one byte");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the stalled handshake was still open after 10 s");
    // The listener still answers.
    assert_eq!(answered(server.grpc, &ca, None, "after").await, Ok(Code::Ok));
}

#[test]
fn unusable_tls_settings_stop_the_start_naming_the_setting_and_the_file() {
    let ca = ca("server CA");
    let (one, two) = (server_leaf(&ca), server_leaf(&ca));
    let (_dir, paths) = files(&[
        ("tls.crt", &one.cert),
        ("tls.key", &one.key),
        ("other.key", &two.key),
        ("text.crt", "hello\n"),
    ]);
    let (cert, key, other_key, text) = (&paths[0], &paths[1], &paths[2], &paths[3]);
    let missing = PathBuf::from("/nonexistent/tls.crt");
    let missing = missing.to_str().expect("path");

    start_fails(
        &[],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", missing),
            ("GRPC_SERVER_TLS_KEY", key),
        ],
        &["GRPC_SERVER_TLS_CERT: certificate /nonexistent/tls.crt: cannot read it"],
    );
    start_fails(
        &["--grpc-tls-cert", text, "--grpc-tls-key", key],
        &[],
        &["--grpc-tls-cert: certificate ", text, "no certificate in it"],
    );
    start_fails(
        &["--grpc-tls-cert", cert, "--grpc-tls-key", other_key],
        &[],
        &[&format!(
            "--grpc-tls-key: key {other_key}: does not match the certificate {cert}"
        )],
    );
    start_fails(
        &[],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", cert),
            ("GRPC_SERVER_TLS_KEY", key),
            ("GRPC_SERVER_TLS_CA_CERT", "/nonexistent/ca.crt"),
        ],
        &["GRPC_SERVER_TLS_CA_CERT: client CA /nonexistent/ca.crt: cannot read it"],
    );
    start_fails(
        &[
            "--grpc-tls-cert",
            cert,
            "--grpc-tls-key",
            key,
            "--grpc-client-ca",
            cert,
            "--grpc-client-san",
            "not a name",
        ],
        &[],
        &["--grpc-client-san: client name \"not a name\": expected a DNS name or an IP address"],
    );
    start_fails(
        &[],
        &[("GRPC_SERVER_USE_TLS", "true"), ("GRPC_SERVER_TLS_CERT", cert)],
        &["GRPC_SERVER_USE_TLS=true: needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"],
    );
}
