//! envoyproxy/ratelimit's config features and answers over real gRPC, one fixture per feature
//! (`tests/fixtures/envoy/`), each case stating upstream's answer. The features that count run
//! on the memory store, on a real `redis-server` and on a real Redis Cluster.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_server::AnyStore;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::{Code, DescriptorStatus};
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse, UInt64Value};
use tollgate_server::{AppState, Settings};
use tollgate_server::{EnvoySettings, ResponseHeaders};
use tonic::transport::Channel;

/// A server on a free port over one fixture, and a client connected to it.
struct Rls {
    client: RateLimitServiceClient<Channel>,
    domain: &'static str,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl Rls {
    async fn start(fixture: &str, domain: &'static str, store: AnyStore, envoy: EnvoySettings) -> Rls {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/envoy")
            .join(fixture);
        let limits = tollgate_config::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let settings = Settings {
            envoy,
            ..Settings::default()
        };
        let state = AppState::new(limits, store, settings);
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
            client,
            domain,
            shutdown: Some(tx),
            server: Some(server),
        }
    }

    async fn ask_request(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        tokio::time::timeout(Duration::from_secs(10), self.client.should_rate_limit(request))
            .await
            .expect("answered within 10 s")
            .expect("OK status")
            .into_inner()
    }

    /// Asks for `descriptors` of the fixture's domain, with the request's `hits_addend` 0.
    async fn ask(&mut self, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
        let request = RateLimitRequest {
            domain: self.domain.to_owned(),
            descriptors,
            hits_addend: 0,
        };
        self.ask_request(request).await
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

fn d(entries: &[(&str, &str)]) -> RateLimitDescriptor {
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

/// A descriptor with its own `hits_addend`.
fn d_hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        ..d(entries)
    }
}

fn code(value: i32) -> Code {
    Code::try_from(value).expect("a known code")
}

/// `(code, limit_remaining, requests_per_unit)` of each status, then the overall code.
fn summary(response: &RateLimitResponse) -> (Vec<(Code, u32, u32)>, Code) {
    let statuses = response
        .statuses
        .iter()
        .map(|s: &DescriptorStatus| {
            (
                code(s.code),
                s.limit_remaining,
                s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit),
            )
        })
        .collect();
    (statuses, code(response.overall_code))
}

const OK: Code = Code::Ok;
const OVER: Code = Code::OverLimit;

/// Runs `case` on the memory store, on a real `redis-server` and on a real three-master Redis
/// Cluster.
macro_rules! on_memory_and_redis {
    ($memory:ident, $redis:ident, $cluster:ident, $case:ident) => {
        #[tokio::test]
        async fn $memory() {
            $case(AnyStore::memory()).await;
        }

        #[tokio::test]
        async fn $redis() {
            let redis = tollgate_testkit::RedisServer::start();
            let store = common::redis_store(&redis.url()).await;
            $case(store).await;
        }

        #[tokio::test]
        async fn $cluster() {
            let cluster = tollgate_testkit::RedisCluster::start();
            let nodes: Vec<String> = cluster
                .ports()
                .iter()
                .map(|p| format!("127.0.0.1:{p}"))
                .collect();
            let url = format!("redis+cluster://{}", nodes.join(","));
            let store = common::redis_store(&url).await;
            $case(store).await;
        }
    };
}

// Wildcards.

