//! Hot keys: decided without taking the shard lock at all.
//!
//! A key that is being denied (out of budget while its client keeps asking) is the one a flood
//! hammers, and every check of it would take and release its shard's read lock: two atomic
//! read-modify-writes on a cache line every thread shares, for an answer that changes nothing.
//! So once a GCRA or token bucket key is denied, its cell moves out of the table into its own
//! allocation ([`Shared`], reference counted), and each thread that decides it keeps a reference
//! in a one-entry thread-local memo along with the store, policy name and key it belongs to. A
//! thread's next check of that same key runs the cell's compare-and-swap step straight away
//! (a denial is one atomic load), without hashing the key or touching the shard.
//!
//! Why this stays exact: the slot owns the cell, and whatever takes it out of the table (a
//! penalty or a policy change going back to the locked path, reset, eviction, expiry sweeps,
//! the store being dropped) first swaps the cell's word to [`DEAD`](super::cell::DEAD). A memoised step that reads
//! `DEAD`, or whose swap fails because of it, goes back to the table. So a memo decides only
//! while the cell is still the key's live state, and the swap that kills it orders every step
//! before it or after it, exactly as with the lock. What takes the cell judges the key (expired?
//! hot?) by the state that swap returns, never by a read before it: a memo may spend from the
//! cell until the swap, and a judgement made earlier would drop or evict a key whose last
//! admission it never saw. The loom models at the bottom of this file race a memo against each
//! way out.
//!
//! Memory stays bounded: a memo holds at most one cell (a few dozen bytes) and one key per thread.

use std::cell::RefCell;
use std::sync::Arc;

use super::cell::{BucketCell, GcraCell, Step};
use super::key::Lookup;
use crate::algorithm::{AlgorithmState, StepDecision, gcra};
use crate::policy::PolicyName;
use crate::{Algorithm, Clock, Policy};

/// A cell of either algorithm.
#[derive(Debug)]
pub(crate) enum HotCell {
    Gcra(GcraCell),
    Bucket(BucketCell),
}

impl HotCell {
    /// The cell's step when it fits the policy; [`Step::Locked`] when it does not or is dead.
    // Always inlined: returned through the stack, the outcome costs a store-forwarding stall.
    #[inline(always)]
    pub(crate) fn step(&self, policy: &Policy, clock: &impl Clock, cost: u64, commit: bool) -> Step {
        let penalty = policy.block_for_us().is_some();
        match (self, policy.algorithm()) {
            (HotCell::Gcra(cell), Algorithm::Gcra(params)) if cell.fits(params) => {
                cell.step(params, penalty, clock, cost, commit)
            }
            (HotCell::Bucket(cell), Algorithm::TokenBucket(params)) if cell.fits(params) => {
                cell.step(params, penalty, clock, cost, commit)
            }
            _ => Step::Locked,
        }
    }

    pub(crate) fn expires_at_us(&self) -> u64 {
        match self {
            HotCell::Gcra(cell) => cell.expires_at_us(),
            HotCell::Bucket(cell) => cell.expires_at_us(),
        }
    }

    pub(crate) fn hot_until_us(&self) -> u64 {
        match self {
            HotCell::Gcra(cell) => cell.hot_until_us(),
            HotCell::Bucket(cell) => cell.hot_until_us(),
        }
    }

    /// Kills the cell and returns the state it held, timed by that state: memos may step the
    /// cell until the swap that kills it, so times read before it may be stale.
    pub(crate) fn take(&self) -> Taken {
        match self {
            HotCell::Gcra(cell) => {
                let tat_us = cell.take_tat_us();
                Taken {
                    state: AlgorithmState::Gcra(gcra::State { tat_us }),
                    expires_at_us: tat_us,
                    hot_until_us: cell.hot_until_at(tat_us),
                }
            }
            HotCell::Bucket(cell) => {
                let state = cell.take_state();
                Taken {
                    state: AlgorithmState::TokenBucket(state),
                    expires_at_us: cell.expires_at_of(state),
                    hot_until_us: cell.hot_until_of(state),
                }
            }
        }
    }
}

impl HotCell {
    /// Kills the cell, its state unwanted (or already taken).
    fn kill(&self) {
        match self {
            HotCell::Gcra(cell) => {
                cell.take_tat_us();
            }
            HotCell::Bucket(cell) => {
                cell.take_state();
            }
        }
    }
}

/// What a killed cell leaves for its slot: the state, when it expires and until when it is hot.
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) state: AlgorithmState,
    pub(crate) expires_at_us: u64,
    pub(crate) hot_until_us: u64,
}

/// A hot cell owned by its slot. Dropping it kills the cell, so memos stop deciding on it.
#[derive(Debug)]
pub(crate) struct Shared(Arc<HotCell>);

