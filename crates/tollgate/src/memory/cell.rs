//! The GCRA and token bucket state of a stored key in one atomic word, so the common check needs
//! no exclusive lock.
//!
//! GCRA keeps one number per key, the theoretical arrival time (TAT), and a check either moves it
//! forward or leaves it alone. That makes the common case a compare-and-swap: read the TAT, read
//! the clock, run the same pure step as everywhere else ([`Gcra::step`]), and swap the new TAT in
//! if nobody moved it meanwhile (else read again and retry). A token bucket's two numbers (whole
//! tokens, at most 10^9, and the time the next token started accruing) are packed into one word
//! the same way ([`BucketCell`]), and decided by [`TokenBucket::step`]. Checks of one key (and charges:
//! [`Gcra::charge`] and [`TokenBucket::charge`] swapped in the same way) run side by side
//! under the shard's *read* lock; only the slot's first insert, penalties, eviction, reset and
//! policy changes take the write lock.
//!
//! Why this stays exact: a swap succeeds only if the TAT is still the one the step started from,
//! so every admitted request is decided on the state every earlier admitted request left, in the
//! order of the swaps. The clock is read *after* the TAT, so a later swap has also read a later
//! (or equal) time: time runs forward along the swaps as it did under a lock. A denial writes
//! nothing (GCRA does not record denials), so it is decided on one consistent reading.
//!
//! When the step denies and the policy has a penalty (`block_for`), the answer here is not final:
//! a check must record the penalty and a peek must report it, so the caller goes to the locked
//! path, which decides again.
//!
//! The slot keeps no separate expiry or "hot" time for a cell: both follow from the state (a
//! GCRA key is back to its whole burst at the TAT and out of budget until
//! `TAT + interval − tolerance`; a bucket is full once its missing tokens have accrued and out of
//! budget while empty until its next token), so they can never disagree with it. Between two
//! locked visits they only move forward, or end once their time has passed, which is what the
//! shard's eviction bookkeeping assumes.

#[cfg(all(test, loom))]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(all(test, loom)))]
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Clock;
use crate::algorithm::gcra::{Gcra, State};
use crate::algorithm::token_bucket::{self, TokenBucket};
use crate::algorithm::{StepCharge, StepDecision};

/// The word of a cell that has left its slot (see [`super::hot`]): no TAT reaches it (a TAT is at
/// most 1000 days past now) and no bucket packs to it (its token field would exceed 10^9). A
/// step that reads it decides nothing and sends the caller back to the table.
pub(crate) const DEAD: u64 = u64::MAX;

/// A key's GCRA TAT with the parameters it was last decided under.
#[derive(Debug)]
pub(crate) struct GcraCell {
    tat_us: AtomicU64,
    /// The policy's interval and tolerance when the cell was made. A policy rebuilt under the same
    /// name with another rate or burst does not match, and goes through the locked path.
    interval_us: u64,
    tolerance_us: u64,
}

/// What the lock-free step decided.
pub(crate) enum Step {
    /// Final: nothing more to record.
    Done(StepDecision),
    /// Denied under a policy with a penalty: decide again under the write lock.
    Locked,
}

/// What a lock-free charge did.
pub(crate) enum Charge {
    /// Recorded; the answer is the one a check of cost 1 would get on the state it wrote.
    Done(StepCharge),
    /// Nothing recorded: charge under the write lock (a penalty would change the answer, the
    /// cell left its slot, or the state does not pack).
    Locked,
}

impl GcraCell {
    pub(crate) fn new(params: &Gcra, tat_us: u64) -> Self {
        GcraCell {
            tat_us: AtomicU64::new(tat_us),
            interval_us: params.rate().interval_us(),
            tolerance_us: params.tolerance_us(),
        }
    }

    /// True when the cell was made for these parameters.
    #[inline]
    pub(crate) fn fits(&self, params: &Gcra) -> bool {
        self.interval_us == params.rate().interval_us() && self.tolerance_us == params.tolerance_us()
    }

    /// The TAT now. Callers holding the write lock see the last swap.
    #[inline]
    pub(crate) fn tat_us(&self) -> u64 {
        self.tat_us.load(Ordering::Acquire)
    }

    /// Marks the cell dead and returns the TAT it held: after this no step can decide on it.
    #[inline]
    pub(crate) fn take_tat_us(&self) -> u64 {
        self.tat_us.swap(DEAD, Ordering::AcqRel)
    }

