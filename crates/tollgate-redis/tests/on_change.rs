//! A policy whose algorithm or parameters change under the same name (a reload) migrates each
//! key's state at its first touch, as its `on_change` declares: memory, standalone Redis and a
//! Redis Cluster migrate alike, and instances of a fleet that reload at different moments never
//! migrate a key back and forth.

mod common;

use std::time::Duration;

use common::{UNIT, exact_store};
use tollgate::algorithm::calendar_quota::Period;
use tollgate::algorithm::migrate::OnChange;
use tollgate::overrides::{Override, OverrideStore, OverrideTarget};
use tollgate::{Algorithm, Anchor, Clock, Decision, ManualClock, MemoryStore, Policy, Rate, Rule, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::vectors::T0_US;
use tollgate_testkit::{RedisCluster, RedisServer};

const MODES: [OnChange; 3] = [OnChange::Keep, OnChange::Scale, OnChange::Reset];

/// Algorithm `i` (0 to 6, in the order of the core's list) with `limit`; windows of 10 UNITs and
/// one unit back every 2 UNITs, so a few UNITs between touches matter to every algorithm.
fn algorithm(i: usize, limit: u64) -> Algorithm {
    let window = UNIT * 10;
    let rate = Rate::new(1, UNIT * 2).expect("rate");
    match i {
        0 => Algorithm::fixed_window(limit, window, Anchor::Epoch),
        1 => Algorithm::sliding_log(limit, window),
        2 => Algorithm::sliding_window(limit, window),
        3 => Algorithm::token_bucket(limit, rate),
        4 => Algorithm::leaky_bucket(limit, rate),
        5 => Algorithm::gcra(rate, limit),
        _ => Algorithm::calendar_quota(limit, Period::Day, "Europe/Paris"),
    }
    .expect("algorithm")
}

/// What a touch does.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Check,
    Peek,
    Charge,
    Refund,
}

/// One touch of a key: `kind` of `cost` under `policy`.
struct Touch<'p> {
    policy: &'p Policy,
    cost: u64,
    kind: Kind,
    /// How long after the previous touch.
    after: Duration,
}

/// The stores a script runs on: memory, or Redis.
enum Subject<'s> {
    Memory(&'s MemoryStore<ManualClock>),
    Redis(&'s RedisStore),
}

impl Subject<'_> {
    /// The touch's decision; for a charge, its answer and debt.
    async fn touch(&self, touch: &Touch<'_>, key: &str) -> Decided {
        let (policy, cost) = (touch.policy, touch.cost);
        let rules = [Rule::new(policy, key, cost)];
        let decision = match (self, touch.kind) {
            (Subject::Memory(m), Kind::Check) => m.check(policy, key, cost),
            (Subject::Memory(m), Kind::Peek) => m.peek(policy, key, cost),
            (Subject::Memory(m), Kind::Refund) => m.refund(policy, key, cost),
            (Subject::Memory(m), Kind::Charge) => {
                let charged = m.charge(&rules).expect("memory charge")[0];
                return (charged.decision, charged.debt);
            }
            (Subject::Redis(r), Kind::Check) => r.check(policy, key.as_bytes(), cost).await,
            (Subject::Redis(r), Kind::Peek) => r.peek(policy, key.as_bytes(), cost).await,
            (Subject::Redis(r), Kind::Refund) => Store::refund(*r, policy, key.as_bytes(), cost).await,
            (Subject::Redis(r), Kind::Charge) => {
                let charged = Store::charge(*r, &rules).await.expect("redis charge")[0];
                return (charged.decision, charged.debt);
            }
        };
        (decision.expect("a decision"), 0)
    }
}

/// A touch's decision, and a charge's debt (0 for the others).
type Decided = (Decision, u64);

/// Runs `touches` on `key` of `subject`, the clock moved before each as the touch says; the
/// clock is put back where it was, so every subject runs the script at the same times.
async fn run(subject: &Subject<'_>, clock: &ManualClock, key: &str, touches: &[Touch<'_>]) -> Vec<Decided> {
    let start = clock.now_us();
    let mut decisions = Vec::with_capacity(touches.len());
    for touch in touches {
        clock.advance(touch.after);
        decisions.push(subject.touch(touch, key).await);
    }
    clock.set_us(start);
    decisions
}

