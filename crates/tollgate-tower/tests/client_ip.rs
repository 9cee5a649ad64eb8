//! Client addresses through the layer: trusted and untrusted proxies (`X-Forwarded-For` and
//! `Forwarded`), spoofing, malformed chains, IPv6 prefix grouping and IPv4-mapped addresses.

mod common;

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use common::{policy, request, routes, send};
use tollgate::MemoryStore;
use tollgate_tower::{Cidr, ClientIp, KeyExtractor, KeyedPolicy, ProxyHeader, RateLimitLayer};

/// An app allowing one request per minute per client as `ip` finds it.
fn app(ip: ClientIp) -> Router {
    let rule = KeyedPolicy::new(
        policy("per-client", 1, Duration::from_secs(60)),
        KeyExtractor::client_ip(ip),
    );
    routes().layer(RateLimitLayer::new(MemoryStore::new(), rule))
}

fn behind_proxies() -> ClientIp {
    let blocks: [Cidr; 2] = [
        "10.0.0.0/8".parse().expect("block"),
        "fd00::/8".parse().expect("block"),
    ];
    ClientIp::peer().trust_proxies(blocks)
}

async fn status(app: &Router, peer: &str, headers: &[(&str, &str)]) -> StatusCode {
    send(app, request("/", peer, headers)).await.status
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget() {
    let app = app(behind_proxies());
    for client in ["198.51.100.1", "198.51.100.2", "2001:db8::1"] {
        let xff = format!("{client}, 10.0.0.9");
        assert_eq!(
            status(&app, "10.0.0.1:1000", &[("x-forwarded-for", &xff)]).await,
            StatusCode::OK
        );
        // The same client through another trusted proxy is the same client.
        assert_eq!(
            status(&app, "[fd00::5]:1000", &[("x-forwarded-for", client)]).await,
            StatusCode::TOO_MANY_REQUESTS,
            "{client}"
        );
    }
}

#[tokio::test]
async fn an_untrusted_peer_cannot_pick_its_key_with_forwarding_headers() {
    let app = app(behind_proxies());
    let spoofs = [
        [("x-forwarded-for", "1.1.1.1"), ("forwarded", "for=1.1.1.1")],
        [("x-forwarded-for", "2.2.2.2"), ("forwarded", "for=2.2.2.2")],
    ];
    assert_eq!(status(&app, "203.0.113.7:1000", &spoofs[0]).await, StatusCode::OK);
    // A fresh forged address does not buy a fresh budget: the peer is the key.
    assert_eq!(
        status(&app, "203.0.113.7:1001", &spoofs[1]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // And the forged address was never charged.
    assert_eq!(
        status(&app, "10.0.0.1:1000", &[("x-forwarded-for", "1.1.1.1")]).await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_client_prepending_to_the_chain_does_not_move_its_key() {
    let app = app(behind_proxies());
    // The proxy appends the real client after whatever the client sent.
    let forged = |fake: &str| format!("{fake}, 198.51.100.9");
    assert_eq!(
        status(&app, "10.0.0.1:1", &[("x-forwarded-for", &forged("5.5.5.5"))]).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, "10.0.0.1:1", &[("x-forwarded-for", &forged("6.6.6.6"))]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn the_forwarded_header_is_read_when_chosen_and_the_other_ignored() {
    let app = app(behind_proxies().proxy_header(ProxyHeader::Forwarded));
    let forwarded = |client: &str| format!(r#"for="{client}";proto=https, for=10.0.0.3"#);
    assert_eq!(
        status(
            &app,
            "10.0.0.1:1",
            &[
                ("forwarded", &forwarded("[2001:db8::7]:443")),
                ("x-forwarded-for", "9.9.9.9")
            ]
        )
        .await,
        StatusCode::OK
    );
    assert_eq!(
        status(
            &app,
            "10.0.0.1:1",
            &[
                ("forwarded", &forwarded("2001:db8::7")),
                ("x-forwarded-for", "8.8.8.8")
            ]
        )
        .await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn malformed_chains_never_panic_and_fall_back_to_the_last_trusted_hop() {
    let app = app(behind_proxies());
    let malformed = [
        "garbage",
        "198.51.100.1, not-an-ip",
        "unknown",
        "[::1",
        ",,,",
        "999.1.1.1",
        "198.51.100.1:notaport",
    ];
    // Each falls back to the peer 10.0.0.1 (",,," is empty and leaves the peer too), so they
    // all share its one budget.
    let mut statuses = Vec::new();
    for xff in malformed {
        statuses.push(status(&app, "10.0.0.1:1", &[("x-forwarded-for", xff)]).await);
    }
    assert_eq!(statuses[0], StatusCode::OK);
    assert!(
        statuses[1..].iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    // A non-ASCII header line is one unusable entry too.
    let mut bytes = request("/", "10.0.0.1:1", &[]);
    bytes.headers_mut().insert(
        "x-forwarded-for",
        axum::http::HeaderValue::from_bytes(b"\xff\xfe").expect("opaque header"),
    );
    assert_eq!(send(&app, bytes).await.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn ipv6_clients_of_one_prefix_share_a_key_when_grouped() {
    let grouped = app(ClientIp::peer().ipv6_prefix(64).expect("valid prefix"));
    assert_eq!(status(&grouped, "[2001:db8:1:2::1]:1", &[]).await, StatusCode::OK);
    assert_eq!(
        status(&grouped, "[2001:db8:1:2:ffff:ffff:ffff:fffe]:1", &[]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(&grouped, "[2001:db8:1:3::1]:1", &[]).await, StatusCode::OK);

    let ungrouped = app(ClientIp::peer());
    assert_eq!(
        status(&ungrouped, "[2001:db8:1:2::1]:1", &[]).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&ungrouped, "[2001:db8:1:2::2]:1", &[]).await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn ipv4_mapped_peers_and_hops_are_their_ipv4_address() {
    let app = app(behind_proxies());
    assert_eq!(status(&app, "[::ffff:203.0.113.1]:1", &[]).await, StatusCode::OK);
    assert_eq!(
        status(&app, "203.0.113.1:2", &[]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // A mapped trusted proxy is trusted, and a mapped forwarded client is its IPv4 address.
    assert_eq!(
        status(
            &app,
            "[::ffff:10.0.0.1]:1",
            &[("x-forwarded-for", "::ffff:198.51.100.4")]
        )
        .await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, "10.0.0.2:1", &[("x-forwarded-for", "198.51.100.4")]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}
