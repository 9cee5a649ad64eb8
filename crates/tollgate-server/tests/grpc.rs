//! The Envoy rate limit service over a real socket, driven by the generated tonic client, with
//! configs in envoyproxy/ratelimit's format (`tests/fixtures/grpc/`).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_server::AnyStore;
use tollgate_server::grpc::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use tollgate_server::grpc::proto::rate_limit_response::rate_limit::Unit;
use tollgate_server::grpc::proto::rate_limit_response::{Code, DescriptorStatus};
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse, UInt64Value};
use tollgate_server::{AppState, Settings};
use tonic::transport::Channel;

/// A server on a free port and a client connected to it.
struct Rls {
    addr: SocketAddr,
    client: RateLimitServiceClient<Channel>,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl Rls {
    async fn start(fixture: &str, store: AnyStore) -> Rls {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/grpc")
            .join(fixture);
        let yaml = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let limits = tollgate_config::parse(fixture, &yaml).expect("fixture parses");
        let state = AppState::new(limits, store, Settings::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let (tx, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(tollgate_server::grpc::serve(listener, state, async {
            let _ = rx.await;
        }));
        let client = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        Rls {
            addr,
            client,
            shutdown: Some(tx),
            server: Some(server),
        }
    }

    async fn ask(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        let response = tokio::time::timeout(Duration::from_secs(10), self.client.should_rate_limit(request))
            .await
            .expect("answered within 10 s")
            .expect("OK status");
        response.into_inner()
    }

    async fn ask_err(&mut self, request: RateLimitRequest) -> tonic::Status {
        tokio::time::timeout(Duration::from_secs(10), self.client.should_rate_limit(request))
            .await
            .expect("answered within 10 s")
            .expect_err("an error status")
    }

    /// Stops the server and waits for it.
    async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            tokio::time::timeout(Duration::from_secs(10), server)
                .await
                .expect("stops within 10 s")
                .expect("server task")
                .expect("serve returns Ok");
        }
    }
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        ..Default::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits_addend: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend,
    }
}

/// One descriptor of `messaging`, cost 1.
fn one(entries: &[(&str, &str)]) -> RateLimitRequest {
    request("messaging", vec![descriptor(entries)], 0)
}

fn code(value: i32) -> Code {
    Code::try_from(value).expect("a known code")
}

fn limit_of(status: &DescriptorStatus) -> (u32, Unit, &str) {
    let limit = status.current_limit.as_ref().expect("current_limit");
    (
        limit.requests_per_unit,
        Unit::try_from(limit.unit).expect("a known unit"),
        limit.name.as_str(),
    )
}

fn reset_secs(status: &DescriptorStatus) -> i64 {
    status
        .duration_until_reset
        .as_ref()
        .expect("duration_until_reset")
        .seconds
}

const MARKETING: [(&str, &str); 2] = [("message_type", "marketing"), ("to_number", "2061111111")];

#[tokio::test]
async fn answers_ok_under_the_limit_with_the_budget_left() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    for left in [2, 1, 0] {
        let response = rls.ask(one(&MARKETING)).await;
        assert_eq!(code(response.overall_code), Code::Ok);
        assert_eq!(response.statuses.len(), 1);
        let status = &response.statuses[0];
        assert_eq!(code(status.code), Code::Ok);
        assert_eq!(limit_of(status), (3, Unit::Day, ""));
        assert_eq!(status.limit_remaining, left);
        assert!((1..=86_400).contains(&reset_secs(status)), "{status:?}");
    }
    rls.stop().await;
}

