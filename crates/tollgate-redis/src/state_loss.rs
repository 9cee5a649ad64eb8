//! Noticing rate limit state that Redis lost: a failover that promoted a replica without the
//! master's last writes (Redis replicates asynchronously), a restart without persistence, a
//! flush. Those keys start again from older state, or none, and admit again what they had spent;
//! nothing in Redis's answers says so. This module makes it visible:
//! `StoreStats::state_lost` and `tollgate_store_state_lost_total` count it, and a `warn` line
//! names the node and the slots.
//!
//! # How
//!
//! Each cluster slot (standalone Redis: slot 0) has a *sequence*, a counter at
//! `<prefix>{<n>}:seq` on that slot (see `keys::slot_tag`). Every decision or batch call passes
//! its slot's sequence as its last key; a call that may write (a commit, a reserve, a charge)
//! adds one to it in the same atomic step as its writes, a peek only reads it, and each answers
//! what it held before. The counter is replicated with those writes, in the same transaction, so
//! a replica that lacks some of a slot's writes also lacks the increments that came with them.
//!
//! The store remembers, per slot, the highest value it has seen the sequence hold (`seen`). A
//! healthy counter never goes back, so every call finds it at `seen` or above, whatever other
//! instances did meanwhile. A call that finds it below the `seen` it was sent with has met a node
//! without writes this instance saw made: state was lost. The comparison is with the value the
//! call was *sent* with, not the latest one, so answers that come back out of order (calls of
//! one slot run in order, but their callers wake up in any order) are never mistaken for a loss.
//! Calls sent before a loss was noticed and answered after report it too; a generation per slot
//! counts each loss once.
//!
//! Each instance notices the losses of writes it saw (its own, or any it read the sequence
//! after); an instance that saw none of the lost writes has lost nothing of what it decided.
//!
//! # Why a write per call
//!
//! Other designs were cheaper but miss the common case. A marker written once (an epoch per
//! slot) was replicated long before the failover and survives it: it only notices a node that
//! lost everything. Comparing run ids or roles after a topology change notices the failover but
//! not whether the replica had caught up. Replication offsets would tell, but reading them takes
//! `INFO` (not allowed in scripts) on every node at every change. The last writes before a
//! failover are exactly what a replica may miss, so the marker must move with them: one `INCR`
//! per call, not per decision (a batch call of many decisions increments once), on a key no
//! bigger than a number. `BENCHMARKS.md` measures its cost in Redis time per decision.
//!
//! The sequences have no expiry: there are at most 16 384 of them per prefix, one per slot, a
//! few dozen bytes each; an expiry would make an idle slot's sequence vanish and look lost. An
//! eviction policy that may evict any key (`allkeys-lru`) can evict one; that shows as lost
//! state, as evicted rate limit state would.
//!
//! # Logs
//!
//! A failover loses the state of many slots at once, noticed by the first calls to each. The
//! slots noticed within [`LOG_EVERY`] of the first are gathered per node and logged as one line
//! naming their range and count, by the first call after that.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::keys::KeyNames;

/// How long the slots found lost are gathered before one log line names them.
pub(crate) const LOG_EVERY: Duration = Duration::from_millis(100);

/// What the store knows of each slot's sequence, the count of losses, and the log lines to come.
pub(crate) struct StateLoss {
    names: KeyNames,
    slots: Mutex<HashMap<u16, Seen>>,
    lost: AtomicU64,
    /// Whether `pending` holds anything, read by every call without the lock.
    has_pending: AtomicBool,
    pending: Mutex<Pending>,
}

/// The highest value this instance saw a slot's sequence hold, and how many losses it noticed
/// on the slot so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Seen {
    value: u64,
    generation: u64,
}

/// What a call is sent with: the slot, and what was known of its sequence then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    slot: u16,
    seen: Seen,
}

/// Losses noticed and not logged yet, per node: since when, the slot range, how many slots.
#[derive(Default)]
struct Pending {
    since: Option<Instant>,
    nodes: HashMap<Arc<str>, (u16, u16, u64)>,
}

impl StateLoss {
    pub(crate) fn new(names: KeyNames) -> Self {
        StateLoss {
            names,
            slots: Mutex::new(HashMap::new()),
            lost: AtomicU64::new(0),
            has_pending: AtomicBool::new(false),
            pending: Mutex::new(Pending::default()),
        }
    }

    /// The name of `slot`'s sequence, the last key of a decision or batch call.
    pub(crate) fn key(&self, slot: u16) -> Vec<u8> {
        self.names.sequence(slot)
    }

    /// What a call to `slot` is sent with.
    pub(crate) fn mark(&self, slot: u16) -> Mark {
        let seen = self.slots.lock().get(&slot).copied().unwrap_or_default();
        Mark { slot, seen }
    }