async fn wildcards(store: AnyStore) {
    let mut rls = Rls::start("wildcards.yaml", "wildcards", store, EnvoySettings::default()).await;
    // Upstream: the exact value wins over the wildcard that also matches it.
    let special = rls
        .ask(vec![d(&[("path", "/api/v1/orders/special/items")])])
        .await;
    assert_eq!(summary(&special), (vec![(OK, 4, 5)], OK));
    assert_eq!(
        special.statuses[0].current_limit.as_ref().unwrap().name,
        "special"
    );
    // Upstream: `/api/*/orders/*/items` matches, each value with its own counter of 2.
    for left in [1, 0] {
        let r = rls.ask(vec![d(&[("path", "/api/v2/orders/9/items")])]).await;
        assert_eq!(summary(&r), (vec![(OK, left, 2)], OK));
    }
    let r = rls.ask(vec![d(&[("path", "/api/v2/orders/9/items")])]).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 2)], OVER));
    let r = rls.ask(vec![d(&[("path", "/api/v2/orders/10/items")])]).await;
    assert_eq!(
        summary(&r),
        (vec![(OK, 1, 2)], OK),
        "another value, another counter"
    );
    // Upstream: each star may match nothing.
    let r = rls.ask(vec![d(&[("path", "/api//orders//items")])]).await;
    assert_eq!(summary(&r), (vec![(OK, 1, 2)], OK));
    // Upstream: no wildcard matches, so the descriptor without a value does.
    let r = rls.ask(vec![d(&[("path", "/api/v2/orders/9/other")])]).await;
    assert_eq!(summary(&r), (vec![(OK, 99, 100)], OK));
    // Upstream: with share_threshold every matching value spends from one counter of 3.
    for (file, left) in [("/files/a", 2), ("/files/b", 1), ("/files/c", 0)] {
        let r = rls.ask(vec![d(&[("path", file)])]).await;
        assert_eq!(summary(&r), (vec![(OK, left, 3)], OK), "{file}");
    }
    let r = rls.ask(vec![d(&[("path", "/files/d")])]).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 3)], OVER));
    rls.stop().await;
}

on_memory_and_redis!(
    wildcards_on_memory,
    wildcards_on_redis,
    wildcards_on_cluster,
    wildcards
);

// Quota mode.

async fn quota_mode(store: AnyStore) {
    let mut rls = Rls::start("quota_mode.yaml", "quota", store, EnvoySettings::default()).await;
    let both = || vec![d(&[("backend", "search")]), d(&[("backend", "checkout")])];
    // Upstream: both quotas have budget.
    let r = rls.ask(both()).await;
    assert_eq!(summary(&r), (vec![(OK, 0, 1), (OK, 1, 2)], OK));
    // Upstream: `search` is over and says so, but `checkout` still has budget: OK overall.
    let r = rls.ask(both()).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 1), (OK, 0, 2)], OK));
    // Upstream: every quota-mode descriptor is over: OVER_LIMIT.
    let r = rls.ask(both()).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 1), (OVER, 0, 2)], OVER));
    // Upstream: the only quota-mode descriptor of this request is over: OVER_LIMIT, whatever
    // the plain descriptor says.
    let r = rls
        .ask(vec![d(&[("backend", "search")]), d(&[("user", "u1")])])
        .await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 1), (OK, 9, 10)], OVER));
    rls.stop().await;
}

on_memory_and_redis!(
    quota_mode_on_memory,
    quota_mode_on_redis,
    quota_mode_on_cluster,
    quota_mode
);

#[tokio::test]
async fn global_quota_mode_puts_every_descriptor_in_quota_mode() {
    let mut settings = EnvoySettings::default();
    settings.global_quota_mode = true;
    let mut rls = Rls::start("shadow.yaml", "shadow", AnyStore::memory(), settings).await;
    let pair = |a: &str, b: &str| vec![d(&[("user", a)]), d(&[("user", b)])];
    let r = rls.ask(pair("a", "b")).await;
    assert_eq!(summary(&r), (vec![(OK, 0, 1), (OK, 0, 1)], OK));
    // Upstream: one over, one with budget: OK overall.
    let r = rls.ask(pair("a", "c")).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 1), (OK, 0, 1)], OK));
    // Upstream: all over: OVER_LIMIT.
    let r = rls.ask(pair("a", "b")).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 1), (OVER, 0, 1)], OVER));
    rls.stop().await;
}

// hits_addend.

