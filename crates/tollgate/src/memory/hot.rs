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
//! before it or after it, exactly as with the lock.
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

    /// Kills the cell and returns the state it held.
    pub(crate) fn take(&self) -> AlgorithmState {
        match self {
            HotCell::Gcra(cell) => AlgorithmState::Gcra(gcra::State {
                tat_us: cell.take_tat_us(),
            }),
            HotCell::Bucket(cell) => AlgorithmState::TokenBucket(cell.take_state()),
        }
    }
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
        let _ = self.0.take();
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

thread_local! {
    static MEMO: RefCell<Option<Memo>> = const { RefCell::new(None) };
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
