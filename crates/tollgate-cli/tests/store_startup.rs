//! A store that cannot decide is reported loudly: at start-up with its class (wrong password,
//! a cluster address at a standalone server, the reverse), refused with `--require-store`, and in
//! `/readyz` with the class in the JSON body (answering 503 with `strict=true`). The store's deadline is a flag.

mod binary;

use std::process::Command;
use std::time::Duration;

use binary::Server;
use reqwest::StatusCode;
use serde_json::Value;
use tollgate_testkit::{ChildProcess, RedisCluster, RedisServer, store_timeout_arg};

/// `tollgate <args>` that must exit on its own: its exit status and the line naming the refusal.
fn refused(args: &[&str]) -> (bool, String) {
    let mut child = ChildProcess::start(Command::new(env!("CARGO_BIN_EXE_tollgate")).args(args));
    let line = child.wait_for("refusing to start because");
    (child.wait_exit().success(), line)
}

async fn readyz(server: &Server) -> (StatusCode, Value) {
    readyz_at(&server.url("/readyz")).await
}

async fn readyz_at(url: &str) -> (StatusCode, Value) {
    let response = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(url)
        .send()
        .await
        .expect("readyz");
    (response.status(), response.json().await.expect("a json body"))
}

#[test]
fn require_store_refuses_to_start_naming_the_class() {
    let server = RedisServer::start();
    server.require_password("right");
    let open = RedisServer::start();
    let cluster = RedisCluster::start();
    let cases = [
        (format!("redis://:wrong@127.0.0.1:{}", server.port()), "(auth)"),
        (format!("redis+cluster://127.0.0.1:{}", open.port()), "(cluster)"),
        (format!("redis://127.0.0.1:{}", cluster.ports()[0]), "(cluster)"),
        ("redis://127.0.0.1:1".to_string(), "(connection)"),
    ];
    let timeout = store_timeout_arg();
    for (url, class) in &cases {
        let serve = [
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--store",
            url,
            "--store-timeout",
            &timeout,
            "--require-store",
        ];
        let (ok, line) = refused(&serve);
        assert!(!ok, "serve must exit with a failure for {url}");
        assert!(line.contains(class), "{url}: {line}");
        assert!(
            !line.contains("wrong@"),
            "the password must not be printed: {line}"
        );
        let proxy = [
            "proxy",
            "--upstream",
            "http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
            "--store",
            url,
            "--store-timeout",
            &timeout,
            "--require-store",
        ];
        let (ok, line) = refused(&proxy);
        assert!(!ok && line.contains(class), "proxy, {url}: {line}");
    }
}

#[test]
fn a_store_that_cannot_run_lua_is_refused_at_start_without_require_store() {
    let mut args = vec![];
    for command in ["EVAL", "EVALSHA", "SCRIPT", "FCALL", "FUNCTION"] {
        args.extend(["--rename-command", command, ""]);
    }
    let redis = RedisServer::start_with_args(&args);
    // The address shown is the one given, without its password.
    redis.require_password("pw");
    let url = format!("redis://:pw@127.0.0.1:{}", redis.port());
    let timeout = store_timeout_arg();
    let mut child = ChildProcess::start(Command::new(env!("CARGO_BIN_EXE_tollgate")).args([
        "serve",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--store",
        &url,
        "--store-timeout",
        &timeout,
    ]));
    let line = child.wait_for("tollgate: the store at");
    assert!(!child.wait_exit().success(), "{line}");
    assert!(
        line.starts_with(&format!(
            "tollgate: the store at redis://:***@127.0.0.1:{} cannot run Lua scripts (",
            redis.port()
        )) && line.contains("unknown command")
            && line.ends_with("tollgate needs EVALSHA (and SCRIPT LOAD); enable Lua scripting on the server"),
        "{line}"
    );
}

#[tokio::test]
async fn a_misconfigured_store_is_reported_at_start_and_in_readyz() {
    let redis = RedisServer::start();
    redis.require_password("right");
    let url = format!("redis://:wrong@127.0.0.1:{}", redis.port());
    let timeout = store_timeout_arg();
    let mut child = ChildProcess::start(Command::new(env!("CARGO_BIN_EXE_tollgate")).args([
        "serve",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--store",
        &url,
        "--store-timeout",
        &timeout,
    ]));
    let http = child.wait_for_addr("http listening on ");
    // stdout and stderr are read apart, so the report may come before or after the address.
    let line = child.printed("is not usable");
    assert!(line.contains("(auth)") && !line.contains("wrong"), "{line}");
    let (status, body) = readyz_at(&format!("http://{http}/readyz?strict=true")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        (body["ready"].clone(), body["class"].clone()),
        (false.into(), "auth".into()),
        "{body}"
    );
    // The demo policies fail over to a local limiter, so the default check stays ready and
    // still names the class.
    let (status, body) = readyz_at(&format!("http://{http}/readyz")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["store_ready"].clone(), body["class"].clone()),
        (false.into(), "auth".into()),
        "{body}"
    );

    // A standalone address at a cluster node: the class says so.
    let cluster = RedisCluster::start();
    let url = format!("redis://127.0.0.1:{}", cluster.ports()[0]);
    let server = Server::start(&["--store", &url, "--store-timeout", &timeout]);
    let (status, body) = readyz_at(&server.url("/readyz?strict=true")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["class"], "cluster", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("redis+cluster://"),
        "{body}"
    );

    // A healthy store: ready, and its breaker shows as closed.
    let server = Server::start(&[
        "--store",
        &redis_url_with_password(&redis),
        "--store-timeout",
        &timeout,
        "--require-store",
    ]);
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["ready"].clone(), body["class"].clone()),
        (true.into(), Value::Null)
    );
}

