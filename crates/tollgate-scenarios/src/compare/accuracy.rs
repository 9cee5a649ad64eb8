//! Accuracy: the most requests an algorithm admits in any span of one window, divided by the
//! limit, under each traffic shape.
//!
//! Time is simulated: each probe is a store whose clock is a [`ManualClock`] the runner sets to
//! every arrival's time before checking it. On the memory store that is the store's own clock;
//! on Redis it is the store's clock option, which passes the time to the script instead of Redis
//! `TIME`. So a run takes as long as its checks, not as long as its traffic, and one seed gives
//! the same answer on every store (the scripts are ports of the memory store's step functions).
//!
//! Every run checks a key of its own, so runs sharing a probe never meet; probes run in
//! parallel (each has its own clock), each run inside one probe is sequential.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{ManualClock, MemoryStore, Policy};
use tollgate_redis::RedisStore;

use super::traffic::{self, Shape};
use crate::boundary::max_in_span;
use crate::lineup::START_US;

/// A store on a manual clock.
pub(crate) enum Clocked {
    Memory(MemoryStore<ManualClock>),
    Redis(RedisStore),
}

/// One store and the clock it reads.
pub(crate) struct Probe {
    pub(crate) store: Clocked,
    pub(crate) clock: ManualClock,
}

impl Probe {
    /// A memory store on a fresh manual clock.
    pub(crate) fn memory() -> Probe {
        let clock = ManualClock::new(START_US);
        Probe {
            store: Clocked::Memory(MemoryStore::builder().clock(clock.clone()).build()),
            clock,
        }
    }

    /// Checks one request of cost 1 at `at_us`; true when admitted.
    pub(crate) async fn check(
        &self,
        policy: &Policy,
        key: &[u8],
        at_us: u64,
    ) -> Result<bool, tollgate::Error> {
        self.clock.set_us(at_us);
        let decision = match &self.store {
            Clocked::Memory(store) => store.check(policy, key, 1)?,
            Clocked::Redis(store) => tollgate::Store::check(store, policy, key, 1).await?,
        };
        Ok(decision.allowed)
    }
}

/// One accuracy run: an algorithm, a shape and a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// Index into the lineup.
    pub(crate) contender: usize,
    pub(crate) shape: Shape,
    pub(crate) seed: u64,
}

/// The first window boundary at or after [`START_US`], so windows start at the origin.
pub(crate) fn origin_us(window: Duration) -> u64 {
    let w = window.as_micros() as u64;
    START_US.div_ceil(w) * w
}

/// Most admitted in any span of `window`, for each run, in the order given. `done` is called
/// after each run (for the progress bar).
pub(crate) async fn measure(
    probes: &[Arc<Probe>],
    policies: &[Policy],
    runs: &[Run],
    limit: u64,
    window: Duration,
    done: impl Fn() + Send + Sync + 'static,
) -> Result<Vec<u64>, tollgate::Error> {
    let done = Arc::new(done);
    let mut tasks = vec![];
    for (p, probe) in probes.iter().enumerate() {
        let mine: Vec<(usize, Run)> = runs
            .iter()
            .copied()
            .enumerate()
            .filter(|(i, _)| i % probes.len() == p)
            .collect();
        let (probe, policies, done) = (probe.clone(), policies.to_vec(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = vec![];
            for (i, run) in mine {
                let most = one(&probe, &policies[run.contender], i, run, limit, window).await?;
                out.push((i, most));
                done();
            }
            Ok::<_, tollgate::Error>(out)
        }));
    }
    let mut most = vec![0; runs.len()];
    for task in tasks {
        let answers = task.await.map_err(|join| {
            tollgate::Error::store(
                tollgate::StoreErrorKind::Script,
                format!("accuracy task failed: {join}"),
            )
        })??;
        for (i, m) in answers {
            most[i] = m;
        }
    }
    Ok(most)
}

async fn one(
    probe: &Probe,
    policy: &Policy,
    index: usize,
    run: Run,
    limit: u64,
    window: Duration,
) -> Result<u64, tollgate::Error> {
    let origin = origin_us(window);
    // The run's index makes the key unique even when two runs are alike (the seed sweep repeats
    // seed 1), as probes of one Redis share its keys.
    let key = format!("accuracy:{index}:{}:{:?}:{}", run.contender, run.shape, run.seed);
    let mut admitted = vec![];
    for at in run.shape.arrivals(limit, window, run.seed) {
        if probe.check(policy, key.as_bytes(), origin + at).await? {
            admitted.push(Duration::from_micros(at));
        }
    }
    Ok(max_in_span(&admitted, window))
}

/// Runs [`traffic::trickle_after_burst`] against `policy` (meant for the sliding window
/// counter): the most it admits in any span of `window`.
pub(crate) async fn trickle(
    probe: &Probe,
    policy: &Policy,
    limit: u64,
    window: Duration,
) -> Result<u64, tollgate::Error> {
    let origin = origin_us(window);
    let key = b"accuracy:trickle-after-burst";
    let mut admitted = vec![];
    for (at, at_most) in traffic::trickle_after_burst(limit, window) {
        for _ in 0..at_most {
            if !probe.check(policy, key, origin + at).await? {
                break;
            }
            admitted.push(Duration::from_micros(at));
        }
    }
    Ok(max_in_span(&admitted, window))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lineup::lineup;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    #[test]
    fn the_attack_reaches_the_sliding_window_bound_exactly() {
        for (limit, window_ms) in [(1, 10), (7, 10), (10, 1000), (100, 1000), (250, 50)] {
            let window = Duration::from_millis(window_ms);
            let policy = lineup(limit, window).unwrap()[2].policy.clone();
            let most = block_on(trickle(&Probe::memory(), &policy, limit, window)).unwrap();
            assert_eq!(
                most,
                traffic::sliding_window_bound(limit, window),
                "{limit} per {window_ms} ms"
            );
        }
    }

    #[test]
    fn random_traffic_never_passes_the_sliding_window_bound() {
        // Small windows and limits make the ms rounding and the bound's edge matter most.
        for (limit, window_ms) in [(3, 10), (5, 20), (20, 100)] {
            let window = Duration::from_millis(window_ms);
            let policy = lineup(limit, window).unwrap()[2].policy.clone();
            let runs: Vec<Run> = (0..300)
                .flat_map(|seed| {
                    [Shape::Poisson, Shape::OnOff].map(|shape| Run {
                        contender: 0,
                        shape,
                        seed,
                    })
                })
                .collect();
            let probes = [Arc::new(Probe::memory())];
            let most = block_on(measure(&probes, &[policy], &runs, limit, window, || {})).unwrap();
            let bound = traffic::sliding_window_bound(limit, window);
            assert!(
                most.iter().all(|&m| m <= bound),
                "{limit} per {window_ms} ms: {most:?}"
            );
        }
    }
}