/// Many calls in flight on each of four HTTP/2 connections, as Envoys send them: each is
/// answered on its own stream, and one budget shared by all of them is spent exactly. One
/// connection's streams are served by one task, so it is the connections that decide side by
/// side: each on a worker thread of its own, the calls released together, so a store that lost an
/// update between two checks would admit more than 50.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_on_four_connections_spend_one_budget_exactly() {
    let rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        // A channel of its own is a connection of its own.
        let client = RateLimitServiceClient::connect(format!("http://{}", rls.addr))
            .await
            .expect("connect");
        clients.push(client);
    }
    // 50 an hour per number: 64 calls for one number, 64 more each on its own number.
    let start = Arc::new(tokio::sync::Barrier::new(128));
    let calls: Vec<_> = (0..128)
        .map(|i| {
            let mut client = clients[(i / 2) % 4].clone();
            let start = start.clone();
            let number = if i % 2 == 0 {
                "2060000000".to_owned()
            } else {
                format!("20611{i:05}")
            };
            tokio::spawn(async move {
                start.wait().await;
                let call = client.should_rate_limit(one(&[("to_number", number.as_str())]));
                let answer = tokio::time::timeout(Duration::from_secs(10), call)
                    .await
                    .expect("answered within 10 s")
                    .expect("OK status")
                    .into_inner();
                (i % 2 == 0, code(answer.overall_code))
            })
        })
        .collect();
    let (mut shared_ok, mut shared_over, mut own_ok) = (0, 0, 0);
    for call in calls {
        match call.await.expect("call task") {
            (true, Code::Ok) => shared_ok += 1,
            (true, _) => shared_over += 1,
            (false, Code::Ok) => own_ok += 1,
            (false, other) => panic!("a fresh number was answered {other:?}"),
        }
    }
    assert_eq!((shared_ok, shared_over, own_ok), (50, 14, 64));
    rls.stop().await;
}

#[tokio::test]
async fn answers_over_limit_with_nothing_left_and_the_time_to_reset() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    for _ in 0..3 {
        assert_eq!(code(rls.ask(one(&MARKETING)).await.overall_code), Code::Ok);
    }
    let response = rls.ask(one(&MARKETING)).await;
    assert_eq!(code(response.overall_code), Code::OverLimit);
    let status = &response.statuses[0];
    assert_eq!(code(status.code), Code::OverLimit);
    assert_eq!(status.limit_remaining, 0);
    assert_eq!(limit_of(status), (3, Unit::Day, ""));
    assert!((1..=86_400).contains(&reset_secs(status)), "{status:?}");
    // Another number has its own counter.
    let other = rls
        .ask(one(&[("message_type", "marketing"), ("to_number", "2062222222")]))
        .await;
    assert_eq!(code(other.overall_code), Code::Ok);
    rls.stop().await;
}

#[tokio::test]
async fn matches_nested_descriptors_and_wildcards() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    let nested = rls.ask(one(&MARKETING)).await;
    assert_eq!(limit_of(&nested.statuses[0]), (3, Unit::Day, ""));
    let top = rls.ask(one(&[("to_number", "2061111111")])).await;
    assert_eq!(limit_of(&top.statuses[0]), (50, Unit::Hour, ""));
    assert_eq!(top.statuses[0].limit_remaining, 49);

    // Every path under /api/ has its own counter of 2 an hour.
    for _ in 0..2 {
        let users = rls.ask(one(&[("path", "/api/users")])).await;
        assert_eq!(code(users.overall_code), Code::Ok);
        assert_eq!(limit_of(&users.statuses[0]), (2, Unit::Hour, ""));
    }
    let users = rls.ask(one(&[("path", "/api/users")])).await;
    assert_eq!(code(users.overall_code), Code::OverLimit);
    let orders = rls.ask(one(&[("path", "/api/orders")])).await;
    assert_eq!(code(orders.overall_code), Code::Ok);

    // No match: OK without a limit, as upstream.
    for entries in [
        &[("path", "/web/index.html")][..],
        &[("message_type", "transactional"), ("to_number", "2061111111")][..],
        &[("to_number", "2061111111"), ("deeper", "than the tree")][..],
        &[("unknown_key", "x")][..],
    ] {
        let response = rls.ask(one(entries)).await;
        assert_eq!(code(response.overall_code), Code::Ok, "{entries:?}");
        assert_eq!(
            response.statuses[0],
            DescriptorStatus {
                code: Code::Ok.into(),
                ..Default::default()
            },
            "{entries:?}"
        );
    }
    rls.stop().await;
}