async fn hits_addend(store: AnyStore) {
    let mut rls = Rls::start("hits_addend.yaml", "tokens", store, EnvoySettings::default()).await;
    let user = [("user", "u1")];
    // Upstream: a request-level hits_addend of 0 means 1.
    let r = rls.ask(vec![d(&user)]).await;
    assert_eq!(summary(&r), (vec![(OK, 4, 5)], OK));
    // Upstream: a descriptor's hits_addend of 0 spends nothing and answers OK with the budget.
    for _ in 0..2 {
        let r = rls.ask(vec![d_hits(&user, 0)]).await;
        assert_eq!(summary(&r), (vec![(OK, 4, 5)], OK));
    }
    // Upstream: the request's hits_addend applies to descriptors without their own.
    let request = RateLimitRequest {
        domain: "tokens".into(),
        descriptors: vec![d(&user), d_hits(&[("team", "t1")], 40)],
        hits_addend: 3,
    };
    let r = rls.ask_request(request).await;
    assert_eq!(summary(&r), (vec![(OK, 1, 5), (OK, 60, 100)], OK));
    let r = rls.ask(vec![d_hits(&user, 0)]).await;
    assert_eq!(summary(&r), (vec![(OK, 1, 5)], OK));
    // Upstream: a charge past the limit is over.
    let r = rls.ask(vec![d_hits(&user, 2)]).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 5)], OVER));
    rls.stop().await;
}

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: a request over the limit records none of its
/// charges; without it the charge is recorded whatever the other descriptors say.
async fn stop_charges_when_over(store: AnyStore) {
    let mut settings = EnvoySettings::default();
    settings.stop_charges_when_over = true;
    let mut recording = Rls::start(
        "hits_addend.yaml",
        "tokens",
        store.clone(),
        EnvoySettings::default(),
    )
    .await;
    let mut stopping = Rls::start("hits_addend.yaml", "tokens", store, settings).await;
    for (rls, user, team, left) in [
        (&mut recording, "spent-a", "team-a", 60),
        (&mut stopping, "spent-b", "team-b", 100),
    ] {
        // Spend the user's five, then ask again for the user with a charge of 40 on the team.
        let request = |cost| RateLimitRequest {
            domain: "tokens".into(),
            descriptors: vec![d(&[("user", user)])],
            hits_addend: cost,
        };
        assert_eq!(summary(&rls.ask_request(request(5)).await).1, OK);
        let r = rls
            .ask(vec![d(&[("user", user)]), d_hits(&[("team", team)], 40)])
            .await;
        assert_eq!(r.overall_code, Code::OverLimit as i32, "{user}");
        let r = rls.ask(vec![d_hits(&[("team", team)], 0)]).await;
        assert_eq!(summary(&r), (vec![(OK, left, 100)], OK), "{team}");
    }
    recording.stop().await;
    stopping.stop().await;
}

on_memory_and_redis!(
    stop_charges_when_over_on_memory,
    stop_charges_when_over_on_redis,
    stop_charges_when_over_on_cluster,
    stop_charges_when_over
);

on_memory_and_redis!(
    hits_addend_on_memory,
    hits_addend_on_redis,
    hits_addend_on_cluster,
    hits_addend
);

async fn overcharges(store: AnyStore) {
    let mut settings = EnvoySettings::default();
    settings.count_every_descriptor = true;
    let mut strict = Rls::start(
        "hits_addend.yaml",
        "tokens",
        store.clone(),
        EnvoySettings::default(),
    )
    .await;
    let mut compat = Rls::start("hits_addend.yaml", "tokens", store, settings).await;
    for (rls, user) in [(&mut strict, "strict"), (&mut compat, "compat")] {
        let r = rls.ask(vec![d_hits(&[("user", user)], 3)]).await;
        assert_eq!(summary(&r), (vec![(OK, 2, 5)], OK));
        // Upstream: a charge of 4 with 2 left is over (its counter goes to 7), and recorded.
        let r = rls.ask(vec![d_hits(&[("user", user)], 4)]).await;
        assert_eq!(summary(&r), (vec![(OVER, 0, 5)], OVER));
        // The budget is gone, so the next question is over, with or without the switch: a
        // descriptor's own hits_addend is a charge.
        let r = rls.ask(vec![d_hits(&[("user", user)], 0)]).await;
        assert_eq!(summary(&r), (vec![(OVER, 0, 5)], OVER));
    }
    // A request-level hits_addend is still checked all or nothing: refused, it spends nothing.
    let request = |user: &str| RateLimitRequest {
        domain: "tokens".into(),
        descriptors: vec![d(&[("user", user)])],
        hits_addend: 4,
    };
    let r = strict.ask_request(request("checked")).await;
    assert_eq!(summary(&r), (vec![(OK, 1, 5)], OK));
    let r = strict.ask_request(request("checked")).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 5)], OVER));
    let r = strict.ask(vec![d_hits(&[("user", "checked")], 0)]).await;
    assert_eq!(
        summary(&r),
        (vec![(OK, 1, 5)], OK),
        "the refused request spent nothing"
    );
    strict.stop().await;
    compat.stop().await;
}

