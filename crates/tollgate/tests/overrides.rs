//! Overrides on the memory store: expiry on the store's clock, validation, and the in-force
//! override. (The shared override vectors run on every store in tollgate-redis's conformance
//! tests.)

use std::time::Duration;

use tollgate::overrides::{Override, OverrideStore, OverrideTarget};
use tollgate::{Algorithm, Engine, ManualClock, MemoryStore, Policy, Rate, Rule};

#[test]
fn a_key_override_lapses_at_its_ttl() {
    let clock = ManualClock::new(0);
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let api = Policy::new("api", Algorithm::gcra(Rate::per_second(1).unwrap(), 1).unwrap()).unwrap();
    let more = Algorithm::gcra(Rate::per_second(10).unwrap(), 10).unwrap();
    let value = Override::new(
        &api,
        OverrideTarget::key("k"),
        more,
        Some(Duration::from_secs(60)),
    )
    .unwrap();
    store.set_override(&api, &value).unwrap();
    assert_eq!(store.peek(&api, "k", 1).unwrap().limit, 10);
    clock.advance(Duration::from_secs(59));
    let listed = store.list_overrides(&api, None, 10).unwrap().overrides;
    assert_eq!(listed[0].expires_in, Some(Duration::from_secs(1)));
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.peek(&api, "k", 1).unwrap().limit, 1);
    assert!(store.list_overrides(&api, None, 10).unwrap().overrides.is_empty());
    assert!(
        store
            .get_override(&api, &OverrideTarget::key("k"))
            .unwrap()
            .is_none()
    );
}

#[test]
fn overrides_are_validated_like_limits() {
    let api = Policy::new("api", Algorithm::gcra(Rate::per_second(1).unwrap(), 1).unwrap()).unwrap();
    let gcra = Algorithm::gcra(Rate::per_second(2).unwrap(), 2).unwrap();
    let err = Override::new(&api, OverrideTarget::key(""), gcra.clone(), None).unwrap_err();
    assert_eq!(err.to_string(), "key must not be empty");
    let err = Override::new(&api, OverrideTarget::prefix("p"), gcra, Some(Duration::ZERO)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ttl is 0ns, outside the supported range 1ms to 86400000s"
    );
    // The algorithm's own bounds: a burst of 0 never builds.
    assert!(Algorithm::gcra(Rate::per_second(2).unwrap(), 0).is_err());
}

#[test]
fn overrides_of_one_policy_never_touch_another() {
    let store = MemoryStore::new();
    let a = Policy::new("a", Algorithm::sliding_log(1, Duration::from_secs(60)).unwrap()).unwrap();
    let b = Policy::new("b", Algorithm::sliding_log(1, Duration::from_secs(60)).unwrap()).unwrap();
    let more = Algorithm::sliding_log(9, Duration::from_secs(60)).unwrap();
    store
        .set_override(
            &a,
            &Override::new(&a, OverrideTarget::prefix("k"), more, None).unwrap(),
        )
        .unwrap();
    assert_eq!(store.check(&a, "k1", 1).unwrap().limit, 9);
    assert_eq!(store.check(&b, "k1", 1).unwrap().limit, 1);
    assert!(store.list_overrides(&b, None, 10).unwrap().overrides.is_empty());
}

#[tokio::test]
async fn the_engine_applies_overrides_and_reports_the_one_in_force() {
    let store = MemoryStore::new();
    let api = Policy::new("api", Algorithm::sliding_log(1, Duration::from_secs(60)).unwrap()).unwrap();
    let more = Algorithm::sliding_log(3, Duration::from_secs(60)).unwrap();
    let value = Override::new(&api, OverrideTarget::prefix("gold:"), more, None).unwrap();
    OverrideStore::set_override(&store, &api, &value).await.unwrap();
    let found = OverrideStore::override_for(&store, &api, b"gold:7")
        .await
        .unwrap();
    assert_eq!(found.map(|o| o.target), Some(OverrideTarget::prefix("gold:")));
    let engine = Engine::new(store);
    let verdict = engine
        .check_all(&[Rule::new(&api, "gold:7", 1), Rule::new(&api, "tin:7", 1)])
        .await
        .unwrap();
    let limits: Vec<u64> = verdict.rules().iter().map(|r| r.decision.limit).collect();
    assert_eq!(limits, [3, 1]);
}