    /// When the key is back to its whole burst: after that the cell means nothing.
    #[inline]
    pub(crate) fn expires_at_us(&self) -> u64 {
        self.tat_us()
    }

    /// Until when a request of cost 1 would be denied (see
    /// [`hot_until_us`](crate::algorithm::hot_until_us)): `TAT + interval − tolerance`.
    #[inline]
    pub(crate) fn hot_until_us(&self) -> u64 {
        self.hot_until_at(self.tat_us())
    }

    /// [`hot_until_us`](Self::hot_until_us) for a TAT read once, or taken.
    #[inline]
    pub(crate) fn hot_until_at(&self, tat_us: u64) -> u64 {
        tat_us
            .saturating_add(self.interval_us)
            .saturating_sub(self.tolerance_us)
    }

    /// Decides a request of `cost` without the write lock; see the [module docs](self).
    #[inline(always)]
    pub(crate) fn step(
        &self,
        params: &Gcra,
        penalty: bool,
        clock: &impl Clock,
        cost: u64,
        commit: bool,
    ) -> Step {
        let mut seen = self.tat_us.load(Ordering::Acquire);
        loop {
            if seen == DEAD {
                return Step::Locked;
            }
            let now_us = clock.now_us();
            let mut state = Some(State { tat_us: seen });
            let outcome = params.step(&mut state, now_us, cost, commit);
            if !outcome.allowed {
                // A penalty changes the answer (and a check records it): the locked path's
                // `algorithm::decide` gives it, so a peek reports the block a check would start.
                return if penalty {
                    Step::Locked
                } else {
                    Step::Done(outcome)
                };
            }
            let tat_us = state.map_or(seen, |s| s.tat_us);
            if !commit || tat_us == seen {
                return Step::Done(outcome);
            }
            match self
                .tat_us
                .compare_exchange_weak(seen, tat_us, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Step::Done(outcome),
                Err(now_seen) => seen = now_seen,
            }
        }
    }
}

impl GcraCell {
    /// Records `cost` whatever is left without the write lock ([`Gcra::charge`] on the TAT,
    /// swapped in as a step's is), with the charge's own answer for a check of cost 1 on what it
    /// wrote. A denied answer under a penalty goes to the locked path before anything is
    /// swapped: the answer there reports the block a check would start.
    #[inline]
    pub(crate) fn charge(&self, params: &Gcra, penalty: bool, clock: &impl Clock, cost: u64) -> Charge {
        let mut seen = self.tat_us.load(Ordering::Acquire);
        loop {
            if seen == DEAD {
                return Charge::Locked;
            }
            let now_us = clock.now_us();
            let mut state = Some(State { tat_us: seen });
            let charged = params.charge(&mut state, now_us, cost);
            if penalty && !charged.decision.allowed {
                return Charge::Locked;
            }
            let tat_us = state.map_or(seen, |s| s.tat_us);
            match self
                .tat_us
                .compare_exchange_weak(seen, tat_us, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Charge::Done(charged),
                Err(now_seen) => seen = now_seen,
            }
        }
    }
}

/// Bits of the bucket word holding the refill time, as µs after the cell's base second: 2^34 µs
/// is 4.7 hours. The other 30 bits hold the tokens (a capacity is at most 10^9 < 2^30). A refill
/// time outside that range goes through the locked path, which makes a new cell with a new base.
const OFFSET_BITS: u32 = 34;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;

/// A key's token bucket (tokens and refill time in one word) with the parameters it was last
/// decided under.
#[derive(Debug)]
pub(crate) struct BucketCell {
    word: AtomicU64,
    /// The second (since the Unix epoch) the packed refill time counts from.
    base_s: u32,
    capacity: u32,
    refill_interval_us: u64,
}

impl BucketCell {
    /// `None` when the state cannot be packed (it then stays a plain state under the lock).
    pub(crate) fn new(params: &TokenBucket, state: token_bucket::State) -> Option<Self> {
        let base_s = u32::try_from(state.refilled_at_us / 1_000_000).ok()?;
        let cell = BucketCell {
            word: AtomicU64::new(0),
            base_s,
            capacity: u32::try_from(params.capacity()).ok()?,
            refill_interval_us: params.refill().interval_us(),
        };
        cell.word.store(cell.pack(state)?, Ordering::Relaxed);
        Some(cell)
    }

    #[inline]
    pub(crate) fn fits(&self, params: &TokenBucket) -> bool {
        u64::from(self.capacity) == params.capacity()
            && self.refill_interval_us == params.refill().interval_us()
    }