on_memory_and_redis!(
    overcharges_on_memory,
    overcharges_on_redis,
    overcharges_on_cluster,
    overcharges
);

// Shadow mode: per descriptor and global.

#[tokio::test]
async fn shadow_mode_descriptors_answer_ok_and_global_shadow_mode_answers_ok_overall() {
    let mut rls = Rls::start(
        "shadow.yaml",
        "shadow",
        AnyStore::memory(),
        EnvoySettings::default(),
    )
    .await;
    rls.ask(vec![d(&[("trial", "t")])]).await;
    // Upstream: a shadow_mode descriptor over its limit answers OK.
    let r = rls.ask(vec![d(&[("trial", "t")])]).await;
    assert_eq!(summary(&r), (vec![(OK, 0, 1)], OK));
    // Upstream: an unlimited descriptor has no limit and u32::MAX remaining.
    let r = rls.ask(vec![d(&[("internal", "i")])]).await;
    assert_eq!(summary(&r), (vec![(OK, u32::MAX, 0)], OK));
    rls.stop().await;

    let metrics = tollgate_server::metrics::install();
    let mut settings = EnvoySettings::default();
    settings.global_shadow_mode = true;
    let mut rls = Rls::start("shadow.yaml", "shadow", AnyStore::memory(), settings).await;
    let r = rls.ask(vec![d(&[("user", "g")])]).await;
    assert_eq!(summary(&r), (vec![(OK, 0, 1)], OK));
    // Upstream: the descriptor keeps its OVER_LIMIT status; the overall code is OK.
    let r = rls.ask(vec![d(&[("user", "g")])]).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 1)], OK));
    let rendered = metrics.render();
    assert!(
        rendered
            .lines()
            .any(|l| l.starts_with("tollgate_envoy_global_shadow_mode_total ") && !l.ends_with(" 0")),
        "{rendered}"
    );
    rls.stop().await;
}

// Upstream's counting, as a compatibility switch.

async fn count_every_descriptor(store: AnyStore) {
    let mut settings = EnvoySettings::default();
    settings.count_every_descriptor = true;
    let mut rls = Rls::start("shadow.yaml", "shadow", store.clone(), EnvoySettings::default()).await;
    let mut compat = Rls::start("shadow.yaml", "shadow", store, settings).await;
    // Both servers share the store: spend `over`'s only request once.
    let r = rls.ask(vec![d(&[("user", "over")])]).await;
    assert_eq!(summary(&r).1, OK);
    // By default a request over the limit spends nothing: `strict` keeps its budget.
    let r = rls
        .ask(vec![d(&[("user", "strict")]), d(&[("user", "over")])])
        .await;
    assert_eq!(summary(&r), (vec![(OK, 1, 1), (OVER, 0, 1)], OVER));
    let r = rls.ask(vec![d(&[("user", "strict")])]).await;
    assert_eq!(summary(&r), (vec![(OK, 0, 1)], OK));
    // Upstream (and the switch): `counted` spends although `over` is over.
    let r = compat
        .ask(vec![d(&[("user", "counted")]), d(&[("user", "over")])])
        .await;
    assert_eq!(summary(&r), (vec![(OK, 0, 1), (OVER, 0, 1)], OVER));
    let r = compat.ask(vec![d(&[("user", "counted")])]).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 1)], OVER));
    // upstream's fixed_cache_impl_test (hits [0, 1]): after a denied request, a question
    // about a key whose budget is exactly spent is over, since upstream counted the denied hit.
    // tollgate's own counting never counts a refused hit, so the same question is OK there.
    for (server, user, expected) in [(&mut rls, "asked", OK), (&mut compat, "asked-compat", OVER)] {
        let r = server.ask(vec![d(&[("user", user)])]).await;
        assert_eq!(summary(&r).1, OK);
        let r = server.ask(vec![d(&[("user", user)])]).await;
        assert_eq!(summary(&r).1, OVER);
        let r = server.ask(vec![d_hits(&[("user", user)], 0)]).await;
        assert_eq!(summary(&r), (vec![(expected, 0, 1)], expected), "{user}");
    }
    rls.stop().await;
    compat.stop().await;
}