/// Spends under `a`, then touches under `b` a third of a window later and a few times after.
/// `first` is what the first touch under `b` does.
fn script<'p>(a: &'p Policy, b: &'p Policy, first: Kind) -> Vec<Touch<'p>> {
    let touch = |policy, cost, kind, after| Touch {
        policy,
        cost,
        kind,
        after,
    };
    vec![
        touch(a, 2, Kind::Check, Duration::ZERO),
        touch(a, 1, Kind::Check, UNIT / 2),
        // Past the limit of 5: a denial, which starts a penalty where the policy has one.
        touch(a, 3, Kind::Check, UNIT / 2),
        touch(b, 1, first, UNIT * 3),
        touch(b, 1, Kind::Peek, Duration::ZERO),
        touch(b, 2, Kind::Check, UNIT * 2),
        touch(b, 1, Kind::Check, UNIT * 5),
        touch(b, 1, Kind::Peek, UNIT * 4),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_of_algorithm_or_limit_migrates_alike_on_every_store() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    let clustered = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    let subjects = [
        ("standalone", Subject::Redis(&redis)),
        ("cluster", Subject::Redis(&clustered)),
    ];
    let mut scenarios = 0;
    for from in 0..7 {
        for to in 0..7 {
            // A raise and a cut: for the same algorithm, only its limit changes.
            for to_limit in [8, 3] {
                for mode in MODES {
                    let name = format!("change-{from}-{to}-{to_limit}-{mode}");
                    let a = Policy::new(&name, algorithm(from, 5))
                        .expect("policy")
                        .with_generation(1);
                    let b = Policy::new(&name, algorithm(to, to_limit))
                        .expect("policy")
                        .with_generation(2)
                        .with_on_change(mode);
                    // Every other pair under a penalty, which keep and scale carry and reset drops.
                    let (a, b) = if (from + to) % 2 == 0 {
                        let block = UNIT * 4;
                        (
                            a.with_block_for(block).expect("block_for"),
                            b.with_block_for(block).expect("block_for"),
                        )
                    } else {
                        (a, b)
                    };
                    // The first touch is a check; for a few, a peek, a charge or a refund.
                    let first = match (from * 7 + to) % 5 {
                        1 => Kind::Peek,
                        2 => Kind::Charge,
                        3 => Kind::Refund,
                        _ => Kind::Check,
                    };
                    let touches = script(&a, &b, first);
                    let want = run(&Subject::Memory(&memory), &clock, "k", &touches).await;
                    for (store, subject) in &subjects {
                        let got = run(subject, &clock, "k", &touches).await;
                        assert_eq!(
                            got,
                            want,
                            "{store}: {name}: {:?} to {:?}, first {first:?}",
                            a.algorithm(),
                            b.algorithm()
                        );
                    }
                    scenarios += 1;
                }
            }
        }
    }
    assert_eq!(scenarios, 7 * 7 * 2 * 3);
}

/// The fields of `key`'s state hash under `policy`, sorted.
async fn state_of(url: &str, policy: &Policy, key: &str) -> Vec<(String, String)> {
    let (keys, _) = RedisStore::script_call("tollgate:", policy, key.as_bytes(), 1);
    let client = redis::Client::open(url).expect("client");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connect");
    let mut fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&keys[0])
        .query_async(&mut connection)
        .await
        .expect("HGETALL");
    fields.sort();
    fields
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_that_reload_at_different_moments_agree() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    for mode in MODES {
        for (from, to) in [(0, 3), (3, 5), (1, 2), (5, 1)] {
            let name = format!("fleet-{from}-{to}-{mode}");
            // Version A (generation 1), B (2, other numbers) and B' (3, B's numbers again).
            let a = Policy::new(&name, algorithm(from, 5))
                .expect("policy")
                .with_generation(1);
            let b = Policy::new(&name, algorithm(to, 4))
                .expect("policy")
                .with_generation(2)
                .with_on_change(mode);
            let b_again = Policy::new(&name, algorithm(to, 4))
                .expect("policy")
                .with_generation(3)
                .with_on_change(mode);
            assert_eq!(b.fingerprint(), b_again.fingerprint());
            let touch = |policy, after| Touch {
                policy,
                cost: 1,
                kind: Kind::Check,
                after,
            };
            // One instance reloads to B, the other stays on A a while, then moves to B'.
            let fleet = [
                touch(&a, Duration::ZERO),
                touch(&a, UNIT),
                touch(&b, UNIT),
                touch(&a, UNIT),
                touch(&b, UNIT),
                touch(&a, UNIT),
                touch(&b_again, UNIT),
                touch(&b, UNIT),
            ];
            // The same, with every touch after the change made under B.
            let alone: Vec<_> = fleet
                .iter()
                .enumerate()
                .map(|(i, t)| touch(if i < 2 { &a } else { &b }, t.after))
                .collect();
            let on_redis = run(&Subject::Redis(&redis), &clock, "fleet", &fleet).await;
            // Every answer but the limit, which each instance reports as its own policy's.
            let numbers = |decisions: &[Decided]| -> Vec<_> {
                decisions
                    .iter()
                    .map(|(d, _)| (d.allowed, d.remaining, d.reset_after, d.retry_after))
                    .collect()
            };
            assert_eq!(
                numbers(&on_redis),
                numbers(&run(&Subject::Redis(&redis), &clock, "alone", &alone).await),
                "{name}: A decides under B's numbers and B' does not migrate again"
            );
            assert_eq!(
                on_redis,
                run(&Subject::Memory(&memory), &clock, "fleet", &fleet).await,
                "{name}: memory"
            );
            assert_eq!(
                state_of(&server.url(), &b, "fleet").await,
                state_of(&server.url(), &b, "alone").await,
                "{name}: the state"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_an_override_in_force_keeps_its_state_across_a_change() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    let a = Policy::new("overridden", algorithm(0, 5))
        .expect("policy")
        .with_generation(1);
    // Reset: a migrated key starts afresh, an overridden one keeps counting.
    let b = Policy::new("overridden", algorithm(0, 8))
        .expect("policy")
        .with_generation(2)
        .with_on_change(OnChange::Reset);
    let more = Override::new(&a, OverrideTarget::key("vip"), algorithm(0, 20), None).expect("override");
    memory.set_override(&a, &more).expect("memory override");
    OverrideStore::set_override(&redis, &a, &more)
        .await
        .expect("redis override");
    let touch = |policy, kind, after| Touch {
        policy,
        cost: 3,
        kind,
        after,
    };
    let touches = [
        touch(&a, Kind::Check, Duration::ZERO),
        touch(&b, Kind::Check, UNIT),
        touch(&b, Kind::Peek, UNIT),
        touch(&a, Kind::Check, UNIT),
    ];
    let mut after_change = vec![];
    for key in ["vip", "plain"] {
        let want = run(&Subject::Memory(&memory), &clock, key, &touches).await;
        let got = run(&Subject::Redis(&redis), &clock, key, &touches).await;
        assert_eq!(got, want, "{key}");
        after_change.push((got[1].0.limit, got[1].0.remaining));
    }
    // The override's 20 counts on (3 + 3 spent); the plain key started afresh under B's 8.
    assert_eq!(after_change, [(20, 14), (8, 5)]);
}

/// How a call only looks at a key: a peek, a question in a check, a peek of two rules at once.
#[derive(Clone, Copy, Debug)]
enum Look {
    Peek,
    Question,
    PeekOfTwo,
}

impl Subject<'_> {
    /// What `look` answers of `key` under `policy`.
    async fn look(&self, look: Look, policy: &Policy, key: &str, bystander: &Policy) -> Decision {
        let one = [Rule::new(policy, key, 1)];
        let question = [Rule::new(policy, key, 1).as_question()];
        let two = [Rule::new(policy, key, 1), Rule::new(bystander, "elsewhere", 1)];
        let (rules, commit): (&[Rule<'_>], bool) = match look {
            Look::Peek => (&one, false),
            Look::Question => (&question, true),
            Look::PeekOfTwo => (&two, false),
        };
        let decided = match self {
            Subject::Memory(m) => m.decide(rules, commit),
            Subject::Redis(r) => Store::decide(*r, rules, commit).await,
        };
        decided.expect("a look").as_slice()[0]
    }
}

/// Every key of a rule's state under `policy` (its hash, a log, an override) with its bytes and
/// its expiry (`PEXPIRETIME`: absolute, so equal whatever time passes between two reads).
async fn bytes_of(
    connection: &mut redis::aio::MultiplexedConnection,
    policy: &Policy,
    key: &str,
) -> Vec<String> {
    let (keys, _) = RedisStore::script_call("tollgate:", policy, key.as_bytes(), 1);
    let state = keys[0].clone();
    let mut names = vec![
        state.clone(),
        [&state[..], b":log"].concat(),
        [&state[..], b":ovr"].concat(),
    ];
    names.extend(keys.last().cloned());
    let mut out = vec![];
    for name in names {
        let dump: Option<Vec<u8>> = redis::cmd("DUMP")
            .arg(&name)
            .query_async(connection)
            .await
            .expect("DUMP");
        let expires: i64 = redis::cmd("PEXPIRETIME")
            .arg(&name)
            .query_async(connection)
            .await
            .expect("PEXPIRETIME");
        out.push(format!("{} {dump:?} {expires}", String::from_utf8_lossy(&name)));
    }
    out
}

/// Between two reloads (A, then B, then C with A's numbers again), a call that only looks at a
/// key under B answers what a check would see, and writes nothing: Redis holds the same bytes
/// and expiries, and under C the key answers as one nobody looked at (before, a look migrated
/// the key to B, so that C found what B's `on_change` had left: with `reset`, nothing spent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looking_at_a_key_between_two_reloads_changes_nothing() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    let client = redis::Client::open(server.url()).expect("client");
    let mut raw = client.get_multiplexed_async_connection().await.expect("connect");
    let bystander = Policy::new("bystander", algorithm(0, 100)).expect("policy");
    let mut scenarios = 0;
    for from in 0..7 {
        for to in 0..7 {
            for mode in MODES {
                let name = format!("look-{from}-{to}-{mode}");
                let a = Policy::new(&name, algorithm(from, 5))
                    .expect("policy")
                    .with_generation(1);
                let b = Policy::new(&name, algorithm(to, 3))
                    .expect("policy")
                    .with_generation(2)
                    .with_on_change(mode);
                let c = Policy::new(&name, algorithm(from, 5))
                    .expect("policy")
                    .with_generation(3);
                let (a, b, c) = if (from + to) % 2 == 0 {
                    let block = UNIT * 4;
                    (
                        a.with_block_for(block).expect("block_for"),
                        b.with_block_for(block).expect("block_for"),
                        c.with_block_for(block).expect("block_for"),
                    )
                } else {
                    (a, b, c)
                };
                for look in [Look::Peek, Look::Question, Look::PeekOfTwo] {
                    let start = clock.now_us();
                    let mut answers = vec![];
                    for (store, subject) in [
                        ("memory", Subject::Memory(&memory)),
                        ("redis", Subject::Redis(&redis)),
                    ] {
                        clock.set_us(start);
                        let (looked, twin, untouched) = ("looked", "twin", "untouched");
                        for cost in [2, 1, 3] {
                            for key in [looked, twin, untouched] {
                                subject
                                    .touch(
                                        &Touch {
                                            policy: &a,
                                            cost,
                                            kind: Kind::Check,
                                            after: Duration::ZERO,
                                        },
                                        key,
                                    )
                                    .await;
                            }
                            clock.advance(UNIT / 2);
                        }
                        clock.advance(UNIT * 2);
                        let before = match subject {
                            Subject::Redis(_) => bytes_of(&mut raw, &b, looked).await,
                            Subject::Memory(_) => vec![],
                        };
                        let seen = subject.look(look, &b, looked, &bystander).await;
                        if let Subject::Redis(_) = subject {
                            assert_eq!(
                                bytes_of(&mut raw, &b, looked).await,
                                before,
                                "{name}: {look:?} wrote"
                            );
                        }
                        let checked = subject
                            .touch(
                                &Touch {
                                    policy: &b,
                                    cost: 1,
                                    kind: Kind::Check,
                                    after: Duration::ZERO,
                                },
                                twin,
                            )
                            .await
                            .0;
                        assert_eq!(
                            seen, checked,
                            "{store}: {name}: {look:?} answers what a check sees"
                        );
                        clock.advance(UNIT * 2);
                        let mut after = vec![];
                        for key in [looked, untouched] {
                            let mut decisions = vec![];
                            for _ in 0..3 {
                                let check = Touch {
                                    policy: &c,
                                    cost: 1,
                                    kind: Kind::Check,
                                    after: UNIT / 2,
                                };
                                clock.advance(check.after);
                                decisions.push(subject.touch(&check, key).await.0);
                            }
                            clock.set_us(clock.now_us() - 3 * (UNIT / 2).as_micros() as u64);
                            after.push(decisions);
                        }
                        assert_eq!(
                            after[0], after[1],
                            "{store}: {name}: after {look:?} under B, C finds the key as nobody had looked"
                        );
                        answers.push((seen, after.swap_remove(0)));
                        for key in [looked, twin, untouched] {
                            match subject {
                                Subject::Memory(m) => m.reset(&c, key).expect("reset"),
                                Subject::Redis(r) => {
                                    Store::reset(r, &c, key.as_bytes()).await.expect("reset")
                                }
                            }
                        }
                    }
                    assert_eq!(answers[0], answers[1], "{name}: {look:?}: memory and redis");
                    clock.set_us(start + (UNIT * 20).as_micros() as u64);
                    scenarios += 1;
                }
            }
        }
    }
    assert_eq!(scenarios, 7 * 7 * 3 * 3);
}