    #[inline]
    fn base_us(&self) -> u64 {
        u64::from(self.base_s) * 1_000_000
    }

    #[inline]
    fn pack(&self, state: token_bucket::State) -> Option<u64> {
        let offset = state.refilled_at_us.checked_sub(self.base_us())?;
        (offset <= OFFSET_MASK && state.tokens < 1 << (64 - OFFSET_BITS))
            .then_some(state.tokens << OFFSET_BITS | offset)
    }

    #[inline]
    fn unpack(&self, word: u64) -> token_bucket::State {
        token_bucket::State {
            tokens: word >> OFFSET_BITS,
            refilled_at_us: self.base_us() + (word & OFFSET_MASK),
        }
    }

    /// The bucket as last written. Callers holding the write lock see the last swap.
    #[inline]
    pub(crate) fn state(&self) -> token_bucket::State {
        self.unpack(self.word.load(Ordering::Acquire))
    }

    /// Marks the cell dead and returns the bucket it held: after this no step can decide on it.
    #[inline]
    pub(crate) fn take_state(&self) -> token_bucket::State {
        self.unpack(self.word.swap(DEAD, Ordering::AcqRel))
    }

    /// When the bucket is full again if nothing else arrives.
    #[inline]
    pub(crate) fn expires_at_us(&self) -> u64 {
        self.expires_at_of(self.state())
    }

    /// [`expires_at_us`](Self::expires_at_us) of a bucket read once, or taken.
    #[inline]
    pub(crate) fn expires_at_of(&self, s: token_bucket::State) -> u64 {
        let missing = u64::from(self.capacity).saturating_sub(s.tokens);
        s.refilled_at_us
            .saturating_add(missing.saturating_mul(self.refill_interval_us))
    }

    /// While empty, a request of cost 1 is denied until the next token.
    #[inline]
    pub(crate) fn hot_until_us(&self) -> u64 {
        self.hot_until_of(self.state())
    }

    /// [`hot_until_us`](Self::hot_until_us) of a bucket read once, or taken.
    #[inline]
    pub(crate) fn hot_until_of(&self, s: token_bucket::State) -> u64 {
        if s.tokens == 0 {
            s.refilled_at_us.saturating_add(self.refill_interval_us)
        } else {
            0
        }
    }

    /// Decides a request of `cost` without the write lock; see the [module docs](self).
    #[inline(always)]
    pub(crate) fn step(
        &self,
        params: &TokenBucket,
        penalty: bool,
        clock: &impl Clock,
        cost: u64,
        commit: bool,
    ) -> Step {
        let mut seen = self.word.load(Ordering::Acquire);
        loop {
            if seen == DEAD {
                return Step::Locked;
            }
            let now_us = clock.now_us();
            let mut state = Some(self.unpack(seen));
            let outcome = params.step(&mut state, now_us, cost, commit);
            if !outcome.allowed {
                // A penalty changes the answer (and a check records it): the locked path's
                // `algorithm::decide` gives it, so a peek reports the block a check would start.
                return if penalty {
                    Step::Locked
                } else {
                    Step::Done(outcome)
                };
            }
            if !commit {
                return Step::Done(outcome);
            }
            let Some(word) = state.and_then(|s| self.pack(s)) else {
                return Step::Locked;
            };
            match self
                .word
                .compare_exchange_weak(seen, word, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Step::Done(outcome),
                Err(now_seen) => seen = now_seen,
            }
        }
    }
}

impl BucketCell {
    /// Records `cost` whatever is left without the write lock, as [`GcraCell::charge`] does
    /// with [`TokenBucket::charge`]; a refill clock the debt moves past what the word holds goes
    /// to the locked path.
    #[inline]
    pub(crate) fn charge(
        &self,
        params: &TokenBucket,
        penalty: bool,
        clock: &impl Clock,
        cost: u64,
    ) -> Charge {
        let mut seen = self.word.load(Ordering::Acquire);
        loop {
            if seen == DEAD {
                return Charge::Locked;
            }
            let now_us = clock.now_us();
            let mut state = Some(self.unpack(seen));
            let charged = params.charge(&mut state, now_us, cost);
            if penalty && !charged.decision.allowed {
                return Charge::Locked;
            }
            let Some(word) = state.and_then(|s| self.pack(s)) else {
                return Charge::Locked;
            };
            match self
                .word
                .compare_exchange_weak(seen, word, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Charge::Done(charged),
                Err(now_seen) => seen = now_seen,
            }
        }
    }
}