on_memory_and_redis!(
    count_every_descriptor_on_memory,
    count_every_descriptor_on_redis,
    count_every_descriptor_on_cluster,
    count_every_descriptor
);

// Rate limit headers.

#[tokio::test]
async fn headers_describe_the_descriptor_closest_to_its_limit_when_enabled() {
    let mut rls = Rls::start(
        "shadow.yaml",
        "shadow",
        AnyStore::memory(),
        EnvoySettings::default(),
    )
    .await;
    let r = rls.ask(vec![d(&[("user", "h")])]).await;
    assert!(
        r.response_headers_to_add.is_empty(),
        "off by default, as upstream"
    );
    rls.stop().await;

    let mut settings = EnvoySettings::default();
    settings.response_headers = Some(ResponseHeaders::new(
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
    ));
    let mut rls = Rls::start("hits_addend.yaml", "tokens", AnyStore::memory(), settings).await;
    let headers = |r: &RateLimitResponse| -> Vec<(String, String)> {
        r.response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect()
    };
    // Upstream: the descriptor with the least budget left.
    let r = rls.ask(vec![d(&[("team", "t")]), d(&[("user", "u")])]).await;
    let got = headers(&r);
    assert_eq!(
        got[..2],
        [
            ("X-RateLimit-Limit".to_owned(), "5".to_owned()),
            ("X-RateLimit-Remaining".to_owned(), "4".to_owned())
        ]
    );
    assert_eq!(got[2].0, "X-RateLimit-Reset");
    let reset: u64 = got[2].1.parse().expect("seconds");
    assert!((1..=86_400).contains(&reset), "{reset}");
    // Upstream: a descriptor over its limit is the one described.
    let r = rls
        .ask(vec![d_hits(&[("user", "u")], 5), d(&[("team", "t")])])
        .await;
    assert_eq!(summary(&r).1, OVER);
    assert_eq!(
        headers(&r)[..2],
        [
            ("X-RateLimit-Limit".to_owned(), "5".to_owned()),
            ("X-RateLimit-Remaining".to_owned(), "0".to_owned())
        ]
    );
    rls.stop().await;
}

// Metadata.

#[tokio::test]
async fn dynamic_metadata_carries_the_metadata_of_the_descriptors_that_passed() {
    let mut settings = EnvoySettings::default();
    settings.response_dynamic_metadata = true;
    let mut rls = Rls::start("quota_mode.yaml", "quota", AnyStore::memory(), settings).await;
    let both = || vec![d(&[("backend", "search")]), d(&[("backend", "checkout")])];
    let name = |r: &RateLimitResponse| -> String {
        use envoy_types::pb::google::protobuf::value::Kind;
        let fields = &r.dynamic_metadata.as_ref().expect("dynamic metadata").fields;
        assert_eq!(fields["domain"].kind, Some(Kind::StringValue("quota".into())));
        let Some(Kind::StructValue(metadata)) = &fields["metadata"].kind else {
            panic!("metadata: {fields:?}")
        };
        let Some(Kind::StructValue(backend)) = &metadata.fields["backend_with_quota"].kind else {
            panic!("backend_with_quota: {metadata:?}")
        };
        match &backend.fields["name"].kind {
            Some(Kind::StringValue(name)) => name.clone(),
            other => panic!("name: {other:?}"),
        }
    };
    // Upstream: both passed; the first descriptor's value stays on a clash.
    assert_eq!(name(&rls.ask(both()).await), "search");
    // Upstream: `search` is over, so only `checkout`'s metadata is returned.
    assert_eq!(name(&rls.ask(both()).await), "checkout");
    rls.stop().await;
}

// Per-stats-key counters.

/// The value of `metric{key="<key>"}` in the rendered metrics, 0 when absent.
fn counter(rendered: &str, metric: &str, key: &str) -> u64 {
    let prefix = format!("{metric}{{key=\"{key}\"}} ");
    rendered
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().expect("a number"))
}

