//! `tollgate test CONFIG SCENARIOS`: policy tests, run in CI before a limit is deployed, as
//! code is tested before it ships.
//!
//! A policy test file ([`tollgate_config::policy_tests`]) holds timed requests and the answers they
//! must get. Each test runs on a fresh store whose clock is moved by hand
//! ([`tollgate::ManualClock`]), so a step at `at: 2m` runs at once, and through the server's own
//! doors, not a copy of them:
//!
//! - `check` steps go to the HTTP API's router (`POST /v1/check`);
//! - `envoy` steps go to the Envoy rate limit service ([`RlsService::answer`](crate::envoy::grpc::RlsService::answer), which gRPC and
//!   `POST /json` both call, planned by [`tollgate_config::envoy_plan`]);
//! - `request` steps go to `tollgate proxy`'s router ([`proxy::app`](crate::proxy::app)), whose
//!   admitted requests reach a stand-in upstream on loopback that answers 200.
//!
//! So a test that passes here is answered the same way by `tollgate serve` and `tollgate
//! proxy` over the same config.
//!
//! On the memory store every test gets a new store. On Redis (`--store redis://...`) every
//! test gets a key prefix of its own, new on every run, and the store passes the manual
//! clock's time to the scripts instead of Redis `TIME` (the store's test clock,
//! [`RedisStoreBuilder::clock`]), so the same test gives the same answers on both stores.
//!
//! Virtual time starts at [`START_US`], 2024-01-01T00:00:00Z, a Monday at midnight: windows
//! aligned to the minute, hour, day or week all begin at `at: 0s`.
//!
//! [`RedisStoreBuilder::clock`]: tollgate_redis::RedisStoreBuilder::clock

mod compare;
mod doors;
mod report;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tollgate::ManualClock;
use tollgate_config::policy_tests::{Ask, PolicyTestFile};
use tollgate_redis::{RedisStore, Target};

pub use compare::Mismatch;
pub use report::{Difference, Report, TestResult};

use crate::runtime::store::AnyStore;
use doors::{Doors, StandIn};

/// Where virtual time starts, in microseconds since the Unix epoch: 2024-01-01T00:00:00Z.
pub const START_US: u64 = 1_704_067_200_000_000;

/// What `tollgate test` runs.
#[derive(Debug, Clone)]
pub struct TestOptions {
    /// The config file or directory under test.
    pub config: PathBuf,
    /// Policy test files, or directories of `*.yaml` and `*.yml` policy test files.
    pub tests: Vec<PathBuf>,
    /// A Redis store to run on (`redis://...`, `redis+cluster://...`); the memory store when
    /// `None`.
    pub store: Option<String>,
}

/// Why the tests could not be run (not a difference: those are in the [`Report`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestError {
    /// The config, or a policy test file, is unusable; the message names the file and field.
    #[error(transparent)]
    File(#[from] tollgate_config::ConfigError),
    /// Anything else: the store, the stand-in upstream.
    #[error("{}", crate::runtime::store::error_chain(.0.as_ref()))]
    Run(anyhow::Error),
}

/// Loads the config and the policy test files, checks every test against the config, then runs
/// them all, in file order; see the [module docs](self).
pub async fn run(options: &TestOptions) -> Result<Report, TestError> {
    let limits = tollgate_config::load(&options.config)?;
    let loaded = PolicyTestFile::load_all(&options.tests)?;
    for file in &loaded {
        file.check_against(&limits)?;
    }
    let proxied = loaded.iter().any(|file| {
        file.tests.iter().any(|test| {
            test.steps
                .iter()
                .any(|step| matches!(step.ask, Ask::Request { .. }))
        })
    });
    let stand_in = match proxied {
        true => Some(StandIn::start().await.map_err(TestError::Run)?),
        false => None,
    };
    let run_id = run_id();
    let mut report = Report::default();
    let mut number = 0;
    for file in &loaded {
        for test in &file.tests {
            number += 1;
            let clock = ManualClock::new(START_US);
            let store = open_store(options.store.as_deref(), &clock, &format!("{run_id}:{number}"))
                .await
                .map_err(TestError::Run)?;
            // Loaded again for each test: the doors own their limits.
            let limits = || tollgate_config::load(&options.config);
            let doors = Doors::new(limits, store, stand_in.as_ref())?;
            let result = doors
                .run(&file.file, test, &clock)
                .await
                .map_err(TestError::Run)?;
            report.tests.push(result);
        }
    }
    if let Some(stand_in) = stand_in {
        stand_in.stop().await;
    }
    Ok(report)
}

/// A fresh store on `clock`: memory, or Redis under a prefix no other run or test uses.
async fn open_store(url: Option<&str>, clock: &ManualClock, test: &str) -> anyhow::Result<AnyStore> {
    let Some(url) = url else {
        return Ok(AnyStore::manual_memory(clock.clone()));
    };
    let target = Target::parse(url)?;
    let shown = target.display();
    let store = RedisStore::builder(target)
        .prefix(format!("tollgate-test:{test}:"))
        .clock(clock.clone())
        // A CI machine's Redis may be slow to answer; a timeout would read as a failure mode.
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .with_context(|| format!("store `{shown}`"))?;
    Ok(AnyStore::Redis(store))
}

/// What tells this run's Redis keys from every other run's: the process and the time.
fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{}-{nanos}", std::process::id())
}
