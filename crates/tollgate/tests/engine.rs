//! The engine's semantics on the memory store: all or nothing, merged duplicates, penalties on
//! every rule that denied, shadow rules, failure modes for a store that fails, outcome labels.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tollgate::{
    Algorithm, Decisions, Engine, Error, FailureMode, ManualClock, MemoryStore, Outcome, Policy, Rule, Store,
    StoreErrorKind,
};

/// Runs a future that is ready at once, as everything over the memory store is.
fn now<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a memory store future was not ready at once"),
    }
}

fn log(name: &str, limit: u64) -> Policy {
    Policy::new(
        name,
        Algorithm::sliding_log(limit, Duration::from_secs(60)).unwrap(),
    )
    .unwrap()
}

fn engine() -> Engine<MemoryStore<ManualClock>> {
    let clock = ManualClock::new(1_000_000_000);
    Engine::builder(MemoryStore::builder().clock(clock.clone()).build())
        .clock(clock)
        .build()
}

fn remaining(engine: &Engine<MemoryStore<ManualClock>>, policy: &Policy, key: &str) -> u64 {
    engine.store().peek(policy, key, 1).unwrap().remaining + 1
}

#[test]
fn a_denied_request_spends_nothing_on_any_rule() {
    let engine = engine();
    let (wide, narrow) = (log("wide", 10), log("narrow", 1));
    let rules = [Rule::new(&wide, "k", 1), Rule::new(&narrow, "k", 1)];
    assert_eq!(now(engine.check_all(&rules)).unwrap().outcome(), Outcome::Allowed);
    let denied = now(engine.check_all(&rules)).unwrap();
    assert_eq!(denied.outcome(), Outcome::Denied);
    assert!(!denied.allowed());
    assert_eq!(remaining(&engine, &wide, "k"), 9, "the wide rule kept its unit");
    // The wide rule reports its budget as it stands, untouched by the denied request.
    assert_eq!(denied.rules()[0].decision.remaining, 9);
    assert_eq!(denied.rules()[0].outcome, Outcome::Allowed);
    assert_eq!(denied.rules()[1].outcome, Outcome::Denied);
    assert_eq!(denied.deciding().map(|(i, _)| i), Some(1));
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(60)));
}

#[test]
fn an_allowed_request_spends_on_every_rule_and_reports_the_tightest() {
    let engine = engine();
    let (a, b, c) = (log("a", 10), log("b", 3), log("c", 5));
    let rules = [
        Rule::new(&a, "x", 1),
        Rule::new(&b, "y", 2),
        Rule::new(&c, "z", 1),
    ];
    let verdict = now(engine.check_all(&rules)).unwrap();
    assert!(verdict.allowed());
    assert_eq!(
        verdict
            .rules()
            .iter()
            .map(|r| r.decision.remaining)
            .collect::<Vec<_>>(),
        [9, 1, 4]
    );
    assert_eq!(verdict.deciding().map(|(i, _)| i), Some(1));
    assert_eq!(remaining(&engine, &b, "y"), 1);
}

#[test]
fn the_same_budget_twice_counts_as_the_sum_of_its_costs() {
    let engine = engine();
    let policy = log("p", 3);
    now(engine.check(&policy, b"k", 2)).unwrap();
    // One unit left: the same rule twice asks for two, so it is denied and spends nothing.
    let twice = [Rule::new(&policy, "k", 1), Rule::new(&policy, "k", 1)];
    let verdict = now(engine.check_all(&twice)).unwrap();
    assert_eq!(verdict.outcome(), Outcome::Denied);
    assert_eq!(verdict.rules().len(), 2);
    assert_eq!(remaining(&engine, &policy, "k"), 1);
    // A rebuilt policy with the same name is the same budget too.
    let rebuilt = log("p", 3);
    let verdict = now(engine.check_all(&[Rule::new(&policy, "k", 1), Rule::new(&rebuilt, "k", 1)])).unwrap();
    assert!(!verdict.allowed());
    assert!(now(engine.check_all(&twice[..1])).unwrap().allowed());
}

