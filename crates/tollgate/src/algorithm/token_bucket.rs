//! Token bucket: a bucket of `capacity` tokens, refilled one token per interval; a request takes
//! `cost` tokens and is denied when there are not enough.
//!
//! A key starts with a full bucket, so a client can burst up to `capacity` at once and then
//! continues at the refill rate. The state is a whole token count plus the time the next token
//! started accruing; partial tokens are that time's distance from now, so nothing is rounded.
//!
//! **Debt.** A charge ([`TokenBucket::charge`]) takes its cost whatever is left. What the bucket
//! holds is spent; the rest, `owed = cost − tokens`, is a debt the refill pays back first:
//! tokens stay at 0 and the refill clock moves `owed × interval` into the future, so the next
//! token accrues only once the debt is paid. The key owes
//! `debt = ⌈(refilled_at − now) / interval⌉` tokens, and a check of `cost` is refused for exactly
//! `refilled_at + cost × interval − now` (the step's usual answer for an empty bucket). The
//! clock stops at `now +` [`MAX_DEBT_PERIOD`](crate::bounds::MAX_DEBT_PERIOD).

use super::{StepCharge, StepDecision};
use crate::{PolicyError, Rate, bounds};

/// Parameters: `capacity` tokens, refilled at `refill`.
///
/// ```
/// use tollgate::Rate;
/// use tollgate::algorithm::token_bucket::TokenBucket;
///
/// // Bursts of up to 10, then 10 per second.
/// let params = TokenBucket::new(10, Rate::per_second(10)?)?;
/// assert_eq!(params.capacity(), 10);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    capacity: u64,
    refill: Rate,
}

/// Tokens in the bucket and the refill clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    /// Whole tokens available.
    pub tokens: u64,
    /// When the next token started accruing, µs since the Unix epoch.
    pub refilled_at_us: u64,
}