impl Shared {
    pub(crate) fn new(cell: HotCell) -> Self {
        Shared(Arc::new(cell))
    }

    pub(crate) fn cell(&self) -> &HotCell {
        &self.0
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.0.kill();
    }
}

/// A copy is a new cell with the same state: two slots must never share one.
impl Clone for Shared {
    fn clone(&self) -> Self {
        Shared::new(match &*self.0 {
            HotCell::Gcra(cell) => HotCell::Gcra(cell.clone()),
            HotCell::Bucket(cell) => HotCell::Bucket(cell.clone()),
        })
    }
}

/// The one hot key this thread decided last.
struct Memo {
    /// The store's identity: the address of its shard array. A store that is dropped kills its
    /// cells first, so a later store at the same address never decides on them.
    store: usize,
    owner: Arc<PolicyName>,
    key: Vec<u8>,
    cell: Arc<HotCell>,
}

#[cfg(not(all(test, loom)))]
thread_local! {
    static MEMO: RefCell<Option<Memo>> = const { RefCell::new(None) };
}

// In the model checks each of loom's threads needs a memo of its own.
#[cfg(all(test, loom))]
loom::thread_local! {
    static MEMO: RefCell<Option<Memo>> = RefCell::new(None);
}

/// Decides `lookup` from this thread's memo, if the memo holds its live cell.
#[inline(always)]
pub(crate) fn check(
    store: usize,
    lookup: Lookup<'_>,
    policy: &Policy,
    clock: &impl Clock,
    cost: u64,
    commit: bool,
) -> Option<StepDecision> {
    MEMO.with(|memo| {
        let memo = memo.try_borrow().ok()?;
        let memo = memo.as_ref()?;
        if memo.store != store || memo.key.len() != lookup.key.len() {
            return None;
        }
        let owner = lookup.owner?;
        if memo.key != lookup.key || !memo.owner.same(owner) {
            return None;
        }
        match memo.cell.step(policy, clock, cost, commit) {
            Step::Done(outcome) => Some(outcome),
            Step::Locked => None,
        }
    })
}

/// Keeps `shared`'s cell as this thread's memo for `lookup`.
pub(crate) fn remember(store: usize, lookup: Lookup<'_>, shared: &Shared) {
    let Some(owner) = lookup.owner else { return };
    MEMO.with(|memo| {
        let Ok(mut memo) = memo.try_borrow_mut() else {
            return;
        };
        match &mut *memo {
            Some(m) => {
                m.store = store;
                if !Arc::ptr_eq(&m.owner, owner) {
                    m.owner = owner.clone();
                }
                m.key.clear();
                m.key.extend_from_slice(lookup.key);
                m.cell = shared.0.clone();
            }
            None => {
                *memo = Some(Memo {
                    store,
                    owner: owner.clone(),
                    key: lookup.key.to_vec(),
                    cell: shared.0.clone(),
                })
            }
        }
    });
}

/// Whether this thread's memo holds `key`: the models check that they race a memo at all.
#[cfg(all(test, loom))]
fn remembers(key: &[u8]) -> bool {
    MEMO.with(|memo| memo.borrow().as_ref().is_some_and(|m| m.key == key))
}

/// Every interleaving of a memoised step on one thread with the cell leaving its slot on
/// another, explored by loom over the store's own code: under `--cfg loom` the cells' words
/// are loom's atomics, the shard lock is loom's ([`super::lock`]) and so is the memo's
/// thread-local. Run with `RUSTFLAGS="--cfg loom" cargo test -p tollgate --lib loom`.
///
/// The ways a cell leaves whose timing no caller controls are raced: a decision or a charge
/// under the write lock, which thaws it, a reset, and the expiry sweep (run by
/// [`MemoryStore::purge_expired`](crate::MemoryStore::purge_expired) and by inserts). Each
/// model counts what every thread was admitted and what the store still remembers, which must
/// be what the algorithm allows in some order of the calls. Making room by evicting a live key
/// is not modelled: it samples its victim at random, so loom could not replay an execution;
/// it kills a hot cell before judging it, as the sweep does.
#[cfg(all(test, loom))]
mod loom_model {
    use std::time::Duration;

    use loom::sync::Arc;

    use super::remembers;
    use crate::{Algorithm, ManualClock, MemoryStore, Policy, Rate, Rule};

    /// The burst is back 200 ms later, at a whole second: a slot's plain times are rounded up to
    /// whole seconds, which anywhere else would keep an expired state a little longer and hide
    /// a race at the expiry.
    const T0_US: u64 = 999_800_000;

    type Store = Arc<MemoryStore<ManualClock>>;

