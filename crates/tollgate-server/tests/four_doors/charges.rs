//! Charges and refunds at every door: the HTTP API (`POST /v1/charge`, `/v1/refund`), gRPC and
//! `POST /json` (a descriptor's own `hits_addend` charges, `is_negative_hits` gives back), the
//! tower layers (`ChargeAfterLayer` charges the cost of an answer after it, `RateLimitLayer`'s
//! `refund_on_server_error` gives a failed request's cost back), and the proxy where it takes
//! part. One table of scenarios, each a list of steps with the answer every door must give;
//! `charge_doors` says how each door takes a step and where it shows each part of its answer.
//!
//! A charge is recorded whatever is left, so a key can go into debt, and a later check is
//! denied at every door alike. Whether a charge was recorded is the engine's to say, not a
//! door's: with the store gone, a `local` policy records it in the engine's own limiter, unless
//! that limiter is full of keys it must keep; `fail_open` and `fail_closed` record it nowhere.
//! Every door must say the same.
//!
//! The tower's `ChargeAfterLayer` asks whether the key is past its limit before the request
//! (the other doors' charges do not ask): a step charges only a key that is not past its limit,
//! and where asking first answers differently (a `fail_closed` limit with the store gone), the
//! table says so.
//!
//! The healthy scenarios run on memory stores and on a real Redis (one database per door); the
//! proxy takes part in them. The sick ones run on a Redis that is gone; the proxy, which
//! charges nothing itself, takes no part there (what the HTTP API would record for its app goes
//! to another engine's `local` limiter than the proxy's).

use std::fmt::Write as _;

use tollgate_server::AnyStore;
use tollgate_testkit::{AppServer, RedisServer};

use crate::charge_doors::{Doors, Opening, Said, Step, upstream_app};
use crate::{DOMAIN, KEY_HEADER, Limit};

/// What every door must answer to one step; `None` where nothing is expected.
#[derive(Clone, Copy, Debug)]
struct Expect {
    kind: &'static str,
    left: Option<u64>,
    debt: Option<u64>,
    recorded: Option<bool>,
    degraded: bool,
    /// What a door that asks before charging (the tower's `ChargeAfterLayer`) answers instead.
    asked_first: Option<&'static str>,
}

const fn expect(kind: &'static str, left: Option<u64>) -> Expect {
    Expect {
        kind,
        left,
        debt: None,
        recorded: None,
        degraded: false,
        asked_first: None,
    }
}

const fn allowed(left: u64) -> Expect {
    expect("allowed", Some(left))
}

const fn denied() -> Expect {
    expect("denied", Some(0))
}

const fn unavailable() -> Expect {
    expect("unavailable", None)
}

/// A charge: the budget left after it, its debt, and whether it was recorded.
const fn charged(left: u64, debt: u64, recorded: bool) -> Expect {
    Expect {
        debt: Some(debt),
        recorded: Some(recorded),
        ..expect("charged", Some(left))
    }
}

const fn refunded(left: u64) -> Expect {
    expect("refunded", Some(left))
}

const fn refund_failed() -> Expect {
    expect("refund failed", None)
}

impl Expect {
    /// A failure mode answered: the store is gone.
    const fn degraded(mut self) -> Self {
        self.degraded = true;
        self
    }

    const fn asked_first(mut self, kind: &'static str) -> Self {
        self.asked_first = Some(kind);
        self
    }

    /// Whether `said` at `door` is this answer: the kind, and every part the door shows.
    fn agrees(&self, door: &str, said: &Said) -> bool {
        let kind = match (door, self.asked_first) {
            ("tower", Some(kind)) => kind,
            _ => self.kind,
        };
        if said.kind != kind {
            return false;
        }
        if kind != self.kind {
            return true;
        }
        let shown = |said: Option<u64>, expected: Option<u64>| said.is_none() || said == expected;
        shown(said.left, self.left)
            && shown(said.debt, self.debt)
            && (said.past.is_none() || said.past == self.debt.map(|debt| debt > 0))
            // Every door says whether a charge was recorded.
            && said.recorded == self.recorded
            && (said.degraded.is_none() || said.degraded == Some(self.degraded))
    }

    fn shown(&self) -> String {
        let said = Said {
            kind: self.kind.to_owned(),
            left: self.left,
            debt: self.debt,
            past: None,
            recorded: self.recorded,
            degraded: Some(self.degraded),
        };
        match self.asked_first {
            Some(kind) => format!("{}; {kind} where asked first", said.shown()),
            None => said.shown(),
        }
    }
}

struct Scenario {
    name: &'static str,
    limits: Vec<Limit>,
    /// Run on a Redis that is gone, rather than on healthy stores.
    sick: bool,
    /// How many keys the engines' `local` limiters hold.
    fallback_max_keys: usize,
    steps: Vec<(Step, Expect)>,
}