#[tokio::test]
async fn per_stats_key_counters_follow_upstreams_stats() {
    let metrics = tollgate_server::metrics::install();
    let mut rls = Rls::start(
        "stats.yaml",
        "stats",
        AnyStore::memory(),
        EnvoySettings::default(),
    )
    .await;
    for _ in 0..2 {
        rls.ask(vec![d(&[("route", "api"), ("method", "GET")])]).await;
        rls.ask(vec![d(&[("shadowed", "x")])]).await;
    }
    rls.ask(vec![d(&[("session", "s1")])]).await;
    rls.ask(vec![d(&[("files", "files/a")])]).await;
    rls.ask(vec![d(&[("files", "files/b")])]).await;
    let r = metrics.render();
    // value_to_metric: the request's value on its level.
    assert_eq!(
        counter(&r, "tollgate_envoy_total_hits_total", "stats.route_api.method"),
        2
    );
    assert_eq!(
        counter(&r, "tollgate_envoy_within_limit_total", "stats.route_api.method"),
        2
    );
    // detailed_metric: every value.
    assert_eq!(
        counter(&r, "tollgate_envoy_total_hits_total", "stats.session_s1"),
        1
    );
    // share_threshold: the pattern.
    assert_eq!(
        counter(&r, "tollgate_envoy_total_hits_total", "stats.files_files/*"),
        2
    );
    // A limit of 3 with a near-limit ratio of 0.8: neither hit takes the count past 2.
    assert_eq!(
        counter(&r, "tollgate_envoy_near_limit_total", "stats.files_files/*"),
        0
    );
    // Shadow mode: the second hit is over and counted as shadow mode too.
    assert_eq!(
        counter(&r, "tollgate_envoy_total_hits_total", "stats.shadowed"),
        2
    );
    assert_eq!(
        counter(&r, "tollgate_envoy_over_limit_total", "stats.shadowed"),
        1
    );
    assert_eq!(
        counter(&r, "tollgate_envoy_shadow_mode_total", "stats.shadowed"),
        1
    );
    assert_eq!(
        counter(&r, "tollgate_envoy_near_limit_total", "stats.shadowed"),
        1
    );
    rls.stop().await;
}

#[tokio::test]
async fn stats_keys_past_the_cap_are_folded_into_one_label() {
    let metrics = tollgate_server::metrics::install();
    let mut settings = EnvoySettings::default();
    settings.max_stats_keys = 2;
    let mut rls = Rls::start("stats.yaml", "stats", AnyStore::memory(), settings).await;
    for i in 0..10 {
        rls.ask(vec![d(&[("session", &format!("cap{i}"))])]).await;
    }
    let r = metrics.render();
    assert_eq!(
        counter(&r, "tollgate_envoy_total_hits_total", "stats.session_cap0"),
        1
    );
    assert_eq!(
        counter(&r, "tollgate_envoy_total_hits_total", "stats.session_cap1"),
        1
    );
    assert!(!r.contains("stats.session_cap2"), "{r}");
    assert!(
        counter(
            &r,
            "tollgate_envoy_total_hits_total",
            tollgate_server::grpc::OVERFLOW_KEY
        ) >= 8,
        "{r}"
    );
    rls.stop().await;
}

// Domains across files.

#[tokio::test]
async fn a_domain_split_across_files_loads_and_reloads_when_merging_is_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = |key: &str, requests: u32| {
        format!(
            "domain: split\ndescriptors:\n  - key: {key}\n    rate_limit: {{unit: day, requests_per_unit: {requests}}}\n"
        )
    };
    std::fs::write(dir.path().join("a.yaml"), file("user", 1)).expect("write");
    std::fs::write(dir.path().join("b.yaml"), file("team", 2)).expect("write");
    // Upstream, without MERGE_DOMAIN_CONFIG: the second file is refused.
    assert!(tollgate_config::load(dir.path()).is_err());
    let settings = Settings {
        load: tollgate_config::LoadOptions::default().with_merge_domains(true),
        ..Settings::default()
    };
    let state = AppState::new(tollgate_config::Limits::default(), AnyStore::memory(), settings);
    // Upstream, with it: one domain with the descriptors of both files.
    assert!(tollgate_server::reload::reload(&state, dir.path()));
    let limits = state.limits.load();
    let max = |key: &str| {
        limits
            .resolve("split", &[(key.to_owned(), "x".to_owned())])
            .and_then(|r| r.policy().map(tollgate::Policy::max_cost))
    };
    assert_eq!((max("user"), max("team")), (Some(1), Some(2)));
}