#[tokio::test]
async fn unknown_domain_is_ok_without_a_limit() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    for _ in 0..5 {
        let response = rls
            .ask(request("elsewhere", vec![descriptor(&[("tight", "x")])], 0))
            .await;
        assert_eq!(code(response.overall_code), Code::Ok);
        assert_eq!(response.statuses.len(), 1);
        assert!(response.statuses[0].current_limit.is_none());
    }
    rls.stop().await;
}

#[tokio::test]
async fn unlimited_is_ok_with_the_most_remaining() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    for _ in 0..5 {
        let response = rls
            .ask(request("messaging", vec![descriptor(&[("ldap", "x")])], 1000))
            .await;
        assert_eq!(code(response.overall_code), Code::Ok);
        let status = &response.statuses[0];
        assert_eq!(status.limit_remaining, u32::MAX);
        assert!(status.current_limit.is_none());
    }
    rls.stop().await;
}

#[tokio::test]
async fn hits_addend_is_the_cost() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    let ask = |hits: u32| request("messaging", vec![descriptor(&MARKETING)], hits);

    let response = rls.ask(ask(2)).await;
    assert_eq!(code(response.overall_code), Code::Ok);
    assert_eq!(response.statuses[0].limit_remaining, 1);

    // 2 more do not fit; a denied request spends nothing.
    let response = rls.ask(ask(2)).await;
    assert_eq!(code(response.overall_code), Code::OverLimit);
    assert_eq!(response.statuses[0].limit_remaining, 0);

    // More than the limit can ever admit: over the limit, no reset would help.
    let response = rls.ask(ask(4)).await;
    assert_eq!(code(response.overall_code), Code::OverLimit);
    assert_eq!(response.statuses[0].limit_remaining, 0);
    assert!(response.statuses[0].duration_until_reset.is_none());

    // A descriptor's own hits_addend wins over the request's; 0 asks without spending.
    let mut peek = descriptor(&MARKETING);
    peek.hits_addend = Some(UInt64Value { value: 0 });
    for _ in 0..2 {
        let response = rls.ask(request("messaging", vec![peek.clone()], 5)).await;
        assert_eq!(code(response.overall_code), Code::Ok);
        assert_eq!(response.statuses[0].limit_remaining, 1, "the budget as it stands");
    }
    let mut own = descriptor(&MARKETING);
    own.hits_addend = Some(UInt64Value { value: 1 });
    let response = rls.ask(request("messaging", vec![own], 5)).await;
    assert_eq!(code(response.overall_code), Code::Ok);
    assert_eq!(response.statuses[0].limit_remaining, 0);

    let response = rls.ask(ask(0)).await;
    assert_eq!(code(response.overall_code), Code::OverLimit, "0 means 1");
    rls.stop().await;
}