    /// A call sent with `mark` found its slot's sequence at `before` (and left it at `before`
    /// plus one when it wrote). Returns whether it noticed a loss no earlier answer reported.
    pub(crate) fn observe(&self, mark: Mark, before: u64, wrote: bool, node: &Arc<str>) -> bool {
        let after = before + u64::from(wrote);
        let noticed = {
            let mut slots = self.slots.lock();
            let seen = slots.entry(mark.slot).or_default();
            if before < mark.seen.value && seen.generation == mark.seen.generation {
                // The first answer to show this loss: from now on the sequence starts over from
                // what the node holds.
                *seen = Seen {
                    value: after,
                    generation: seen.generation + 1,
                };
                true
            } else {
                // Healthy, or a loss an earlier answer reported already. Only answers to calls
                // sent since the last loss tell what the node holds now.
                if seen.generation == mark.seen.generation {
                    seen.value = seen.value.max(after);
                }
                false
            }
        };
        if noticed {
            self.lost.fetch_add(1, Ordering::Relaxed);
            let mut pending = self.pending.lock();
            pending.since.get_or_insert_with(Instant::now);
            let range = pending
                .nodes
                .entry(node.clone())
                .or_insert((mark.slot, mark.slot, 0));
            range.0 = range.0.min(mark.slot);
            range.1 = range.1.max(mark.slot);
            range.2 += 1;
            self.has_pending.store(true, Ordering::Release);
        }
        if self.has_pending.load(Ordering::Acquire) {
            self.log_due();
        }
        noticed
    }

    /// How many losses this instance noticed, one per slot and loss.
    pub(crate) fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Logs the losses gathered for [`LOG_EVERY`], one line per node.
    fn log_due(&self) {
        let mut pending = self.pending.lock();
        if pending.since.is_none_or(|since| since.elapsed() < LOG_EVERY) {
            return;
        }
        pending.since = None;
        self.has_pending.store(false, Ordering::Release);
        for (node, (first, last, slots)) in pending.nodes.drain() {
            tracing::warn!(
                node = %node,
                slots = %format_args!("{first}-{last}"),
                count = slots,
                "redis lost rate limit state: a node answers for slots without writes this instance saw made (a failover to a replica that lagged, a restart without persistence, a flush); their keys admit again what they had spent"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Arc<str> {
        Arc::from("127.0.0.1:7000")
    }

    #[test]
    fn a_sequence_that_only_grows_is_no_loss() {
        let loss = StateLoss::new(KeyNames::new("tg:"));
        let first = loss.mark(7);
        assert!(!loss.observe(first, 0, true, &node()));
        // Another instance's writes move it on meanwhile; peeks do not.
        let second = loss.mark(7);
        assert!(!loss.observe(second, 41, true, &node()));
        assert!(!loss.observe(loss.mark(7), 42, false, &node()));
        assert_eq!(loss.lost(), 0);
    }

    #[test]
    fn answers_out_of_order_are_no_loss() {
        let loss = StateLoss::new(KeyNames::new("tg:"));
        assert!(!loss.observe(loss.mark(3), 9, true, &node()));
        // Both sent having seen 10; the node ran them as 10 and 11, and the second answer
        // came back first.
        let (a, b) = (loss.mark(3), loss.mark(3));
        assert!(!loss.observe(b, 11, true, &node()));
        assert!(!loss.observe(a, 10, true, &node()));
        assert_eq!(loss.lost(), 0);
    }

    #[test]
    fn a_sequence_gone_back_or_gone_is_one_loss_per_slot() {
        let loss = StateLoss::new(KeyNames::new("tg:"));
        assert!(!loss.observe(loss.mark(5), 99, true, &node()));
        // Three calls in flight when the replica that had only 90 was promoted.
        let marks = [loss.mark(5), loss.mark(5), loss.mark(5)];
        assert!(loss.observe(marks[0], 90, true, &node()));
        assert!(!loss.observe(marks[1], 91, true, &node()), "the same loss");
        assert!(!loss.observe(marks[2], 92, true, &node()), "the same loss");
        assert_eq!(loss.lost(), 1);
        // From there on the sequence is judged from what the node holds.
        assert!(!loss.observe(loss.mark(5), 93, true, &node()));
        // A node that lost everything: the sequence is gone.
        assert!(loss.observe(loss.mark(5), 0, true, &node()));
        // Another slot keeps its own account.
        assert!(!loss.observe(loss.mark(6), 0, false, &node()));
        assert_eq!(loss.lost(), 2);
    }

    #[test]
    fn the_sequence_key_is_on_the_slot() {
        let loss = StateLoss::new(KeyNames::new("tg:"));
        assert_eq!(crate::keys::slot(&loss.key(1234)), 1234);
    }
}
