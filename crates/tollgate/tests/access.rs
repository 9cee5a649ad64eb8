//! Allow and deny lists and gradual enforcement, as the engine applies them on the memory store.

use std::time::Duration;

use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
use tollgate::{Algorithm, Enforcement, Engine, MemoryStore, Outcome, Policy, Rule};

fn one_per_minute(name: &str) -> Policy {
    Policy::new(name, Algorithm::sliding_log(1, Duration::from_secs(60)).unwrap()).unwrap()
}

fn entry(policy: Option<&str>, list: Listed, kind: EntryKind, value: &str) -> AccessEntry {
    AccessEntry::new(policy, list, kind, value).unwrap()
}

#[tokio::test]
async fn a_deny_listed_key_blocks_the_request_and_spends_nothing_on_any_rule() {
    let engine = Engine::builder(MemoryStore::new())
        .access_lists(AccessLists::new([entry(
            Some("login"),
            Listed::Deny,
            EntryKind::Prefix,
            "bot-",
        )]))
        .build();
    let (api, login) = (one_per_minute("api"), one_per_minute("login"));
    let rules = [Rule::new(&api, "bot-7", 1), Rule::new(&login, "bot-7", 1)];
    let verdict = engine.check_all(&rules).await.unwrap();
    assert_eq!(verdict.outcome(), Outcome::Blocked);
    assert!(!verdict.allowed());
    assert_eq!(
        verdict.blocked_by().map(|(i, e)| (i, e.value())),
        Some((1, "bot-"))
    );
    assert_eq!(verdict.rules()[1].listed, Some(Listed::Deny));
    assert_eq!(verdict.rules()[0].listed, None);
    // Nothing was spent: `api` still has its one request.
    assert!(engine.check(&api, b"bot-7", 1).await.unwrap().allowed());
}

#[tokio::test]
async fn a_deny_list_blocks_shadow_rules_too() {
    let engine = Engine::builder(MemoryStore::new())
        .access_lists(AccessLists::new([entry(
            None,
            Listed::Deny,
            EntryKind::Cidr,
            "2001:db8::/32",
        )]))
        .build();
    let api = one_per_minute("api");
    let verdict = engine
        .check_all(&[Rule::new(&api, "2001:db8::9", 1).as_shadow()])
        .await
        .unwrap();
    assert_eq!(verdict.outcome(), Outcome::Blocked);
}

#[tokio::test]
async fn an_allow_listed_key_is_never_limited_and_spends_nothing() {
    let engine = Engine::builder(MemoryStore::new())
        .access_lists(AccessLists::new([entry(
            None,
            Listed::Allow,
            EntryKind::Cidr,
            "192.0.2.0/24",
        )]))
        .build();
    let api = one_per_minute("api");
    for _ in 0..5 {
        let verdict = engine.check(&api, b"192.0.2.10", 1).await.unwrap();
        assert_eq!(verdict.outcome(), Outcome::Allowed);
        assert_eq!(verdict.rules()[0].listed, Some(Listed::Allow));
        // Read as a question: the budget as it stands, whole.
        assert_eq!(verdict.rules()[0].decision.remaining, 1);
    }
    // Off the list, the same key spends as usual.
    engine.set_access_lists(AccessLists::default());
    assert!(engine.check(&api, b"192.0.2.10", 1).await.unwrap().allowed());
    assert_eq!(
        engine.check(&api, b"192.0.2.10", 1).await.unwrap().outcome(),
        Outcome::Denied
    );
}

#[tokio::test]
async fn an_allow_listed_rule_does_not_excuse_the_other_rules_of_its_request() {
    let engine = Engine::builder(MemoryStore::new())
        .access_lists(AccessLists::new([entry(
            Some("api"),
            Listed::Allow,
            EntryKind::Key,
            "k",
        )]))
        .build();
    let (api, login) = (one_per_minute("api"), one_per_minute("login"));
    let rules = [Rule::new(&api, "k", 1), Rule::new(&login, "k", 1)];
    assert!(engine.check_all(&rules).await.unwrap().allowed());
    let verdict = engine.check_all(&rules).await.unwrap();
    assert_eq!(verdict.outcome(), Outcome::Denied);
    assert_eq!(verdict.rules()[0].outcome, Outcome::Allowed);
    assert_eq!(verdict.rules()[1].outcome, Outcome::Denied);
}

#[tokio::test]
async fn gradual_enforcement_shadows_the_keys_outside_its_share() {
    let engine = Engine::new(MemoryStore::new());
    let share = Enforcement::percent(30).unwrap();
    let api = one_per_minute("api").with_enforcement(share);
    let (mut enforced, mut shadowed) = (0, 0);
    for i in 0..200 {
        let key = format!("client-{i}");
        assert!(engine.check(&api, key.as_bytes(), 1).await.unwrap().allowed());
        let second = engine.check(&api, key.as_bytes(), 1).await.unwrap();
        if share.enforces("api", key.as_bytes()) {
            assert_eq!(second.outcome(), Outcome::Denied, "{key}");
            assert!(!second.rules()[0].shadow);
            enforced += 1;
        } else {
            assert_eq!(second.outcome(), Outcome::ShadowDenied, "{key}");
            assert!(second.rules()[0].shadow);
            shadowed += 1;
        }
    }
    assert!(
        enforced > 30 && shadowed > 100,
        "{enforced} enforced, {shadowed} shadowed"
    );
}