impl TokenBucket {
    /// `capacity` is 1 to 10^9, and refilling an empty bucket may take at most 1000 days.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::token_bucket::TokenBucket;
    ///
    /// // A billion tokens at one per second would take 31 years to refill.
    /// assert!(TokenBucket::new(1_000_000_000, Rate::per_second(1)?).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn new(capacity: u64, refill: Rate) -> Result<Self, PolicyError> {
        let capacity = bounds::count("capacity", capacity, bounds::MAX_LIMIT)?;
        refill.check_horizon("capacity", capacity)?;
        Ok(TokenBucket { capacity, refill })
    }

    /// Bucket size: the largest burst.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::token_bucket::TokenBucket;
    ///
    /// let params = TokenBucket::new(10, Rate::per_second(5)?)?;
    /// assert_eq!(params.capacity(), 10);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Refill rate.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::token_bucket::TokenBucket;
    ///
    /// let params = TokenBucket::new(10, Rate::per_second(5)?)?;
    /// assert_eq!(params.refill().count(), 5);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn refill(&self) -> Rate {
        self.refill
    }

    /// Decides a request of `cost` at `now_us`; with `commit`, an admitted one takes its tokens.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::token_bucket::TokenBucket;
    ///
    /// let params = TokenBucket::new(2, Rate::per_second(1)?)?;
    /// let mut state = None;
    /// assert!(params.step(&mut state, 0, 2, true).allowed);
    /// let denied = params.step(&mut state, 300_000, 1, true);
    /// assert_eq!(denied.retry_after_us, Some(700_000)); // one token is back at 1 s
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline(always)]
    pub fn step(&self, state: &mut Option<State>, now_us: u64, cost: u64, commit: bool) -> StepDecision {
        let s = self.refilled(state.as_ref(), now_us);
        let outcome = self.answer(&s, now_us, cost);
        if outcome.allowed && commit {
            *state = Some(State {
                tokens: outcome.remaining,
                ..s
            });
        }
        outcome
    }

    /// The answer to a request of `cost` at `now_us` on a bucket as of now (see `refilled`);
    /// when admitted, `remaining` is what the bucket holds after it.
    #[inline(always)]
    fn answer(&self, s: &State, now_us: u64, cost: u64) -> StepDecision {
        let interval = self.refill.interval_us();
        // A refill clock ahead of now is a debt (see `charge`): nothing passes, not even a
        // question of cost 0 ("is the key past its limit?").
        let allowed = s.tokens >= cost && s.refilled_at_us <= now_us;
        let tokens = if allowed { s.tokens - cost } else { s.tokens };
        // Time until `n` more tokens have accrued.
        let accrue = |n: u64| {
            s.refilled_at_us
                .saturating_add(n.saturating_mul(interval))
                .saturating_sub(now_us)
        };
        StepDecision {
            allowed,
            remaining: tokens,
            reset_after_us: if tokens < self.capacity {
                accrue(self.capacity - tokens)
            } else {
                0
            },
            // Tokens enough but a clock ahead (it stepped back): wait for the clock.
            retry_after_us: (!allowed).then(|| accrue(cost.saturating_sub(s.tokens))),
        }
    }

    /// Gives back up to `cost` tokens, never past a full bucket.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::token_bucket::TokenBucket;
    ///
    /// let params = TokenBucket::new(2, Rate::per_second(1)?)?;
    /// let mut state = None;
    /// params.step(&mut state, 0, 2, true);
    /// params.refund(&mut state, 0, 5);
    /// assert_eq!(state.map(|s| s.tokens), Some(2));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn refund(&self, state: &mut Option<State>, _now_us: u64, cost: u64) {
        if let Some(s) = state {
            s.tokens = s.tokens.saturating_add(cost).min(self.capacity);
        }
    }

    /// Takes `cost` tokens whatever is left (see the module's *Debt*) and returns the debt (the
    /// tokens owed beyond an empty bucket, 0 when none) with the answer a request of cost 1
    /// would get right after.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::token_bucket::TokenBucket;
    ///
    /// let params = TokenBucket::new(2, Rate::per_second(1)?)?;
    /// let mut state = None;
    /// let charged = params.charge(&mut state, 0, 5);
    /// assert_eq!(charged.debt, 3);
    /// assert_eq!(charged.decision.retry_after_us, Some(4_000_000));
    /// // Three seconds pay the debt, the fourth brings a token.
    /// assert_eq!(params.step(&mut state, 500_000, 1, false).retry_after_us, Some(3_500_000));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn charge(&self, state: &mut Option<State>, now_us: u64, cost: u64) -> StepCharge {
        let interval = self.refill.interval_us();
        let s = self.refilled(state.as_ref(), now_us);
        // The bucket written is one as of now too (its clock is within an interval of now, or
        // ahead of it in debt), so the answer comes from it as a step's would.
        let (s, debt) = if s.tokens >= cost {
            let left = State {
                tokens: s.tokens - cost,
                ..s
            };
            (left, 0)
        } else {
            let owed = cost - s.tokens;
            let latest = (now_us + bounds::MAX_DEBT_US).max(s.refilled_at_us);
            let refilled_at_us = s
                .refilled_at_us
                .saturating_add(owed.saturating_mul(interval))
                .min(latest);
            let empty = State {
                tokens: 0,
                refilled_at_us,
            };
            (empty, refilled_at_us.saturating_sub(now_us).div_ceil(interval))
        };
        *state = Some(s);
        StepCharge {
            decision: self.answer(&s, now_us, 1),
            debt,
        }
    }

    /// Tokens spent at `now_us`, debt included: what the bucket misses of its capacity, plus the
    /// tokens owed while its refill clock is ahead of now. What a changed limit carries over
    /// (see [`migrate`](super::migrate)).
    pub fn spent(&self, state: Option<&State>, now_us: u64) -> u64 {
        let s = self.refilled(state, now_us);
        let owed = s
            .refilled_at_us
            .saturating_sub(now_us)
            .div_ceil(self.refill.interval_us());
        self.capacity - s.tokens + owed
    }

    /// The bucket as of `now_us`. A missing key has a full bucket. A full bucket does not
    /// accrue, so its refill clock restarts at `now_us`.
    #[inline]
    fn refilled(&self, state: Option<&State>, now_us: u64) -> State {
        let full = State {
            tokens: self.capacity,
            refilled_at_us: now_us,
        };
        let Some(s) = state else { return full };
        let interval = self.refill.interval_us();
        let accrued = now_us.saturating_sub(s.refilled_at_us) / interval;
        if s.tokens + accrued >= self.capacity {
            return full;
        }
        State {
            tokens: s.tokens + accrued,
            refilled_at_us: s.refilled_at_us + accrued * interval,
        }
    }
}