impl Clone for BucketCell {
    fn clone(&self) -> Self {
        BucketCell {
            word: AtomicU64::new(self.word.load(Ordering::Acquire)),
            base_s: self.base_s,
            capacity: self.capacity,
            refill_interval_us: self.refill_interval_us,
        }
    }
}

impl Clone for GcraCell {
    fn clone(&self) -> Self {
        GcraCell {
            tat_us: AtomicU64::new(self.tat_us()),
            interval_us: self.interval_us,
            tolerance_us: self.tolerance_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, Rate};

    fn params() -> Gcra {
        Gcra::new(Rate::per_second(10).unwrap(), 5).unwrap()
    }

    #[test]
    fn decides_as_the_pure_step_does() {
        let params = params();
        let clock = ManualClock::new(1_000_000);
        let cell = GcraCell::new(&params, 0);
        let mut state = None;
        for at in [0, 0, 0, 0, 0, 0, 50_000, 100_000, 150_000, 900_000] {
            clock.set_us(1_000_000 + at);
            let expected = params.step(&mut state, 1_000_000 + at, 1, true);
            let Step::Done(got) = cell.step(&params, false, &clock, 1, true) else {
                panic!("no penalty, so never locked")
            };
            assert_eq!(got, expected, "at {at}");
        }
        assert_eq!(
            Some(State {
                tat_us: cell.tat_us()
            }),
            state
        );
    }

    #[test]
    fn a_denial_under_a_penalty_goes_to_the_lock_check_or_peek_and_records_nothing() {
        let params = params();
        let clock = ManualClock::new(0);
        let cell = GcraCell::new(&params, 500_000);
        assert!(matches!(cell.step(&params, true, &clock, 1, true), Step::Locked));
        assert!(matches!(cell.step(&params, true, &clock, 1, false), Step::Locked));
        assert!(matches!(cell.step(&params, false, &clock, 1, false), Step::Done(o) if !o.allowed));
        assert_eq!(cell.tat_us(), 500_000);
    }

    #[test]
    fn a_peek_moves_nothing() {
        let params = params();
        let clock = ManualClock::new(0);
        let cell = GcraCell::new(&params, 0);
        assert!(matches!(cell.step(&params, false, &clock, 1, false), Step::Done(o) if o.remaining == 4));
        assert_eq!(cell.tat_us(), 0);
    }

    fn bucket() -> TokenBucket {
        TokenBucket::new(5, Rate::per_second(10).unwrap()).unwrap()
    }

    #[test]
    fn a_bucket_decides_as_the_pure_step_does() {
        let params = bucket();
        let clock = ManualClock::new(7_300_000);
        let mut state = Some(token_bucket::State {
            tokens: 5,
            refilled_at_us: 7_300_000,
        });
        let cell = BucketCell::new(&params, state.unwrap()).unwrap();
        for (at, cost) in [
            (0, 1),
            (0, 3),
            (0, 2),
            (50_000, 1),
            (120_000, 1),
            (130_000, 1),
            (900_000, 4),
        ] {
            clock.set_us(7_300_000 + at);
            let expected = params.step(&mut state, 7_300_000 + at, cost, true);
            let Step::Done(got) = cell.step(&params, false, &clock, cost, true) else {
                panic!("no penalty and in range, so never locked")
            };
            assert_eq!(got, expected, "at {at}");
            assert_eq!(Some(cell.state()), state, "at {at}");
        }
    }

    #[test]
    fn a_bucket_packs_tokens_and_time_and_refuses_what_does_not_fit() {
        let params = bucket();
        let state = token_bucket::State {
            tokens: 3,
            refilled_at_us: 1_700_000_123_456_789,
        };
        let cell = BucketCell::new(&params, state).unwrap();
        assert_eq!(cell.state(), state);
        assert!(cell.fits(&params));
        assert!(!cell.fits(&TokenBucket::new(6, Rate::per_second(10).unwrap()).unwrap()));
        // Two tokens missing at 100 ms each: full 200 ms after the refill time.
        assert_eq!(cell.expires_at_us(), 1_700_000_123_656_789);
        assert_eq!(cell.hot_until_us(), 0);
        // Five hours after its base the refill time no longer fits: the lock takes over.
        let clock = ManualClock::new(1_700_000_123_456_789 + 5 * 3_600_000_000);
        assert!(matches!(cell.step(&params, false, &clock, 1, true), Step::Locked));
        assert_eq!(cell.state(), state);
        let empty = BucketCell::new(
            &params,
            token_bucket::State {
                tokens: 0,
                refilled_at_us: 1_000,
            },
        )
        .unwrap();
        assert_eq!(empty.hot_until_us(), 101_000);
    }

    #[test]
    fn expiry_and_hotness_follow_the_tat() {
        let params = params();
        let cell = GcraCell::new(&params, 1_000_000);
        assert_eq!(cell.expires_at_us(), 1_000_000);
        // Out of budget while TAT - now > tolerance - interval = 400 ms.
        assert_eq!(cell.hot_until_us(), 600_000);
        assert!(cell.fits(&params));
        assert!(!cell.fits(&Gcra::new(Rate::per_second(10).unwrap(), 6).unwrap()));
    }
}

/// Every interleaving of a few racing checks, explored by loom: the swap admits exactly what the
/// algorithm allows. Run with `RUSTFLAGS="--cfg loom" cargo test -p tollgate --lib loom`.
#[cfg(all(test, loom))]
mod loom_model {
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicUsize;