fn redis_url_with_password(redis: &RedisServer) -> String {
    format!("redis://:right@127.0.0.1:{}", redis.port())
}

#[test]
fn a_zero_store_timeout_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--store-timeout", "0s"])
        .output()
        .expect("run tollgate");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--store-timeout"), "{stderr}");
}

#[test]
fn a_ca_file_that_is_not_pem_certificates_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, _, key) = certificates();
    for (name, bytes, says) in [
        ("notes.txt", b"trust me\n".to_vec(), "no PEM certificate"),
        ("ca.der", vec![0x30, 0x82, 0x01, 0x0a, 0x02], "looks like DER"),
        ("key.pem", key.into_bytes(), "no PEM certificate"),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).expect("write");
        let file = file.to_str().expect("utf-8 path");
        for command in [
            &["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"][..],
            &[
                "proxy",
                "--upstream",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
            ][..],
        ] {
            // Not required, so only the CA file can stop the start.
            // no store deadline: the CA file is refused before any call
            let mut child =
                ChildProcess::start(Command::new(env!("CARGO_BIN_EXE_tollgate")).args(command).args([
                    "--store",
                    "rediss://127.0.0.1:1",
                    "--store-ca-file",
                    file,
                ]));
            let line = child.wait_for(file);
            assert!(line.contains(says), "{} {name}: {line}", command[0]);
            assert!(!child.wait_exit().success(), "{} {name}: {line}", command[0]);
        }
    }
}

#[test]
fn a_password_that_breaks_the_url_gets_one_hint_and_is_never_printed() {
    for url in [
        "redis://:my/secret@127.0.0.1:1",
        "redis+cluster://app:my/secret?x@127.0.0.1:1,127.0.0.1:2",
    ] {
        // no store deadline: the address is refused before any call
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args([
                "serve",
                "--http",
                "127.0.0.1:0",
                "--grpc",
                "127.0.0.1:0",
                "--store",
                url,
            ])
            .output()
            .expect("run tollgate");
        let printed =
            String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{url}: {printed}");
        assert_eq!(printed.matches("percent-encode").count(), 1, "{url}: {printed}");
        assert!(!printed.contains("secret"), "{url}: {printed}");
        assert_eq!(printed.trim().lines().count(), 1, "one message: {printed}");
    }
}

/// A CA and a certificate for 127.0.0.1 signed by it, as PEM: (ca, cert, key).
fn certificates() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn serve_reaches_redis_over_tls_with_a_password_and_its_own_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates();
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    std::fs::write(path("ca.pem"), &ca).unwrap();
    std::fs::write(path("cert.pem"), &cert).unwrap();
    std::fs::write(path("key.pem"), &key).unwrap();
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
        .to_string();
    let redis = RedisServer::try_start_with_args(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &path("cert.pem"),
        "--tls-key-file",
        &path("key.pem"),
        "--tls-ca-cert-file",
        &path("ca.pem"),
        "--tls-auth-clients",
        "no",
    ])
    .unwrap_or_else(|e| panic!("redis-server could not start with --tls-port (is it built with TLS?): {e}"));
    redis.require_password("tls-pass");
    let url = format!("rediss://:tls-pass@127.0.0.1:{tls_port}");
    let timeout = store_timeout_arg();

    let server = Server::start(&[
        "--store",
        &url,
        "--store-timeout",
        &timeout,
        "--store-ca-file",
        &path("ca.pem"),
        "--require-store",
    ]);
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let response = reqwest::Client::new()
        .post(server.url("/v1/check"))
        .json(&serde_json::json!({"policy": "demo", "key": "tls"}))
        .send()
        .await
        .expect("check");
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["degraded"], false, "{body}");

    // Without the CA, the server's certificate is not trusted: refused at start-up.
    let (ok, line) = refused(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--store",
        &url,
        "--store-timeout",
        &timeout,
        "--require-store",
    ]);
    assert!(!ok, "{line}");
    assert!(
        !line.contains("tls-pass"),
        "the password must not be printed: {line}"
    );
}
