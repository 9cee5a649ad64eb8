//! The engine's unit tests: lists, merging, apart rules and the short road agree.

use std::time::Duration;

use super::*;
use crate::{Algorithm, Apart};

#[tokio::test]
async fn a_rule_given_twice_has_a_verdict_for_each_and_spends_both_costs_or_nothing() {
    let engine = Engine::new(MemoryStore::new());
    let policy = Policy::new("p", Algorithm::sliding_log(3, Duration::from_secs(60)).unwrap()).unwrap();
    let twice = [Rule::new(&policy, "k", 1), Rule::new(&policy, "k", 1)];
    let verdict = engine.check_all(&twice).await.unwrap();
    assert!(verdict.allowed());
    assert_eq!(verdict.rules().len(), 2);
    assert_eq!(verdict.rules()[1].decision.remaining, 1);
    let denied = engine.check_all(&twice).await.unwrap();
    assert_eq!(denied.outcome(), Outcome::Denied);
    assert_eq!(denied.rules().len(), 2);
    assert!(denied.rules().iter().all(|r| r.outcome == Outcome::Denied));
    assert!(
        engine.check(&policy, b"k", 1).await.unwrap().allowed(),
        "nothing was spent"
    );
}

/// A lone rule takes the short road (`verdict_of_one`); the same rule next to another
/// policy's takes the general one. Both must answer it alike, spent or not.
#[tokio::test]
async fn a_lone_rule_is_answered_as_it_is_among_others() {
    let log = |name: &str, limit| {
        Policy::new(
            name,
            Algorithm::sliding_log(limit, Duration::from_secs(60)).unwrap(),
        )
        .unwrap()
    };
    // `other` never denies, so the request's outcome is the first rule's.
    let (lone, among, other) = (log("lone", 2), log("among", 2), log("other", 100));
    // One clock for both, so that their reset times agree too.
    let clock = crate::ManualClock::new(0);
    let engine = || Engine::new(MemoryStore::builder().clock(clock.clone()).build());
    let (alone, together) = (engine(), engine());
    type Shape = fn(Rule<'_>) -> Rule<'_>;
    // Budget 2: a question sees it whole, two spends take it, the rest see it gone.
    let shapes: [(Shape, bool); 6] = [
        (|r| r.as_question(), true),
        (|r| r, true),
        (|r| r, false),
        (|r| r.as_shadow(), true),
        (|r| r.as_question(), true),
        (|r| r, true),
    ];
    for (step, (shape, commit)) in shapes.into_iter().enumerate() {
        let one = [shape(Rule::new(&lone, "k", 1))];
        let two = [
            shape(Rule::new(&among, "k", 1)),
            Rule::new(&other, "k", 1).as_shadow(),
        ];
        let (a, b) = if commit {
            (
                alone.check_all(&one).await.unwrap(),
                together.check_all(&two).await.unwrap(),
            )
        } else {
            (
                alone.peek_all(&one).await.unwrap(),
                together.peek_all(&two).await.unwrap(),
            )
        };
        assert_eq!(a.rules()[0], b.rules()[0], "step {step}");
        assert_eq!(
            (a.outcome(), a.spends()),
            (b.outcome(), b.spends()),
            "step {step}"
        );
    }
    // Spent by steps 1 and 3 only.
    assert_eq!(
        alone
            .peek_all(&[Rule::new(&lone, "k", 1)])
            .await
            .unwrap()
            .outcome(),
        Outcome::Denied
    );
    assert!(matches!(
        alone.check_all(&[Rule::new(&lone, "", 1)]).await,
        Err(Error::EmptyKey)
    ));
    assert!(matches!(
        alone.check_all(&[Rule::new(&lone, "k", 3)]).await,
        Err(Error::CostTooLarge { .. })
    ));
}

#[tokio::test]
async fn every_quota_rule_over_denies_the_request_and_the_plain_rules_that_fit_still_spent() {
    let engine = Engine::new(MemoryStore::new());
    let log = |name: &str, limit| {
        Policy::new(
            name,
            Algorithm::sliding_log(limit, Duration::from_secs(60)).unwrap(),
        )
        .unwrap()
    };
    let (quota, plain) = (log("quota", 1), log("plain", 5));
    let rules = [
        Rule::new(&quota, "k", 1).apart(Apart::Quota),
        Rule::new(&plain, "k", 1),
    ];
    assert_eq!(
        engine.check_all(&rules).await.unwrap().outcome(),
        Outcome::Allowed
    );
    let over = engine.check_all(&rules).await.unwrap();
    assert_eq!(over.outcome(), Outcome::Denied);
    assert_eq!(over.rules()[0].outcome, Outcome::Denied);
    assert!(!over.rules()[0].shadow, "a rule apart is not a shadow rule");
    assert_eq!(over.rules()[1].decision.remaining, 3, "the plain rule spent");
    assert!(over.spends());
    // A shadow rule apart is a shadow rule.
    let shadow = [Rule::new(&quota, "k", 1).apart(Apart::Alone).as_shadow()];
    assert_eq!(
        engine.check_all(&shadow).await.unwrap().outcome(),
        Outcome::ShadowDenied
    );
}