    use super::*;
    use crate::{ManualClock, Rate};

    fn race(threads: usize, check: impl Fn() -> bool + Send + Sync + 'static) -> usize {
        let check = Arc::new(check);
        let admitted = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (check, admitted) = (check.clone(), admitted.clone());
                loom::thread::spawn(move || {
                    if check() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        admitted.load(Ordering::Relaxed)
    }

    #[test]
    fn loom_two_gcra_checks_on_a_burst_of_one_admit_one() {
        loom::model(|| {
            let params = Gcra::new(Rate::per_second(10).unwrap(), 1).unwrap();
            let clock = ManualClock::new(1_000_000);
            let cell = Arc::new(GcraCell::new(&params, 0));
            let racing = cell.clone();
            let admitted = race(
                2,
                move || matches!(racing.step(&params, false, &clock, 1, true), Step::Done(o) if o.allowed),
            );
            assert_eq!(admitted, 1);
            assert_eq!(cell.tat_us(), 1_100_000);
        });
    }

    #[test]
    fn loom_two_gcra_checks_on_a_burst_of_two_both_count() {
        loom::model(|| {
            let params = Gcra::new(Rate::per_second(10).unwrap(), 2).unwrap();
            let clock = ManualClock::new(1_000_000);
            let cell = Arc::new(GcraCell::new(&params, 0));
            let racing = cell.clone();
            let admitted = race(
                2,
                move || matches!(racing.step(&params, false, &clock, 1, true), Step::Done(o) if o.allowed),
            );
            assert_eq!(admitted, 2);
            assert_eq!(cell.tat_us(), 1_200_000, "no admission was lost");
        });
    }

    #[test]
    fn loom_a_charge_racing_a_check_on_a_burst_of_one_records_both_or_the_charge() {
        loom::model(|| {
            let params = Gcra::new(Rate::per_second(10).unwrap(), 1).unwrap();
            let clock = ManualClock::new(1_000_000);
            let cell = Arc::new(GcraCell::new(&params, 0));
            let (charging, checking) = (cell.clone(), cell.clone());
            let charge_clock = clock.clone();
            let charge = loom::thread::spawn(
                move || matches!(charging.charge(&params, false, &charge_clock, 3), Charge::Done(c) if c.debt >= 2),
            );
            let check = loom::thread::spawn(
                move || matches!(checking.step(&params, false, &clock, 1, true), Step::Done(o) if o.allowed),
            );
            assert!(charge.join().unwrap());
            let admitted = check.join().unwrap();
            // The charge is never lost: 3 intervals, plus the check's one when it got in first.
            let expected = 1_000_000 + 100_000 * (3 + u64::from(admitted));
            assert_eq!(cell.tat_us(), expected);
        });
    }

    #[test]
    fn loom_two_bucket_checks_on_one_token_admit_one() {
        loom::model(|| {
            let params = TokenBucket::new(3, Rate::per_second(10).unwrap()).unwrap();
            let clock = ManualClock::new(1_000_000);
            let state = token_bucket::State {
                tokens: 1,
                refilled_at_us: 1_000_000,
            };
            let cell = Arc::new(BucketCell::new(&params, state).unwrap());
            let racing = cell.clone();
            let admitted = race(
                2,
                move || matches!(racing.step(&params, false, &clock, 1, true), Step::Done(o) if o.allowed),
            );
            assert_eq!(admitted, 1);
            assert_eq!(cell.state().tokens, 0);
        });
    }
}
