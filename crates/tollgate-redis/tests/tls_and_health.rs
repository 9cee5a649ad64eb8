//! Reaching Redis as production does, and saying clearly when it cannot: TLS (`rediss://`, with
//! certificates made here), passwords and ACL users in the address, and [`RedisStore::health`]
//! naming the class of what is wrong (wrong password, nothing listening, a cluster address at a
//! standalone server and the reverse).

use tollgate::{Algorithm, Policy, Rate};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisCluster, RedisServer, STORE_TIMEOUT};

fn policy() -> Policy {
    Policy::new("tls", Algorithm::gcra(Rate::per_second(10).unwrap(), 5).unwrap()).unwrap()
}

async fn store(url: &str) -> RedisStore {
    RedisStore::builder(Target::parse(url).unwrap())
        .timeout(STORE_TIMEOUT)
        .connect_lazy()
        .await
        .unwrap()
}

async fn class_of(url: &str) -> Option<&'static str> {
    match store(url).await.health(STORE_TIMEOUT).await {
        Ok(()) => None,
        Err(err) => Some(err.class().expect("a store error")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_and_acl_users_in_the_address_authenticate() {
    let server = RedisServer::start();
    server.cli(&["ACL", "SETUSER", "app", "on", ">app-pass", "~*", "&*", "+@all"]);
    server.require_password("s3cret");
    let port = server.port();

    for url in [
        format!("redis://:s3cret@127.0.0.1:{port}"),
        format!("redis://app:app-pass@127.0.0.1:{port}"),
    ] {
        let store = store(&url).await;
        store
            .health(STORE_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(store.check(&policy(), b"k", 1).await.unwrap().allowed, "{url}");
    }
    for url in [
        format!("redis://:wrong@127.0.0.1:{port}"),
        format!("redis://app:wrong@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        assert_eq!(class_of(&url).await, Some("auth"), "{url}");
    }
    // An eager connect refuses a wrong password at once.
    let eager = RedisStore::builder(Target::parse(&format!("redis://:wrong@127.0.0.1:{port}")).unwrap())
        .timeout(STORE_TIMEOUT)
        .connect()
        .await;
    assert!(eager.is_err(), "a wrong password must fail an eager connect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_names_the_class_of_a_misconfigured_store() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    assert_eq!(class_of(&server.url()).await, None);
    assert_eq!(
        class_of(&format!("redis+cluster://127.0.0.1:{}", cluster.ports()[0])).await,
        None
    );
    // Nothing listens on port 1.
    assert_eq!(class_of("redis://127.0.0.1:1").await, Some("connection"));
    // A standalone address at a cluster node, and a cluster address at a standalone server.
    assert_eq!(
        class_of(&format!("redis://127.0.0.1:{}", cluster.ports()[0])).await,
        Some("cluster")
    );
    assert_eq!(
        class_of(&format!("redis+cluster://127.0.0.1:{}", server.port())).await,
        Some("cluster")
    );
    let err = store(&format!("redis://127.0.0.1:{}", cluster.ports()[0]))
        .await
        .health(STORE_TIMEOUT)
        .await
        .unwrap_err();
    // The message says what to do about it.
    let source = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(source.contains("use redis+cluster://"), "{err}: {source}");
}

/// A CA and a certificate for 127.0.0.1 signed by it, as PEM: (ca, cert, key).
fn certificates() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tollgate test ca");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_connects_with_tls_and_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates();
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    std::fs::write(path("ca.pem"), &ca).unwrap();
    std::fs::write(path("cert.pem"), &cert).unwrap();
    std::fs::write(path("key.pem"), &key).unwrap();
    let tls_port = free_port().to_string();
    // The plain port stays for the test kit's own commands; clients of the store use TLS.
    let server = RedisServer::try_start_with_args(&[
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
    server.require_password("tls-pass");

    let url = format!("rediss://:tls-pass@127.0.0.1:{tls_port}");
    let store = RedisStore::builder(Target::parse(&url).unwrap())
        .timeout(STORE_TIMEOUT)
        .tls_ca_pem(ca.as_bytes())
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    store.health(STORE_TIMEOUT).await.unwrap();
    let p = policy();
    assert!(store.check(&p, b"k", 1).await.unwrap().allowed);
    store.reset(&p, b"k").await.unwrap();
    assert_eq!(store.stats().reset_publish_failures, 0);

    // A wrong password over TLS is still an auth failure.
    let wrong = RedisStore::builder(Target::parse(&format!("rediss://:nope@127.0.0.1:{tls_port}")).unwrap())
        .timeout(STORE_TIMEOUT)
        .tls_ca_pem(ca.as_bytes())
        .connect_lazy()
        .await
        .unwrap();
    assert_eq!(
        wrong.health(STORE_TIMEOUT).await.unwrap_err().class(),
        Some("auth")
    );
    // Without our CA the server's certificate is not trusted: no connection.
    let untrusted = RedisStore::builder(Target::parse(&url).unwrap())
        .timeout(STORE_TIMEOUT)
        .connect()
        .await;
    assert!(
        untrusted.is_err(),
        "a certificate from an unknown CA must be refused"
    );
}