const K: &str = "k";
/// Another key, to fill a `local` limiter with.
const F: &str = "f";

fn scenarios() -> Vec<Scenario> {
    use Step::{Charge, Check, Fail};
    let roomy = tollgate::memory::DEFAULT_MAX_KEYS;
    vec![
        Scenario {
            name: "a charge into debt",
            limits: vec![Limit::new("tokens", 3)],
            sick: false,
            fallback_max_keys: roomy,
            steps: vec![
                (Check("tokens", K), allowed(2)),
                (Charge("tokens", K, 4), charged(0, 2, true)),
                (Check("tokens", K), denied()),
                // Refused, so nothing was spent and nothing is given back.
                (Fail("tokens", K), denied()),
            ],
        },
        Scenario {
            name: "a charge that spends the budget exactly owes nothing",
            limits: vec![Limit::new("credits", 3)],
            sick: false,
            fallback_max_keys: roomy,
            steps: vec![
                (Charge("credits", K, 3), charged(0, 0, true)),
                // Not past its limit, so a charge is still made; now it is.
                (Charge("credits", K, 1), charged(0, 1, true)),
                (Check("credits", K), denied()),
            ],
        },
        Scenario {
            name: "a failed request's cost given back",
            limits: vec![Limit::new("quota", 2)],
            sick: false,
            fallback_max_keys: roomy,
            steps: vec![
                (Check("quota", K), allowed(1)),
                (Fail("quota", K), refunded(1)),
                (Check("quota", K), allowed(0)),
                (Check("quota", K), denied()),
            ],
        },
        Scenario {
            name: "a refund gives back the failed request, not the charge before it",
            limits: vec![Limit::new("quota", 3)],
            sick: false,
            fallback_max_keys: roomy,
            steps: vec![
                (Charge("quota", K, 2), charged(1, 0, true)),
                (Fail("quota", K), refunded(1)),
                (Check("quota", K), allowed(0)),
                (Check("quota", K), denied()),
            ],
        },
        Scenario {
            name: "redis gone, local",
            limits: vec![Limit::new("tokens", 2).on_store_failure("local")],
            sick: true,
            fallback_max_keys: roomy,
            steps: vec![
                (Check("tokens", K), allowed(1).degraded()),
                (Charge("tokens", K, 3), charged(0, 2, true).degraded()),
                (Check("tokens", K), denied().degraded()),
            ],
        },
        Scenario {
            name: "redis gone, local, its limiter full",
            limits: vec![Limit::new("tokens", 2).on_store_failure("local")],
            sick: true,
            fallback_max_keys: 1,
            steps: vec![
                // The one key the limiter holds, spent: it must be kept.
                (Check("tokens", F), allowed(1).degraded()),
                (Check("tokens", F), allowed(0).degraded()),
                // No room for another key: its charge is recorded nowhere, its check let through.
                (Charge("tokens", K, 3), charged(2, 0, false).degraded()),
                (Check("tokens", K), allowed(1).degraded()),
                // The key it holds is still charged.
                (Charge("tokens", F, 1), charged(0, 1, true).degraded()),
                (Check("tokens", F), denied().degraded()),
            ],
        },
        Scenario {
            name: "redis gone, fail_open",
            limits: vec![Limit::new("tokens", 2).on_store_failure("fail_open")],
            sick: true,
            fallback_max_keys: roomy,
            steps: vec![
                (Check("tokens", K), allowed(1).degraded()),
                (Charge("tokens", K, 3), charged(2, 0, false).degraded()),
                (Check("tokens", K), allowed(1).degraded()),
            ],
        },
        Scenario {
            name: "redis gone, fail_closed",
            limits: vec![Limit::new("tokens", 2).on_store_failure("fail_closed")],
            sick: true,
            fallback_max_keys: roomy,
            steps: vec![
                (Check("tokens", K), unavailable().degraded()),
                (
                    Charge("tokens", K, 3),
                    charged(0, 0, false).degraded().asked_first("unavailable"),
                ),
                (Fail("tokens", K), unavailable().degraded()),
            ],
        },
        Scenario {
            name: "redis gone, fail_open: a refund fails",
            limits: vec![Limit::new("tokens", 2).on_store_failure("fail_open")],
            sick: true,
            fallback_max_keys: roomy,
            steps: vec![(Fail("tokens", K), refund_failed().degraded())],
        },
        Scenario {
            name: "redis gone, local: a refund fails, and the local limiter gives it back",
            limits: vec![Limit::new("tokens", 2).on_store_failure("local")],
            sick: true,
            fallback_max_keys: roomy,
            steps: vec![
                (Check("tokens", K), allowed(1).degraded()),
                (Fail("tokens", K), refund_failed().degraded()),
                (Check("tokens", K), allowed(0).degraded()),
            ],
        },
    ]
}