#[tokio::test]
async fn shadow_mode_answers_ok_when_over_the_limit() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    let metrics = tollgate_server::metrics::install();
    let first = rls.ask(one(&[("canary", "x")])).await;
    assert_eq!(code(first.overall_code), Code::Ok);
    assert_eq!(first.statuses[0].limit_remaining, 0);
    for _ in 0..3 {
        let response = rls.ask(one(&[("canary", "x")])).await;
        assert_eq!(code(response.overall_code), Code::Ok);
        let status = &response.statuses[0];
        assert_eq!(code(status.code), Code::Ok);
        assert_eq!(
            status.limit_remaining, 0,
            "over the limit, reported but not enforced"
        );
        assert_eq!(limit_of(status), (1, Unit::Day, ""));
    }
    // A shadow descriptor does not block its request, but an enforced one still does.
    let both = request(
        "messaging",
        vec![descriptor(&[("canary", "x")]), descriptor(&[("tight", "y")])],
        0,
    );
    assert_eq!(code(rls.ask(both.clone()).await.overall_code), Code::Ok);
    let response = rls.ask(both).await;
    assert_eq!(code(response.overall_code), Code::OverLimit);
    assert_eq!(code(response.statuses[0].code), Code::Ok);
    assert_eq!(code(response.statuses[1].code), Code::OverLimit);
    // The would-be denials are counted.
    let rendered = metrics.render();
    assert!(
        rendered
            .lines()
            .any(|line| line.starts_with("tollgate_decisions_total")
                && line.contains(r#"policy="envoy:messaging.canary""#)
                && line.contains(r#"outcome="shadow_denied""#)),
        "{rendered}"
    );
    rls.stop().await;
}

#[tokio::test]
async fn replaces_drops_the_replaced_limit() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    let vip = || {
        request(
            "messaging",
            vec![descriptor(&[("user", "alice")]), descriptor(&[("vip", "alice")])],
            0,
        )
    };
    // per_user allows 1 a day; vip replaces it with 3.
    for left in [2, 1, 0] {
        let response = rls.ask(vip()).await;
        assert_eq!(code(response.overall_code), Code::Ok);
        assert_eq!(
            response.statuses[0],
            DescriptorStatus {
                code: Code::Ok.into(),
                ..Default::default()
            },
            "replaced: no limit"
        );
        assert_eq!(limit_of(&response.statuses[1]), (3, Unit::Day, "vip"));
        assert_eq!(response.statuses[1].limit_remaining, left);
    }
    assert_eq!(code(rls.ask(vip()).await.overall_code), Code::OverLimit);
    // Without vip, per_user applies, and it was never spent.
    let alone = rls.ask(one(&[("user", "alice")])).await;
    assert_eq!(code(alone.overall_code), Code::Ok);
    assert_eq!(limit_of(&alone.statuses[0]), (1, Unit::Day, "per_user"));
    assert_eq!(alone.statuses[0].limit_remaining, 0);
    rls.stop().await;
}

/// A request denied by one descriptor spends nothing of the others.
async fn all_or_nothing(rls: &mut Rls) {
    let marketing = descriptor(&MARKETING);
    let tight = descriptor(&[("tight", "t")]);
    let both = request("messaging", vec![marketing.clone(), tight], 0);

    let first = rls.ask(both.clone()).await;
    assert_eq!(code(first.overall_code), Code::Ok);
    assert_eq!(first.statuses[0].limit_remaining, 2);
    assert_eq!(first.statuses[1].limit_remaining, 0);

    for _ in 0..3 {
        let denied = rls.ask(both.clone()).await;
        assert_eq!(code(denied.overall_code), Code::OverLimit);
        assert_eq!(code(denied.statuses[0].code), Code::Ok);
        assert_eq!(denied.statuses[0].limit_remaining, 2, "untouched");
        assert_eq!(code(denied.statuses[1].code), Code::OverLimit);
        assert_eq!(denied.statuses[1].limit_remaining, 0);
    }

    // The denied requests did not spend marketing's budget.
    let alone = rls.ask(request("messaging", vec![marketing], 0)).await;
    assert_eq!(code(alone.overall_code), Code::Ok);
    assert_eq!(alone.statuses[0].limit_remaining, 1);
}

#[tokio::test]
async fn a_denied_request_spends_no_budget() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    all_or_nothing(&mut rls).await;
    rls.stop().await;
}