// A config with every feature of upstream's example.

#[tokio::test]
async fn a_config_like_upstreams_example_answers_as_upstream() {
    let mut rls = Rls::start(
        "example.yaml",
        "shop",
        AnyStore::memory(),
        EnvoySettings::default(),
    )
    .await;
    // Upstream: `premium` replaces `per_customer`, so `gift` is neither checked nor counted.
    let r = rls
        .ask(vec![
            d(&[("plan", "premium")]),
            d(&[("cart", "c"), ("item", "gift")]),
        ])
        .await;
    assert_eq!(summary(&r), (vec![(OK, 39, 40), (OK, 0, 0)], OK));
    assert!(r.statuses[1].current_limit.is_none());
    // Upstream: `banned` has requests_per_unit 0 and is over, with its name.
    let r = rls.ask(vec![d(&[("cart", "c"), ("item", "banned")])]).await;
    assert_eq!(summary(&r), (vec![(OVER, 0, 0)], OVER));
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().name, "blocked");
    // Upstream: a matched limit replacing `blocked` lets the same descriptor through.
    let r = rls
        .ask(vec![
            d(&[("cart", "c"), ("item", "banned")]),
            d(&[("region", "eu"), ("customer", "blocked-override")]),
        ])
        .await;
    assert_eq!(summary(&r), (vec![(OK, 0, 0), (OK, 4, 5)], OK));
    // Upstream: the shadow-mode coupon answers OK past its limit of 2.
    for _ in 0..3 {
        let r = rls.ask(vec![d(&[("cart", "c"), ("coupon", "trial")])]).await;
        assert_eq!(summary(&r).1, OK);
        assert_eq!(code(r.statuses[0].code), OK);
    }
    // Upstream: unlimited, nested and at the top.
    for entries in [&[("cart", "c"), ("wishlist", "w")][..], &[("health", "h")][..]] {
        let r = rls.ask(vec![d(entries)]).await;
        assert_eq!(summary(&r), (vec![(OK, u32::MAX, 0)], OK), "{entries:?}");
    }
    // Upstream: the nested default for any item, and the top-level default for the cart.
    let r = rls
        .ask(vec![d(&[("cart", "c"), ("item", "book")]), d(&[("cart", "c")])])
        .await;
    assert_eq!(summary(&r), (vec![(OK, 8, 9), (OK, 5, 6)], OK));
    rls.stop().await;
}

// Costs charged after the response: ask with a hits_addend of 0, debit the real cost after.

async fn token_quota(store: AnyStore) {
    let mut rls = Rls::start("token_quota.yaml", "token_quota", store, EnvoySettings::default()).await;
    let service = [("service", "service_2")];
    // Upstream's script: each request is asked with 0 and debited 1 once served. A budget
    // exactly spent is not past its limit, so requests 1 to 3 pass and the 4th is limited.
    let mut passed = vec![];
    for _ in 0..4 {
        let asked = rls.ask(vec![d_hits(&service, 0)]).await;
        let ok = asked.overall_code == i32::from(Code::Ok);
        passed.push(ok);
        if ok {
            rls.ask(vec![d_hits(&service, 1)]).await;
        }
    }
    assert_eq!(passed, [true, true, true, false]);

    // A thousand tokens, each answer costing 600: the second request finds 400 left and passes,
    // its debit goes past the limit, and nothing passes after it.
    let tenant = [("tenant", "t1")];
    let mut served = 0;
    for _ in 0..10 {
        let asked = rls.ask(vec![d_hits(&tenant, 0)]).await;
        if asked.overall_code != i32::from(Code::Ok) {
            continue;
        }
        served += 1;
        let debited = rls.ask(vec![d_hits(&tenant, 600)]).await;
        let over = debited.overall_code == i32::from(Code::OverLimit);
        assert_eq!(over, served == 2, "the debit that crossed the budget says so");
    }
    assert_eq!(served, 2);
    rls.stop().await;
}

on_memory_and_redis!(
    token_quota_on_memory,
    token_quota_on_redis,
    token_quota_on_cluster,
    token_quota
);
