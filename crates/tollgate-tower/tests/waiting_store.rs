//! The layer decides in two ways: in `call`, for a memory store (its decisions are ready at once),
//! and in a boxed future, for a store that has to be waited for. These tests run the same
//! requests through both, over a store that really waits (it yields to the runtime before every
//! decision, as a network store does), and require the same answers, byte for byte.

mod common;

use std::time::Duration;

use axum::Router;
use axum::http::{HeaderName, StatusCode};
use common::{Answer, policy, request, routes, send};
use tollgate::{Decisions, Error, ManualClock, MemoryStore, Policy, Rule, Store};
use tollgate_tower::{KeyExtractor, RateLimitLayer};

const MINUTE: Duration = Duration::from_secs(60);

/// A memory store behind one `yield_now`: pending at its first poll, like a network store.
struct Waiting(MemoryStore<ManualClock>);

impl Store for Waiting {
    async fn decide(&self, rules: &[Rule<'_>], commit: bool) -> Result<Decisions, Error> {
        tokio::task::yield_now().await;
        self.0.decide(rules, commit)
    }

    async fn reset(&self, policy: &Policy, key: &[u8]) -> Result<(), Error> {
        tokio::task::yield_now().await;
        self.0.reset(policy, key)
    }
}

/// Two rules (per address, per API key, the key optional), on `store`.
fn app<S: Store + 'static>(store: S) -> Router {
    let api_key = KeyExtractor::header(HeaderName::from_static("x-api-key"));
    let layer = RateLimitLayer::builder(store)
        .policy(tollgate_tower::KeyedPolicy::new(
            policy("ip", 4, MINUTE),
            KeyExtractor::peer_ip(),
        ))
        .policy(
            tollgate_tower::KeyedPolicy::new(policy("key", 2, MINUTE), api_key)
                .on_missing_key(tollgate_tower::MissingKey::Skip),
        )
        .build()
        .expect("valid layer");
    routes().layer(layer)
}

fn one_rule_app<S: Store + 'static>(store: S) -> Router {
    routes().layer(RateLimitLayer::new(
        store,
        tollgate_tower::KeyedPolicy::new(policy("api", 3, MINUTE), KeyExtractor::peer_ip()),
    ))
}

fn answers_match(now: &Answer, waited: &Answer, step: usize) {
    assert_eq!(now.status, waited.status, "step {step}");
    assert_eq!(now.headers, waited.headers, "step {step}");
    assert_eq!(now.body, waited.body, "step {step}");
}

#[tokio::test]
async fn a_store_that_waits_gets_the_same_answers_as_the_memory_store() {
    let clock = ManualClock::new(0);
    let now = app(MemoryStore::builder().clock(clock.clone()).build());
    let waited = app(Waiting(MemoryStore::builder().clock(clock.clone()).build()));
    let steps: [(&str, &[(&str, &str)]); 7] = [
        ("192.0.2.1:1", &[]),
        ("192.0.2.1:1", &[("x-api-key", "k1")]),
        ("192.0.2.1:1", &[("x-api-key", "k1")]),
        ("192.0.2.1:1", &[("x-api-key", "k1")]),
        ("192.0.2.1:1", &[]),
        ("192.0.2.1:1", &[]),
        ("192.0.2.2:1", &[("x-api-key", "k2")]),
    ];
    let mut statuses = Vec::new();
    for (step, (peer, headers)) in steps.iter().enumerate() {
        let a = send(&now, request("/", peer, headers)).await;
        let b = send(&waited, request("/", peer, headers)).await;
        answers_match(&a, &b, step);
        statuses.push(a.status);
    }
    use StatusCode as S;
    assert_eq!(
        statuses,
        [
            S::OK,
            S::OK,
            S::OK,
            S::TOO_MANY_REQUESTS,
            S::OK,
            S::TOO_MANY_REQUESTS,
            S::OK
        ],
        "the per-key budget of 2 and the per-address budget of 4 both bite"
    );
}

#[tokio::test]
async fn one_rule_over_a_store_that_waits_limits_and_reports_like_memory() {
    let clock = ManualClock::new(0);
    let now = one_rule_app(MemoryStore::builder().clock(clock.clone()).build());
    let waited = one_rule_app(Waiting(MemoryStore::builder().clock(clock.clone()).build()));
    for step in 0..5 {
        let a = send(&now, request("/users/7", "[2001:db8::1]:1", &[])).await;
        let b = send(&waited, request("/users/7", "[2001:db8::1]:1", &[])).await;
        answers_match(&a, &b, step);
        let expected = if step < 3 {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(b.status, expected, "step {step}");
        assert_eq!(b.header("ratelimit-policy"), r#""api";q=3;w=60"#);
    }
    // No peer address (served without connect info): both answer 500 without asking the store.
    let a = send(&now, axum::http::Request::new(axum::body::Body::empty())).await;
    let b = send(&waited, axum::http::Request::new(axum::body::Body::empty())).await;
    answers_match(&a, &b, 5);
    assert_eq!(b.status, StatusCode::INTERNAL_SERVER_ERROR);
}