#[tokio::test]
async fn zero_requests_per_unit_denies_everything_and_spends_nothing_else() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    let blocked = descriptor(&[("remote_address", "203.0.113.66")]);
    for _ in 0..3 {
        let response = rls.ask(request("messaging", vec![blocked.clone()], 1)).await;
        assert_eq!(code(response.overall_code), Code::OverLimit);
        let status = &response.statuses[0];
        assert_eq!(code(status.code), Code::OverLimit);
        assert_eq!(limit_of(status), (0, Unit::Minute, "blocked"));
        assert_eq!(status.limit_remaining, 0);
        assert!((1..=60).contains(&reset_secs(status)), "{status:?}");
    }
    // Other addresses are not blocked: the zero limit is on that value only.
    let other = rls
        .ask(request(
            "messaging",
            vec![descriptor(&[("remote_address", "203.0.113.67")])],
            1,
        ))
        .await;
    assert_eq!(code(other.overall_code), Code::Ok);

    // Beside a limited descriptor, the blocked one denies the request and spends nothing.
    let with_marketing = request("messaging", vec![descriptor(&MARKETING), blocked], 1);
    for _ in 0..5 {
        let response = rls.ask(with_marketing.clone()).await;
        assert_eq!(code(response.overall_code), Code::OverLimit);
        assert_eq!(code(response.statuses[0].code), Code::Ok);
        assert_eq!(response.statuses[0].limit_remaining, 3, "untouched");
    }

    // In shadow mode it answers OK, and does not stop the other descriptors.
    let scanner = descriptor(&[("scanner", "x")]);
    let response = rls
        .ask(request("messaging", vec![scanner, descriptor(&MARKETING)], 1))
        .await;
    assert_eq!(code(response.overall_code), Code::Ok);
    assert_eq!(limit_of(&response.statuses[0]), (0, Unit::Hour, ""));
    assert_eq!(response.statuses[1].limit_remaining, 2, "spent once");
    rls.stop().await;
}

#[tokio::test]
async fn statuses_follow_the_request_order() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    let response = rls
        .ask(request(
            "messaging",
            vec![
                descriptor(&[("ldap", "x")]),
                descriptor(&[("nothing", "x")]),
                descriptor(&MARKETING),
                descriptor(&[("path", "/api/a")]),
            ],
            0,
        ))
        .await;
    assert_eq!(code(response.overall_code), Code::Ok);
    let remaining: Vec<u32> = response.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(remaining, [u32::MAX, 0, 2, 1]);
    assert!(response.statuses[1].current_limit.is_none());
    rls.stop().await;
}

#[tokio::test]
async fn limits_without_an_upstream_unit_never_report_less_than_remains() {
    let mut rls = Rls::start("extensions.yaml", AnyStore::memory()).await;
    let cases: [(&str, (u32, Unit), u32); 3] = [
        ("login", (20, Unit::Hour), 4),      // 5 per 15 minutes, not 1 per minute
        ("window", (4_000, Unit::Hour), 99), // 100 per 90 s
        ("bucket", (600, Unit::Minute), 19), // 10 a second, a burst of 20
    ];
    for (key, (per_unit, unit), remaining) in cases {
        let answer = rls
            .ask(request("extensions", vec![descriptor(&[(key, "x")])], 0))
            .await;
        let status = &answer.statuses[0];
        assert_eq!(limit_of(status), (per_unit, unit, ""), "{key}");
        assert_eq!(status.limit_remaining, remaining, "{key}");
        assert!(status.limit_remaining <= per_unit, "{key}");
    }
    rls.stop().await;
}

fn overridden(entries: &[(&str, &str)], requests_per_unit: u32, unit: Unit) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit: unit.into(),
        }),
        ..descriptor(entries)
    }
}