#[test]
fn merged_costs_above_the_limit_are_denied_not_refused() {
    let engine = engine();
    let policy = log("p", 2);
    let rules = [Rule::new(&policy, "k", 2), Rule::new(&policy, "k", 2)];
    let verdict = now(engine.check_all(&rules)).unwrap();
    assert_eq!(verdict.outcome(), Outcome::Denied);
    assert_eq!(remaining(&engine, &policy, "k"), 2);
}

#[test]
fn penalties_start_on_every_rule_that_denied() {
    let engine = engine();
    let block = Duration::from_secs(600);
    let a = log("a", 1).with_block_for(block).unwrap();
    let b = log("b", 1).with_block_for(block).unwrap();
    let c = log("c", 5).with_block_for(block).unwrap();
    let rules = [
        Rule::new(&a, "k", 1),
        Rule::new(&b, "k", 1),
        Rule::new(&c, "k", 1),
    ];
    assert!(now(engine.check_all(&rules)).unwrap().allowed());
    let denied = now(engine.check_all(&rules)).unwrap();
    assert_eq!(denied.retry_after(), Some(block));
    for policy in [&a, &b] {
        let d = engine.store().peek(policy, "k", 1).unwrap();
        assert_eq!(d.retry_after, Some(block), "{} is blocked", policy.name());
    }
    let c_alone = now(engine.check(&c, b"k", 1)).unwrap();
    assert!(c_alone.allowed(), "the rule that allowed got no penalty");
}

#[test]
fn shadow_rules_are_counted_but_never_deny_or_block_the_others() {
    let engine = engine();
    let (enforced, trial) = (log("enforced", 10), log("trial", 1));
    let rules = [
        Rule::new(&enforced, "k", 1),
        Rule::new(&trial, "k", 1).as_shadow(),
    ];
    assert_eq!(now(engine.check_all(&rules)).unwrap().outcome(), Outcome::Allowed);
    let second = now(engine.check_all(&rules)).unwrap();
    assert_eq!(second.outcome(), Outcome::ShadowDenied);
    assert!(second.allowed());
    assert_eq!(second.rules()[1].outcome, Outcome::ShadowDenied);
    assert_eq!(
        remaining(&engine, &enforced, "k"),
        8,
        "the enforced rule spent both times"
    );
    // A shadow denial is not the rule that speaks for the request.
    assert_eq!(second.deciding().map(|(i, _)| i), Some(0));
    // An enforced denial elsewhere stops the shadow rule from spending.
    let closed = log("closed", 1);
    now(engine.check(&closed, b"k", 1)).unwrap();
    let wide_shadow = log("wide-shadow", 10);
    let rules = [
        Rule::new(&closed, "k", 1),
        Rule::new(&wide_shadow, "k", 1).as_shadow(),
    ];
    assert_eq!(now(engine.check_all(&rules)).unwrap().outcome(), Outcome::Denied);
    assert_eq!(remaining(&engine, &wide_shadow, "k"), 10);
}

#[test]
fn bad_input_is_an_error_and_spends_nothing() {
    let engine = engine();
    let policy = log("p", 2);
    let rules = [Rule::new(&policy, "k", 1), Rule::new(&policy, "", 1)];
    assert!(matches!(now(engine.check_all(&rules)), Err(Error::EmptyKey)));
    let rules = [Rule::new(&policy, "k", 1), Rule::new(&policy, "j", 3)];
    assert!(matches!(
        now(engine.check_all(&rules)),
        Err(Error::CostTooLarge { .. })
    ));
    assert_eq!(remaining(&engine, &policy, "k"), 2);
    assert!(now(engine.check_all(&[])).unwrap().allowed());
}

#[test]
fn peek_all_changes_nothing() {
    let engine = engine();
    let (a, b) = (
        log("a", 1),
        log("b", 1).with_block_for(Duration::from_secs(5)).unwrap(),
    );
    now(engine.check(&b, b"k", 1)).unwrap();
    let rules = [Rule::new(&a, "k", 1), Rule::new(&b, "k", 1)];
    assert_eq!(now(engine.peek_all(&rules)).unwrap().outcome(), Outcome::Denied);
    assert_eq!(remaining(&engine, &a, "k"), 1);
    let b_now = engine.store().peek(&b, "k", 1).unwrap();
    assert_eq!(
        b_now.retry_after,
        Some(Duration::from_secs(60)),
        "no penalty started by a peek"
    );
}

