//! What the dashboard shows over time, counted beside the Prometheus metrics: per policy, the
//! decisions of each [`Outcome`] since start, a ring of once-a-second snapshots of those counts
//! for the charts, and the most denied keys.
//!
//! The decision path pays one hash lookup of the policy name and one relaxed atomic add per
//! rule; a denial also takes the policy's top-keys mutex. Nothing on that path reads a clock or
//! allocates (except a denied key entering the summary). A background thread copies the running
//! totals into the ring once a second, so a second's count is the difference of two snapshots,
//! and the counts in the chart add up exactly to the totals over the ring's span.
//!
//! Memory is fixed: at most [`MAX_POLICIES`] policies (a decision for a policy beyond that is
//! still in Prometheus but not on the dashboard), [`WINDOW_SECONDS`] + 1 snapshots of their
//! counts, and [`TOP_KEYS`] keys per policy ([`tollgate::top_keys::TopKeys`]), whatever the
//! traffic and however many distinct keys clients send. Like the metrics recorder it is one per
//! process: every server in a process counts into it.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Once, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tollgate::Outcome;
use tollgate::top_keys::TopKeys;

/// How many seconds of per-second counts the charts show.
pub(crate) const WINDOW_SECONDS: usize = 300;

/// How many denied keys are tracked per policy.
pub(crate) const TOP_KEYS: usize = 64;

/// The most policies the dashboard counts.
pub(crate) const MAX_POLICIES: usize = 256;

const OUTCOMES: usize = Outcome::ALL.len();

/// The recorder every door counts into.
pub(crate) static RECORDER: LazyLock<Recorder> = LazyLock::new(Recorder::new);

/// One policy's counts.
struct Slot {
    /// Its place in every snapshot.
    index: usize,
    totals: [AtomicU64; OUTCOMES],
    top: Mutex<TopKeys<Box<[u8]>>>,
}

/// The running totals of every policy at one moment.
struct Snapshot {
    at_ms: u64,
    /// By slot index; a policy first seen after this snapshot had zero then.
    counts: Vec<[u64; OUTCOMES]>,
}

/// The outcome of the last config reload.
#[derive(Debug, Clone)]
pub(crate) struct Reload {
    /// When it happened, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Whether the new config is being served.
    pub ok: bool,
    /// Why it was rejected.
    pub error: Option<String>,
}

/// Counts, snapshots and denied keys; see the [module docs](self).
pub(crate) struct Recorder {
    /// Read on every decision without a lock; replaced (rarely) when a policy is first seen.
    by_name: ArcSwap<HashMap<Box<str>, Arc<Slot>>>,
    /// Every slot in index order; its lock also serializes adding one.
    slots: Mutex<Vec<Arc<Slot>>>,
    ring: Mutex<VecDeque<Snapshot>>,
    reload: Mutex<Option<Reload>>,
    sampler: Once,
}

/// A lock, also after a panic elsewhere: the data under it is counters, always usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn outcome_index(outcome: Outcome) -> usize {
    Outcome::ALL
        .iter()
        .position(|&o| o == outcome)
        .unwrap_or(OUTCOMES - 1)
}

/// Milliseconds since the Unix epoch, for the page's time axis.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One policy as the data endpoint reports it.
#[derive(Debug, Clone, Default)]
pub(crate) struct PolicyView {
    /// Decisions since start, in [`Outcome::ALL`] order.
    pub totals: [u64; OUTCOMES],
    /// Decisions per second, one row per second of the ring (oldest first), in
    /// [`Outcome::ALL`] order.
    pub per_second: Vec<[u64; OUTCOMES]>,
    /// The most denied keys, most first: (key, count, error).
    pub top: Vec<(Vec<u8>, u64, u64)>,
}