#[tokio::test]
async fn a_limit_override_replaces_the_configured_limit() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    // `tight` allows 1 a day in the config; the override allows 3 an hour.
    let ask = || request("messaging", vec![overridden(&[("tight", "o")], 3, Unit::Hour)], 1);
    for left in [2, 1, 0] {
        let response = rls.ask(ask()).await;
        assert_eq!(code(response.overall_code), Code::Ok);
        assert_eq!(limit_of(&response.statuses[0]), (3, Unit::Hour, ""));
        assert_eq!(response.statuses[0].limit_remaining, left);
    }
    let denied = rls.ask(ask()).await;
    assert_eq!(code(denied.overall_code), Code::OverLimit);
    assert!((1..=3_600).contains(&reset_secs(&denied.statuses[0])));

    // Any descriptor of a known domain, matched by the config or not; each value counts apart.
    let unconfigured = rls
        .ask(request(
            "messaging",
            vec![overridden(&[("nothing", "x")], 1, Unit::Day)],
            1,
        ))
        .await;
    assert_eq!(code(unconfigured.overall_code), Code::Ok);
    assert_eq!(limit_of(&unconfigured.statuses[0]), (1, Unit::Day, ""));
    let again = rls
        .ask(request(
            "messaging",
            vec![overridden(&[("nothing", "x")], 1, Unit::Day)],
            1,
        ))
        .await;
    assert_eq!(code(again.overall_code), Code::OverLimit);
    let other_value = rls
        .ask(request(
            "messaging",
            vec![overridden(&[("nothing", "y")], 1, Unit::Day)],
            1,
        ))
        .await;
    assert_eq!(code(other_value.overall_code), Code::Ok);

    // The configured limit of `tight` was never spent by the overridden requests.
    let configured = rls.ask(one(&[("tight", "o")])).await;
    assert_eq!(code(configured.overall_code), Code::Ok);
    assert_eq!(limit_of(&configured.statuses[0]), (1, Unit::Day, ""));

    // Zero denies everything; an unknown domain has no limits at all, as upstream.
    let zero = rls
        .ask(request(
            "messaging",
            vec![overridden(&[("tight", "z")], 0, Unit::Second)],
            1,
        ))
        .await;
    assert_eq!(code(zero.overall_code), Code::OverLimit);
    assert_eq!(limit_of(&zero.statuses[0]), (0, Unit::Second, ""));
    let unknown = rls
        .ask(request(
            "elsewhere",
            vec![overridden(&[("tight", "z")], 0, Unit::Second)],
            1,
        ))
        .await;
    assert_eq!(code(unknown.overall_code), Code::Ok);
    assert!(unknown.statuses[0].current_limit.is_none());
    rls.stop().await;
}

#[tokio::test]
async fn any_number_of_distinct_limit_overrides_work() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    let ask = |requests: u32| {
        request(
            "messaging",
            vec![overridden(&[("k", "v")], requests, Unit::Day)],
            1,
        )
    };
    for requests in 1..=2_000u32 {
        let response = rls.ask(ask(requests)).await;
        assert_eq!(code(response.overall_code), Code::Ok, "override {requests}");
        assert_eq!(limit_of(&response.statuses[0]), (requests, Unit::Day, ""));
        assert_eq!(
            response.statuses[0].limit_remaining,
            requests - 1,
            "each override counts on its own"
        );
    }
    // The first override again, long after it left any cache: its budget is the one it spent.
    assert_eq!(code(rls.ask(ask(1)).await.overall_code), Code::OverLimit);
    // The configured limits keep working.
    assert_eq!(code(rls.ask(one(&[("tight", "x")])).await.overall_code), Code::Ok);
    rls.stop().await;
}

/// `entries` asked with a descriptor `hits_addend` of 0: the budget as it stands.
fn question(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: 0 }),
        ..descriptor(entries)
    }
}