/// A store that fails every call with `kind` while `down` is set, and decides in memory otherwise.
struct Flaky {
    memory: MemoryStore<ManualClock>,
    down: AtomicBool,
    kind: StoreErrorKind,
}

impl Store for Flaky {
    async fn decide(&self, rules: &[Rule<'_>], commit: bool) -> Result<Decisions, Error> {
        if self.down.load(Ordering::Relaxed) {
            return Err(Error::store(self.kind, format!("{:?} injected", self.kind)));
        }
        self.memory.decide(rules, commit)
    }

    async fn reset(&self, policy: &Policy, key: &[u8]) -> Result<(), Error> {
        self.memory.reset(policy, key)
    }

    async fn charge(&self, rules: &[Rule<'_>]) -> Result<tollgate::PerRule<tollgate::Charged>, Error> {
        if self.down.load(Ordering::Relaxed) {
            return Err(Error::store(self.kind, format!("{:?} injected", self.kind)));
        }
        self.memory.charge(rules)
    }
}

#[test]
fn a_charge_on_a_failing_store_follows_each_failure_mode_and_is_never_dropped_silently() {
    let two = NonZeroU32::new(2).unwrap();
    for kind in KINDS {
        let engine = flaky(kind);
        let open = log("open", 4).with_failure_mode(FailureMode::FailOpen);
        let closed = log("closed", 4).with_failure_mode(FailureMode::FailClosed);
        let local = log("local", 4).with_failure_mode(FailureMode::Local { instances: two });
        let rules = [
            Rule::new(&open, "k", 3),
            Rule::new(&closed, "k", 3),
            Rule::new(&local, "k", 3),
        ];
        let charges = now(engine.charge_all(&rules)).unwrap();
        assert!(charges.store_error.is_some(), "{kind:?}");
        assert!(charges.rules.iter().all(|c| c.decision.degraded));
        // FailOpen and FailClosed cannot record: counted, not dropped.
        assert_eq!(charges.unrecorded, 2);
        assert!(charges.rules[0].decision.allowed);
        assert!(!charges.rules[1].decision.allowed);
        // Local charges the share (2 of 4): 3 is one unit of debt.
        assert_eq!(charges.rules[2].debt, 1);
        assert!(!charges.rules[2].decision.allowed);
        let verdict = now(engine.check(&local, b"k", 1)).unwrap();
        assert!(!verdict.allowed(), "the local limiter holds the debt");
        // Bad input is the caller's error, whatever the store.
        assert!(now(engine.charge(&open, b"", 1)).is_err());
        assert!(now(engine.charge(&open, b"k", 0)).is_err());
        assert!(now(engine.charge(&open, b"k", tollgate::bounds::MAX_LIMIT + 1)).is_err());
        // Back up: the store records, above the policy's limit if need be.
        engine.store().down.store(false, Ordering::Relaxed);
        let charges = now(engine.charge(&closed, b"k", 6)).unwrap();
        assert!(charges.store_error.is_none() && charges.unrecorded == 0);
        assert_eq!(charges.rules[0].debt, 2);
        assert!(!charges.rules[0].decision.degraded);
    }
}

#[test]
fn access_lists_and_flags_do_not_apply_to_a_charge() {
    use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
    let engine = engine();
    let policy = log("p", 2);
    engine.set_access_lists(AccessLists::new([
        AccessEntry::new(None, Listed::Deny, EntryKind::Key, "banned").unwrap(),
        AccessEntry::new(None, Listed::Allow, EntryKind::Key, "friend").unwrap(),
    ]));
    for key in ["banned", "friend"] {
        let rules = [
            Rule::new(&policy, key, 2).as_shadow(),
            Rule::new(&policy, key, 1).as_question(),
        ];
        let charges = now(engine.charge_all(&rules)).unwrap();
        assert_eq!(charges.rules.len(), 2);
        assert_eq!(charges.rules[0], charges.rules[1], "one budget, one answer");
        assert_eq!(charges.rules[0].debt, 1, "{key}: both costs recorded");
    }
}

fn flaky(kind: StoreErrorKind) -> Engine<Flaky> {
    let clock = ManualClock::new(1_000_000_000);
    let store = Flaky {
        memory: MemoryStore::builder().clock(clock.clone()).build(),
        down: AtomicBool::new(true),
        kind,
    };
    Engine::builder(store).clock(clock).build()
}

const KINDS: [StoreErrorKind; 7] = [
    StoreErrorKind::Timeout,
    StoreErrorKind::Connection,
    StoreErrorKind::OutOfMemory,
    StoreErrorKind::Auth,
    StoreErrorKind::Script,
    StoreErrorKind::Cluster,
    StoreErrorKind::Corrupt,
];

#[test]
fn every_failure_class_follows_every_failure_mode() {
    let two = NonZeroU32::new(2).unwrap();
    for kind in KINDS {
        let engine = flaky(kind);
        let open = log("open", 4).with_failure_mode(FailureMode::FailOpen);
        let closed = log("closed", 4).with_failure_mode(FailureMode::FailClosed);
        let local = log("local", 4).with_failure_mode(FailureMode::Local { instances: two });

        let verdict = now(engine.check(&open, b"k", 1)).unwrap();
        assert_eq!(verdict.outcome(), Outcome::Degraded, "{kind:?}");
        assert!(verdict.allowed() && verdict.degraded());
        assert!(verdict.rules()[0].decision.degraded);
        let err = verdict.store_error().expect("the failure is reported");
        assert!(err.class().is_some());
        assert!(std::error::Error::source(err).is_some(), "the source is kept");

        let verdict = now(engine.check(&closed, b"k", 1)).unwrap();
        assert_eq!(verdict.outcome(), Outcome::Error, "{kind:?}");
        assert!(!verdict.allowed());
        assert!(verdict.retry_after().is_some());

        // Local: the limit of 4 shared by 2 instances admits 2 here.
        let outcomes: Vec<Outcome> = (0..3)
            .map(|_| now(engine.check(&local, b"k", 1)).unwrap().outcome())
            .collect();
        assert_eq!(
            outcomes,
            [Outcome::Degraded, Outcome::Degraded, Outcome::Denied],
            "{kind:?}"
        );
    }
}

#[test]
fn a_full_memory_store_follows_the_failure_mode_too() {
    let clock = ManualClock::new(1_000_000_000);
    let store = MemoryStore::builder().max_keys(1).clock(clock.clone()).build();
    let engine = Engine::builder(store).clock(clock).build();
    let blocker = log("blocker", 1)
        .with_block_for(Duration::from_secs(600))
        .unwrap();
    now(engine.check(&blocker, b"bot", 1)).unwrap();
    now(engine.check(&blocker, b"bot", 1)).unwrap();
    let open = log("open", 4).with_failure_mode(FailureMode::FailOpen);
    let closed = log("closed", 4).with_failure_mode(FailureMode::FailClosed);
    let verdict = now(engine.check(&open, b"new", 1)).unwrap();
    assert_eq!(verdict.outcome(), Outcome::Degraded);
    assert_eq!(verdict.store_error().and_then(Error::class), Some("full"));
    assert_eq!(
        now(engine.check(&closed, b"new", 1)).unwrap().outcome(),
        Outcome::Error
    );
    let local = log("local", 1);
    assert_eq!(
        now(engine.check(&local, b"new", 1)).unwrap().outcome(),
        Outcome::Degraded
    );
    assert_eq!(
        now(engine.check(&local, b"new", 1)).unwrap().outcome(),
        Outcome::Denied
    );
}

#[test]
fn mixed_failure_modes_combine_all_or_nothing() {
    let engine = flaky(StoreErrorKind::Timeout);
    let open = log("open", 4).with_failure_mode(FailureMode::FailOpen);
    let closed = log("closed", 4).with_failure_mode(FailureMode::FailClosed);
    let local = log("local", 1);
    // One closed rule closes the request, and the local limiter is not charged.
    let rules = [
        Rule::new(&open, "k", 1),
        Rule::new(&local, "k", 1),
        Rule::new(&closed, "k", 1),
    ];
    assert_eq!(now(engine.check_all(&rules)).unwrap().outcome(), Outcome::Error);
    let rules = [Rule::new(&open, "k", 1), Rule::new(&local, "k", 1)];
    assert_eq!(
        now(engine.check_all(&rules)).unwrap().outcome(),
        Outcome::Degraded
    );
    let verdict = now(engine.check_all(&rules)).unwrap();
    assert_eq!(verdict.outcome(), Outcome::Denied);
    assert_eq!(verdict.rules()[0].outcome, Outcome::Degraded);
    // A closed shadow rule never closes the request.
    let rules = [Rule::new(&open, "k", 1), Rule::new(&closed, "k", 1).as_shadow()];
    assert_eq!(
        now(engine.check_all(&rules)).unwrap().outcome(),
        Outcome::Degraded
    );
}

#[test]
fn the_store_decides_again_once_it_is_back() {
    let engine = flaky(StoreErrorKind::Connection);
    let policy = log("p", 1).with_failure_mode(FailureMode::FailOpen);
    assert_eq!(
        now(engine.check(&policy, b"k", 1)).unwrap().outcome(),
        Outcome::Degraded
    );
    engine.store().down.store(false, Ordering::Relaxed);
    assert_eq!(
        now(engine.check(&policy, b"k", 1)).unwrap().outcome(),
        Outcome::Allowed
    );
    assert_eq!(
        now(engine.check(&policy, b"k", 1)).unwrap().outcome(),
        Outcome::Denied
    );
}

#[test]
fn an_untouched_whole_budget_in_a_denied_request_has_nothing_to_reset() {
    let engine = engine();
    let (fresh, spent) = (log("fresh", 5), log("spent", 1));
    now(engine.check(&spent, b"k", 1)).unwrap();
    let verdict = now(engine.check_all(&[Rule::new(&fresh, "k", 1), Rule::new(&spent, "k", 1)])).unwrap();
    assert!(!verdict.allowed());
    let fresh = verdict.rules()[0].decision;
    assert_eq!((fresh.remaining, fresh.reset_after), (5, Duration::ZERO));
}

#[test]
fn a_question_is_answered_as_the_budget_stands_and_never_spends() {
    let clock = ManualClock::new(1_000_000_000);
    let engine = Engine::builder(MemoryStore::builder().clock(clock.clone()).build())
        .clock(clock.clone())
        .build();
    let policy = log("p", 2).with_block_for(Duration::from_secs(600)).unwrap();
    now(engine.check(&policy, b"k", 1)).unwrap();
    // One unit left: asked about and spent in the same request, the question sees the unit.
    let rules = [
        Rule::new(&policy, "k", 1).as_question(),
        Rule::new(&policy, "k", 1),
    ];
    let verdict = now(engine.check_all(&rules)).unwrap();
    assert!(verdict.allowed());
    assert_eq!(verdict.rules()[0].decision.remaining, 1, "as it stood");
    assert!(
        !engine.store().peek(&policy, "k", 1).unwrap().allowed,
        "the spending rule spent"
    );
    // Nothing left: the question denies the request, and starts no penalty.
    let other = log("other", 5);
    let rules = [
        Rule::new(&policy, "k", 1).as_question(),
        Rule::new(&other, "k", 1),
    ];
    let verdict = now(engine.check_all(&rules)).unwrap();
    assert_eq!(verdict.outcome(), Outcome::Denied);
    assert_eq!(
        remaining(&engine, &other, "k"),
        5,
        "nothing spent on a refused request"
    );
    // Once the window has passed the budget is back: the question started no penalty.
    clock.advance(Duration::from_secs(61));
    assert!(
        now(engine.check(&policy, b"k", 1)).unwrap().allowed(),
        "no penalty from a question"
    );
    // Alone, a question never spends.
    let fresh = log("fresh", 1);
    for _ in 0..3 {
        assert!(
            now(engine.check_all(&[Rule::new(&fresh, "k", 1).as_question()]))
                .unwrap()
                .allowed()
        );
    }
}