    /// GCRA at 10 a second with a burst of 2 (a unit back every 100 ms), and a store where this
    /// thread's memo holds the key `k`: both units spent at `T0_US`, then denied, so its cell is
    /// hot.
    fn hot_key() -> (Store, Policy, ManualClock) {
        let clock = ManualClock::new(T0_US);
        // So few keys make one shard: every execution takes the same lock.
        let store = MemoryStore::builder().max_keys(8).clock(clock.clone()).build();
        let policy = Policy::new("hot", Algorithm::gcra(Rate::per_second(10).unwrap(), 2).unwrap()).unwrap();
        assert!(store.check(&policy, "k", 1).unwrap().allowed);
        assert!(store.check(&policy, "k", 1).unwrap().allowed);
        assert!(!store.check(&policy, "k", 1).unwrap().allowed);
        assert!(remembers(b"k"), "a denied key is memoised");
        (Arc::new(store), policy, clock)
    }

    /// How many of `checks` checks of `k` are admitted, one after another, on this thread.
    fn admitted(store: &Store, policy: &Policy, checks: usize) -> usize {
        (0..checks)
            .filter(|_| store.check(policy, "k", 1).unwrap().allowed)
            .count()
    }

    /// Runs `other` on a second thread while this one checks `k` once from its memo; returns
    /// whether this thread's check was admitted and what `other` returned.
    fn race<T: Send + 'static>(
        store: &Store,
        policy: &Policy,
        other: impl FnOnce(Store, Policy) -> T + Send + 'static,
    ) -> (bool, T) {
        let handle = {
            let (store, policy) = (store.clone(), policy.clone());
            loom::thread::spawn(move || other(store, policy))
        };
        let memo = store.check(policy, "k", 1).unwrap().allowed;
        (memo, handle.join().unwrap())
    }

    /// A check of `k` with a rule that never denies: two rules are decided under the write lock,
    /// which thaws the hot cell. Whether `k` was admitted.
    fn two_rules(store: Store, policy: Policy) -> bool {
        let roomy = Policy::new(
            "roomy",
            Algorithm::gcra(Rate::per_second(10).unwrap(), 100).unwrap(),
        )
        .unwrap();
        let rules = [Rule::new(&policy, "k", 1), Rule::new(&roomy, "other", 1)];
        store.decide(&rules, true).unwrap().as_slice()[0].allowed
    }

    #[test]
    fn loom_a_memo_and_a_locked_decision_share_the_last_unit() {
        loom::model(|| {
            let (store, policy, clock) = hot_key();
            // One unit has come back; the memo and a locked decision both ask for it.
            clock.advance(Duration::from_millis(100));
            let (memo, locked) = race(&store, &policy, two_rules);
            assert_eq!(
                usize::from(memo) + usize::from(locked),
                1,
                "memo {memo}, locked {locked}"
            );
            assert_eq!(
                admitted(&store, &policy, 2),
                0,
                "the unit was spent once and is gone"
            );
        });
    }

    #[test]
    fn loom_a_charge_at_expiry_keeps_what_the_memo_spent() {
        loom::model(|| {
            let (store, policy, clock) = hot_key();
            // The whole burst is back, so the key's state has expired: a charge (under the write
            // lock, which thaws the cell) may start it afresh, but not forget what the memo spent
            // from it meanwhile. The charge spends one of the two units whatever happens.
            clock.advance(Duration::from_millis(200));
            let (memo, ()) = race(&store, &policy, |store, policy| {
                store.charge(&[Rule::new(&policy, "k", 1)]).unwrap();
            });
            let after = admitted(&store, &policy, 3);
            assert_eq!(usize::from(memo) + after, 1, "memo {memo}, then {after}");
        });
    }

    #[test]
    fn loom_a_reset_ends_the_memo() {
        loom::model(|| {
            let (store, policy, _clock) = hot_key();
            let (memo, ()) = race(&store, &policy, |store, policy| {
                store.reset(&policy, "k").unwrap()
            });
            // Before the reset the memo denies; after it the key starts afresh. Either way the
            // fresh burst of 2 is all there is: a memo still deciding on the old cell would
            // deny it.
            let after = admitted(&store, &policy, 3);
            assert_eq!(usize::from(memo) + after, 2, "memo {memo}, then {after}");
        });
    }

    #[test]
    fn loom_the_expiry_sweep_never_forgets_a_memoised_admission() {
        loom::model(|| {
            let (store, policy, clock) = hot_key();
            // The whole burst is back: the key's state has expired and a sweep may drop it,
            // while the memo spends from it.
            clock.advance(Duration::from_millis(200));
            let (memo, ()) = race(&store, &policy, |store, _| store.purge_expired());
            let after = admitted(&store, &policy, 3);
            assert_eq!(usize::from(memo) + after, 2, "memo {memo}, then {after}");
        });
    }
}