#[tokio::test]
async fn a_denied_request_starts_the_penalty_of_each_descriptor_that_denied() {
    let mut rls = Rls::start("penalties.yaml", AnyStore::memory()).await;
    let user = [("user", "alice")];
    let ip = [("ip", "192.0.2.1")];
    let roomy = [("roomy", "r")];
    let all = request(
        "penalties",
        vec![descriptor(&user), descriptor(&ip), descriptor(&roomy)],
        1,
    );
    let first = rls.ask(all.clone()).await;
    assert_eq!(code(first.overall_code), Code::Ok);
    // Each window is at most an hour long, so a reset beyond an hour is the 2 h penalty.
    assert!(first.statuses.iter().all(|s| reset_secs(s) <= 3_600), "{first:?}");

    let denied = rls.ask(all).await;
    assert_eq!(code(denied.overall_code), Code::OverLimit);
    let codes: Vec<Code> = denied.statuses.iter().map(|s| code(s.code)).collect();
    assert_eq!(codes, [Code::OverLimit, Code::OverLimit, Code::Ok]);
    assert_eq!(denied.statuses[2].limit_remaining, 99, "untouched");

    // Asked alone afterwards, both denying descriptors are blocked for the penalty; the one
    // that allowed has neither spent nor been penalised.
    for entries in [&user, &ip] {
        let alone = rls.ask(request("penalties", vec![question(entries)], 1)).await;
        assert_eq!(code(alone.overall_code), Code::OverLimit, "{entries:?}");
        let reset = reset_secs(&alone.statuses[0]);
        assert!(
            (3_601..=7_200).contains(&reset),
            "{entries:?}: reset in {reset} s"
        );
    }
    let alone = rls.ask(request("penalties", vec![question(&roomy)], 1)).await;
    assert_eq!(code(alone.overall_code), Code::Ok);
    assert_eq!(alone.statuses[0].limit_remaining, 99);
    assert!(reset_secs(&alone.statuses[0]) <= 3_600);
    rls.stop().await;
}

#[tokio::test]
async fn the_same_descriptor_twice_spends_twice_from_one_budget_or_nothing() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    for _ in 0..2 {
        assert_eq!(code(rls.ask(one(&MARKETING)).await.overall_code), Code::Ok);
    }
    // One unit left; the request asks for two.
    let twice = request(
        "messaging",
        vec![descriptor(&MARKETING), descriptor(&MARKETING)],
        1,
    );
    let denied = rls.ask(twice).await;
    assert_eq!(code(denied.overall_code), Code::OverLimit);
    assert_eq!(code(denied.statuses[0].code), Code::OverLimit);
    assert_eq!(code(denied.statuses[1].code), Code::OverLimit);
    // Nothing was spent: the last unit is still there.
    let peek = rls.ask(request("messaging", vec![question(&MARKETING)], 1)).await;
    assert_eq!(code(peek.overall_code), Code::Ok);
    assert_eq!(peek.statuses[0].limit_remaining, 1);
    let last = rls.ask(one(&MARKETING)).await;
    assert_eq!(code(last.overall_code), Code::Ok);
    assert_eq!(last.statuses[0].limit_remaining, 0);
    rls.stop().await;
}

#[tokio::test]
async fn a_question_over_the_limit_refuses_the_request_and_spends_nothing() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    assert_eq!(code(rls.ask(one(&[("tight", "q")])).await.overall_code), Code::Ok);
    // Upstream: a budget exactly spent is not past its limit, so a question still answers OK.
    let asked = rls
        .ask(request("messaging", vec![question(&[("tight", "q")])], 1))
        .await;
    assert_eq!(code(asked.overall_code), Code::Ok);
    assert_eq!(asked.statuses[0].limit_remaining, 0);
    // A charge of one more takes the key past it.
    let charge = RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: 1 }),
        ..descriptor(&[("tight", "q")])
    };
    let charged = rls.ask(request("messaging", vec![charge], 1)).await;
    assert_eq!(
        code(charged.overall_code),
        Code::OverLimit,
        "recorded past the limit"
    );
    let both = request(
        "messaging",
        vec![question(&[("tight", "q")]), descriptor(&MARKETING)],
        1,
    );
    for _ in 0..2 {
        let response = rls.ask(both.clone()).await;
        assert_eq!(code(response.overall_code), Code::OverLimit);
        assert_eq!(code(response.statuses[0].code), Code::OverLimit);
        assert_eq!(code(response.statuses[1].code), Code::Ok);
        assert_eq!(response.statuses[1].limit_remaining, 3, "untouched");
    }
    rls.stop().await;
}