/// One policy's most denied keys.
#[derive(Debug, Clone, Default)]
pub(crate) struct TopDenied {
    /// Denials counted since start.
    pub total: u64,
    /// Keys the summary holds.
    pub tracked: usize,
    /// (key, count, error), most first.
    pub keys: Vec<(Vec<u8>, u64, u64)>,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            by_name: ArcSwap::from_pointee(HashMap::new()),
            slots: Mutex::new(Vec::new()),
            ring: Mutex::new(VecDeque::with_capacity(WINDOW_SECONDS + 1)),
            reload: Mutex::new(None),
            sampler: Once::new(),
        }
    }

    /// Runs `f` on `policy`'s slot, adding the slot on first sight while there is room.
    fn with_slot(&self, policy: &str, f: impl FnOnce(&Slot)) {
        if let Some(slot) = self.by_name.load().get(policy) {
            f(slot);
            return;
        }
        let mut slots = lock(&self.slots);
        // Another thread may have added it since the lookup above.
        if let Some(slot) = self.by_name.load().get(policy) {
            f(slot);
            return;
        }
        if slots.len() >= MAX_POLICIES {
            return;
        }
        let slot = Arc::new(Slot {
            index: slots.len(),
            totals: Default::default(),
            top: Mutex::new(TopKeys::new(
                NonZeroUsize::new(TOP_KEYS).unwrap_or(NonZeroUsize::MIN),
            )),
        });
        slots.push(Arc::clone(&slot));
        let mut map = HashMap::clone(&self.by_name.load());
        map.insert(policy.into(), Arc::clone(&slot));
        self.by_name.store(Arc::new(map));
        f(&slot);
    }

    /// One rule decided under `policy` with `outcome`.
    pub(crate) fn decision(&self, policy: &str, outcome: Outcome) {
        let at = outcome_index(outcome);
        self.with_slot(policy, |slot| {
            slot.totals[at].fetch_add(1, Ordering::Relaxed);
        });
    }

    /// `key` was denied by `policy` (an enforced denial).
    pub(crate) fn denied_key(&self, policy: &str, key: &[u8]) {
        self.with_slot(policy, |slot| lock(&slot.top).add(key, 1));
    }

    /// Whether `policy` has counted anything.
    pub(crate) fn has(&self, policy: &str) -> bool {
        self.by_name.load().contains_key(policy)
    }

    /// Every policy with at least one denied key, by name.
    pub(crate) fn policies_with_denials(&self) -> Vec<String> {
        let map = self.by_name.load();
        let mut names: Vec<String> = map
            .iter()
            .filter(|(_, slot)| !lock(&slot.top).is_empty())
            .map(|(name, _)| name.to_string())
            .collect();
        names.sort_unstable();
        names
    }

    /// The `n` most denied keys of `policy`, with the summary's total and size.
    pub(crate) fn top_denied(&self, policy: &str, n: usize) -> TopDenied {
        let Some(slot) = self.by_name.load().get(policy).cloned() else {
            return TopDenied::default();
        };
        let top = lock(&slot.top);
        TopDenied {
            total: top.total(),
            tracked: top.len(),
            keys: top
                .top()
                .into_iter()
                .take(n)
                .map(|c| (c.key.to_vec(), c.count, c.error))
                .collect(),
        }
    }

    /// Records the outcome of a config reload.
    pub(crate) fn reloaded(&self, result: Result<(), String>) {
        *lock(&self.reload) = Some(Reload {
            at_ms: unix_ms(),
            ok: result.is_ok(),
            error: result.err(),
        });
    }

    /// The last reload, if any happened since start.
    pub(crate) fn last_reload(&self) -> Option<Reload> {
        lock(&self.reload).clone()
    }

    /// Copies the running totals into the ring, dropping the oldest snapshot beyond
    /// [`WINDOW_SECONDS`] + 1 (which give [`WINDOW_SECONDS`] seconds of differences).
    pub(crate) fn snapshot(&self) {
        let counts: Vec<[u64; OUTCOMES]> = lock(&self.slots)
            .iter()
            .map(|slot| std::array::from_fn(|i| slot.totals[i].load(Ordering::Relaxed)))
            .collect();
        let mut ring = lock(&self.ring);
        if ring.len() > WINDOW_SECONDS {
            ring.pop_front();
        }
        ring.push_back(Snapshot {
            at_ms: unix_ms(),
            counts,
        });
    }

    /// Starts the thread that takes a snapshot every second (once per process).
    pub(crate) fn start_sampling(&'static self) {
        self.sampler.call_once(|| {
            self.snapshot();
            // A thread, not a task: it must not depend on which runtime served first. If it
            // cannot start, totals and top keys still count; the charts stay empty.
            let started = std::thread::Builder::new()
                .name("tollgate-dashboard".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(Duration::from_secs(1));
                        self.snapshot();
                    }
                });
            if let Err(err) = started {
                tracing::warn!(error = %err, "cannot start the dashboard sampler; charts stay empty");
            }
        });
    }

    /// The times of the ring's seconds: each one's end, in milliseconds since the Unix epoch.
    pub(crate) fn seconds(&self) -> Vec<u64> {
        lock(&self.ring).iter().skip(1).map(|s| s.at_ms).collect()
    }

    /// What the dashboard shows of `policy`; zeros when it decided nothing yet.
    pub(crate) fn view(&self, policy: &str) -> PolicyView {
        let Some(slot) = self.by_name.load().get(policy).cloned() else {
            let rows = lock(&self.ring).len().saturating_sub(1);
            return PolicyView {
                per_second: vec![[0; OUTCOMES]; rows],
                ..PolicyView::default()
            };
        };
        let at = |snapshot: &Snapshot| snapshot.counts.get(slot.index).copied().unwrap_or([0; OUTCOMES]);
        let per_second = {
            let ring = lock(&self.ring);
            ring.iter()
                .zip(ring.iter().skip(1))
                .map(|(before, after)| {
                    let (before, after) = (at(before), at(after));
                    std::array::from_fn(|i| after[i].saturating_sub(before[i]))
                })
                .collect()
        };
        let top = lock(&slot.top)
            .top()
            .into_iter()
            .map(|c| (c.key.to_vec(), c.count, c.error))
            .collect();
        PolicyView {
            totals: std::array::from_fn(|i| slot.totals[i].load(Ordering::Relaxed)),
            per_second,
            top,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_add_up_to_the_totals_between_snapshots() {
        let recorder = Recorder::new();
        recorder.snapshot();
        recorder.decision("a", Outcome::Allowed);
        recorder.decision("a", Outcome::Denied);
        recorder.snapshot();
        recorder.decision("a", Outcome::Allowed);
        recorder.decision("b", Outcome::ShadowDenied);
        recorder.snapshot();
        let a = recorder.view("a");
        let (allowed, denied) = (outcome_index(Outcome::Allowed), outcome_index(Outcome::Denied));
        assert_eq!(a.per_second.len(), 2);
        assert_eq!((a.per_second[0][allowed], a.per_second[0][denied]), (1, 1));
        assert_eq!((a.per_second[1][allowed], a.per_second[1][denied]), (1, 0));
        assert_eq!((a.totals[allowed], a.totals[denied]), (2, 1));
        // `b` was first seen after the first snapshot: it counted zero then.
        let b = recorder.view("b");
        assert_eq!(b.per_second[1][outcome_index(Outcome::ShadowDenied)], 1);
        assert_eq!(recorder.seconds().len(), 2);
        assert_eq!(recorder.view("unknown").per_second.len(), 2);
    }

    #[test]
    fn the_ring_keeps_a_fixed_number_of_seconds() {
        let recorder = Recorder::new();
        for _ in 0..WINDOW_SECONDS + 50 {
            recorder.decision("a", Outcome::Allowed);
            recorder.snapshot();
        }
        assert_eq!(recorder.seconds().len(), WINDOW_SECONDS);
        assert_eq!(recorder.view("a").per_second.len(), WINDOW_SECONDS);
    }

    #[test]
    fn policies_beyond_the_maximum_are_not_counted() {
        let recorder = Recorder::new();
        for i in 0..MAX_POLICIES + 10 {
            recorder.decision(&format!("p{i}"), Outcome::Allowed);
        }
        assert_eq!(lock(&recorder.slots).len(), MAX_POLICIES);
        assert_eq!(recorder.view(&format!("p{MAX_POLICIES}")).totals, [0; OUTCOMES]);
    }

    #[test]
    fn denied_keys_are_listed_most_first_in_fixed_room() {
        let recorder = Recorder::new();
        for (key, times) in [("a", 2), ("b", 5), ("c", 1)] {
            for _ in 0..times {
                recorder.denied_key("login", key.as_bytes());
            }
        }
        for i in 0..10_000 {
            recorder.denied_key("flood", format!("k{i}").as_bytes());
        }
        let top: Vec<(Vec<u8>, u64)> = recorder
            .view("login")
            .top
            .into_iter()
            .map(|(k, n, _)| (k, n))
            .collect();
        assert_eq!(top, [(b"b".to_vec(), 5), (b"a".to_vec(), 2), (b"c".to_vec(), 1)]);
        assert_eq!(recorder.view("flood").top.len(), TOP_KEYS);
    }

    #[test]
    fn the_last_reload_is_kept() {
        let recorder = Recorder::new();
        assert!(recorder.last_reload().is_none());
        recorder.reloaded(Err("bad.yaml: policies: nope".into()));
        let reload = recorder.last_reload().unwrap();
        assert!(!reload.ok);
        assert_eq!(reload.error.as_deref(), Some("bad.yaml: policies: nope"));
    }
}