/// The scenario's config: a tollgate-format file (the HTTP API, the tower layers, the proxy's
/// routes `/NAME`) and an Envoy-format one (gRPC and `/json`), loaded together.
fn config(limits: &[Limit]) -> tollgate_config::Limits {
    let mut ours = String::from("policies:\n");
    let mut envoy = format!("domain: {DOMAIN}\ndescriptors:\n");
    let mut routes = String::from("routes:\n");
    for limit in limits {
        let extras = limit.extras();
        let _ = writeln!(
            ours,
            "  {}: {{algorithm: sliding_log, limit: {}, window: 1m{extras}}}",
            limit.name, limit.limit
        );
        let _ = writeln!(
            envoy,
            "  - key: {}\n    rate_limit: {{unit: minute, requests_per_unit: {}, algorithm: sliding_log{extras}}}",
            limit.name, limit.limit
        );
        let _ = writeln!(
            routes,
            "  - {{prefix: /{0}, policies: [{0}], key: \"header:{KEY_HEADER}\"}}",
            limit.name
        );
    }
    ours.push_str(&routes);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("policies.yaml"), &ours).expect("write policies");
    std::fs::write(dir.path().join("envoy.yaml"), &envoy).expect("write descriptors");
    tollgate_config::load(dir.path()).unwrap_or_else(|e| panic!("{e}\n{ours}\n{envoy}"))
}

/// Where a scenario runs.
#[derive(Clone, Copy, Debug)]
enum Place {
    Memory,
    /// A healthy Redis, one database per door.
    Redis,
    /// A Redis that is gone.
    RedisGone,
}

/// The five doors' stores at `place`; the proxy's (the last) is shared with the HTTP API its
/// app reports to, which is one of its clones.
async fn stores(place: Place, redis: &RedisServer, gone_url: &str) -> [AnyStore; 5] {
    let mut stores = Vec::with_capacity(5);
    for door in 0..5 {
        stores.push(match place {
            Place::Memory => AnyStore::memory(),
            Place::Redis => crate::common::redis_store(&format!("{}{door}", redis.url())).await,
            Place::RedisGone => crate::common::redis_store(gone_url).await,
        });
    }
    stores.try_into().unwrap_or_else(|_| unreachable!("five stores"))
}

fn step_shown(step: Step) -> String {
    match step {
        Step::Check(name, key) => format!("check {name}/{key}"),
        Step::Charge(name, key, cost) => format!("charge {name}/{key} {cost}"),
        Step::Fail(name, key) => format!("fail {name}/{key}"),
    }
}

#[tokio::test]
async fn every_door_takes_charges_and_refunds_alike() {
    // The Envoy doors' `recorded` and `degraded` are read from the process's counters.
    let _counters = crate::PROCESS_COUNTERS.lock().await;
    tollgate_server::metrics::install();
    let redis = RedisServer::start();
    let mut gone = RedisServer::start();
    let gone_url = gone.url();
    gone.kill();
    let upstream = AppServer::start(upstream_app()).await;

    let mut table = String::new();
    let mut failed = Vec::new();
    for scenario in scenarios() {
        let places: &[Place] = match scenario.sick {
            true => &[Place::RedisGone],
            false => &[Place::Memory, Place::Redis],
        };
        for &place in places {
            redis.cli(&["FLUSHALL"]);
            let names: Vec<&str> = scenario.limits.iter().map(|limit| limit.name).collect();
            let stores = stores(place, &redis, &gone_url).await;
            let mut doors = Doors::open(Opening {
                names: &names,
                limits: &|| config(&scenario.limits),
                stores: &stores,
                fallback_max_keys: scenario.fallback_max_keys,
                upstream: (!scenario.sick).then_some(&upstream),
            })
            .await;
            let _ = writeln!(table, "{} ({place:?}):", scenario.name);
            for (i, (step, expected)) in scenario.steps.iter().enumerate() {
                let _ = writeln!(table, "  {}: expected {}", step_shown(*step), expected.shown());
                for (door, said) in doors.ask(*step).await {
                    let ok = expected.agrees(door, &said);
                    let mark = if ok { "  " } else { "!!" };
                    let _ = writeln!(table, "    {mark} {door:<6} {}", said.shown());
                    if !ok {
                        failed.push(format!("{} ({place:?}), step {} at {door}", scenario.name, i + 1));
                    }
                }
            }
            doors.close().await;
        }
    }
    upstream.stop().await;
    assert!(
        failed.is_empty(),
        "the doors disagree with the expected answers ({}):\n{table}",
        failed.join("; ")
    );
    println!("{table}");
}