#[tokio::test]
async fn malformed_requests_are_errors_as_upstream() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    let status = rls
        .ask_err(request("", vec![descriptor(&[("tight", "x")])], 0))
        .await;
    assert_eq!(status.code(), tonic::Code::Unknown);
    assert_eq!(status.message(), "rate limit domain must not be empty");

    let status = rls.ask_err(request("messaging", vec![], 0)).await;
    assert_eq!(status.code(), tonic::Code::Unknown);
    assert_eq!(status.message(), "rate limit descriptor list must not be empty");

    let mut bad_unit = descriptor(&[("tight", "x")]);
    bad_unit.limit = Some(RateLimitOverride {
        requests_per_unit: 10,
        unit: Unit::Unknown.into(),
    });
    let status = rls
        .ask_err(request(
            "messaging",
            vec![descriptor(&[("ldap", "x")]), bad_unit],
            0,
        ))
        .await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "descriptors[1]: limit override unit must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR; got 0"
    );

    // `is_negative_hits` gives back its own hits_addend, which must say how much.
    let mut refund = descriptor(&[("tight", "x")]);
    refund.is_negative_hits = true;
    refund.hits_addend = Some(UInt64Value { value: 0 });
    let status = rls.ask_err(request("messaging", vec![refund], 0)).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);

    let huge = "v".repeat(9 * 1024);
    let status = rls.ask_err(one(&[("to_number", &huge)])).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");

    // The server is still there.
    assert_eq!(code(rls.ask(one(&[("tight", "x")])).await.overall_code), Code::Ok);
    rls.stop().await;
}

#[tokio::test]
async fn shutdown_lets_the_server_return() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    assert_eq!(code(rls.ask(one(&MARKETING)).await.overall_code), Code::Ok);
    rls.stop().await;
}

#[tokio::test]
async fn decides_in_redis() {
    let redis = tollgate_testkit::RedisServer::start();
    let store = common::redis_store(&redis.url()).await;
    let mut rls = Rls::start("messaging.yaml", store).await;

    for left in [2, 1, 0] {
        let response = rls
            .ask(one(&[("message_type", "marketing"), ("to_number", "1")]))
            .await;
        assert_eq!(code(response.overall_code), Code::Ok);
        assert_eq!(response.statuses[0].limit_remaining, left);
    }
    let response = rls
        .ask(one(&[("message_type", "marketing"), ("to_number", "1")]))
        .await;
    assert_eq!(code(response.overall_code), Code::OverLimit);
    assert!((1..=86_400).contains(&reset_secs(&response.statuses[0])));

    all_or_nothing(&mut rls).await;
    rls.stop().await;
}

#[tokio::test]
async fn negative_hits_give_back_what_was_spent() {
    let mut rls = Rls::start("messaging.yaml", AnyStore::memory()).await;
    let marketing = || descriptor(&MARKETING);
    let spent = rls.ask(request("messaging", vec![marketing()], 3)).await;
    assert_eq!(code(spent.overall_code), Code::Ok);
    let left = spent.statuses[0].limit_remaining;
    let mut refund = marketing();
    refund.is_negative_hits = true;
    refund.hits_addend = Some(UInt64Value { value: 2 });
    let refunded = rls.ask(request("messaging", vec![refund], 0)).await;
    assert_eq!(code(refunded.overall_code), Code::Ok);
    assert_eq!(refunded.statuses[0].limit_remaining, left + 2);
    // A request-level hits_addend is what a refund gives back when the descriptor has none.
    let mut refund = marketing();
    refund.is_negative_hits = true;
    let refunded = rls.ask(request("messaging", vec![refund], 1)).await;
    assert_eq!(refunded.statuses[0].limit_remaining, left + 3);
    rls.stop().await;
}
