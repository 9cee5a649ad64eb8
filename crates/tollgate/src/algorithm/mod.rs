//! The algorithms, each a pure step function, [`Algorithm`], which is one of them with its
//! parameters, and [`decide`], which adds a policy's penalty (reading the policy through
//! [`PolicyParts`]).
//!
//! A step takes a key's state, the time in microseconds since the Unix epoch, and a cost, and
//! returns an [`StepDecision`]; with `commit` it also writes the new state, without it (a peek) it
//! writes nothing. Steps do no I/O and read no clock, so the memory store runs them under a lock,
//! the Redis store runs a line-for-line Lua port of them, and one set of test vectors checks that
//! both agree.
//!
//! Steps expect a cost of 1 to the policy's limit; stores check that before calling. Given
//! anything else they still return without panicking.
//!
//! Beside the step, each algorithm has a `refund` (give back what was spent) and a `charge`
//! (record a cost whatever is left, for a cost known only after the request): a charge is never
//! refused, so it may leave the key in *debt*, which the algorithm pays back the way it forgets
//! spending (each module's *Debt* section gives the formula). [`refund`] and [`charge`]
//! dispatch on the policy's algorithm.

pub mod calendar_quota;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod migrate;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

use std::time::Duration;

use crate::{Penalty, PolicyError, Rate};
use calendar_quota::{CalendarQuota, Period};
use fixed_window::{Anchor, FixedWindow};
use gcra::Gcra;
use leaky_bucket::LeakyBucket;
use migrate::OnChange;
use sliding_log::SlidingLog;
use sliding_window::SlidingWindow;
use token_bucket::TokenBucket;

/// An algorithm with its validated parameters.
///
/// Build one with the constructors ([`Algorithm::gcra`], ...) or from the parameter type of its
/// module ([`Gcra::new`], ...).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Count per window; see [`FixedWindow`].
    FixedWindow(FixedWindow),
    /// Exact log of admitted requests; see [`SlidingLog`].
    SlidingLog(SlidingLog),
    /// Two-counter estimate; see [`SlidingWindow`].
    SlidingWindow(SlidingWindow),
    /// Tokens refilled at a rate; see [`TokenBucket`].
    TokenBucket(TokenBucket),
    /// A meter drained at a rate; see [`LeakyBucket`].
    LeakyBucket(LeakyBucket),
    /// Generic cell rate algorithm; see [`Gcra`].
    Gcra(Gcra),
    /// Count per calendar day, week, month or year in a time zone; see [`CalendarQuota`].
    CalendarQuota(CalendarQuota),
}

impl Algorithm {
    /// A fixed window of `limit` requests per `window`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Anchor};
    ///
    /// let algorithm = Algorithm::fixed_window(100, Duration::from_secs(60), Anchor::Epoch)?;
    /// assert_eq!(algorithm.limit(), 100);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn fixed_window(limit: u64, window: Duration, anchor: Anchor) -> Result<Self, PolicyError> {
        FixedWindow::new(limit, window, anchor).map(Algorithm::FixedWindow)
    }

    /// An exact sliding log of `limit` requests per `window`.
    ///
    /// ```
    /// let algorithm = tollgate::Algorithm::sliding_log(20, std::time::Duration::from_secs(60))?;
    /// assert_eq!(algorithm.limit(), 20);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn sliding_log(limit: u64, window: Duration) -> Result<Self, PolicyError> {
        SlidingLog::new(limit, window).map(Algorithm::SlidingLog)
    }

    /// An approximate sliding window of `limit` requests per `window`.
    ///
    /// ```
    /// let algorithm = tollgate::Algorithm::sliding_window(1000, std::time::Duration::from_secs(3600))?;
    /// assert_eq!(algorithm.limit(), 1000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn sliding_window(limit: u64, window: Duration) -> Result<Self, PolicyError> {
        SlidingWindow::new(limit, window).map(Algorithm::SlidingWindow)
    }

    /// A token bucket holding `capacity` tokens, refilled at `refill`.
    ///
    /// ```
    /// use tollgate::{Algorithm, Rate};
    ///
    /// let algorithm = Algorithm::token_bucket(10, Rate::per_second(10)?)?;
    /// assert_eq!(algorithm.limit(), 10);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn token_bucket(capacity: u64, refill: Rate) -> Result<Self, PolicyError> {
        TokenBucket::new(capacity, refill).map(Algorithm::TokenBucket)
    }

    /// A leaky bucket (meter) holding `capacity`, drained at `leak`.
    ///
    /// ```
    /// use tollgate::{Algorithm, Rate};
    ///
    /// let algorithm = Algorithm::leaky_bucket(5, Rate::per_second(1)?)?;
    /// assert_eq!(algorithm.limit(), 5);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn leaky_bucket(capacity: u64, leak: Rate) -> Result<Self, PolicyError> {
        LeakyBucket::new(capacity, leak).map(Algorithm::LeakyBucket)
    }

    /// GCRA admitting `rate` on average with bursts of up to `burst` requests.
    ///
    /// ```
    /// use tollgate::{Algorithm, Rate};
    ///
    /// let algorithm = Algorithm::gcra(Rate::per_second(10)?, 5)?;
    /// assert_eq!(algorithm.limit(), 5);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn gcra(rate: Rate, burst: u64) -> Result<Self, PolicyError> {
        Gcra::new(rate, burst).map(Algorithm::Gcra)
    }

    /// A calendar quota of `limit` requests per `period` in the IANA zone `time_zone`, weeks
    /// starting on Monday (see [`CalendarQuota::week_starts`]).
    ///
    /// ```
    /// use tollgate::Algorithm;
    /// use tollgate::algorithm::calendar_quota::Period;
    ///
    /// let monthly = Algorithm::calendar_quota(1_000, Period::Month, "Europe/Paris")?;
    /// assert_eq!(monthly.name(), "calendar_quota");
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn calendar_quota(limit: u64, period: Period, time_zone: &str) -> Result<Self, PolicyError> {
        CalendarQuota::new(limit, period, time_zone).map(Algorithm::CalendarQuota)
    }

    /// The most this algorithm admits at once: the limit, capacity or burst. It is also the
    /// largest cost a single check may ask for.
    ///
    /// ```
    /// let algorithm = tollgate::Algorithm::gcra(tollgate::Rate::per_second(10)?, 3)?;
    /// assert_eq!(algorithm.limit(), 3);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn limit(&self) -> u64 {
        match self {
            Algorithm::FixedWindow(p) => p.limit(),
            Algorithm::SlidingLog(p) => p.limit(),
            Algorithm::SlidingWindow(p) => p.limit(),
            Algorithm::TokenBucket(p) => p.capacity(),
            Algorithm::LeakyBucket(p) => p.capacity(),
            Algorithm::Gcra(p) => p.burst(),
            Algorithm::CalendarQuota(p) => p.limit(),
        }
    }

    /// The same algorithm with its limit (and rate) divided by `n`, never below 1. Falls back to
    /// the original when the smaller parameters would not validate.
    pub(crate) fn divided(&self, n: u64) -> Algorithm {
        let share = |x: u64| (x / n).max(1);
        let divided = match self {
            Algorithm::FixedWindow(p) => {
                FixedWindow::new(share(p.limit()), p.window(), p.anchor()).map(Self::FixedWindow)
            }
            Algorithm::SlidingLog(p) => SlidingLog::new(share(p.limit()), p.window()).map(Self::SlidingLog),
            Algorithm::SlidingWindow(p) => {
                SlidingWindow::new(share(p.limit()), p.window()).map(Self::SlidingWindow)
            }
            Algorithm::TokenBucket(p) => p
                .refill()
                .slowed(n)
                .and_then(|rate| TokenBucket::new(share(p.capacity()), rate))
                .map(Self::TokenBucket),
            Algorithm::LeakyBucket(p) => p
                .leak()
                .slowed(n)
                .and_then(|rate| LeakyBucket::new(share(p.capacity()), rate))
                .map(Self::LeakyBucket),
            Algorithm::Gcra(p) => p
                .rate()
                .slowed(n)
                .and_then(|rate| Gcra::new(rate, share(p.burst())))
                .map(Self::Gcra),
            Algorithm::CalendarQuota(p) => CalendarQuota::new(share(p.limit()), p.period(), p.time_zone())
                .map(|q| Self::CalendarQuota(q.week_starts(p.week_start()))),
        };
        divided.unwrap_or_else(|_| self.clone())
    }

    /// A short lower-case name: `fixed_window`, `sliding_log`, `sliding_window`,
    /// `token_bucket`, `leaky_bucket`, `gcra` or `calendar_quota`.
    ///
    /// ```
    /// let algorithm = tollgate::Algorithm::sliding_log(5, std::time::Duration::from_secs(1))?;
    /// assert_eq!(algorithm.name(), "sliding_log");
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::FixedWindow(_) => "fixed_window",
            Algorithm::SlidingLog(_) => "sliding_log",
            Algorithm::SlidingWindow(_) => "sliding_window",
            Algorithm::TokenBucket(_) => "token_bucket",
            Algorithm::LeakyBucket(_) => "leaky_bucket",
            Algorithm::Gcra(_) => "gcra",
            Algorithm::CalendarQuota(_) => "calendar_quota",
        }
    }
}

/// What the functions of this module read of a policy: its algorithm and parameters, its penalty,
/// and what a change of algorithm does to its keys. [`Policy`](crate::Policy) is the one
/// implementation; they take it through this trait because policies are built from this
/// module's parameter types, so this module cannot depend on them in turn.
pub trait PolicyParts {
    /// The algorithm and its parameters.
    fn algorithm(&self) -> &Algorithm;
    /// The penalty, if any.
    fn penalty(&self) -> Option<&Penalty>;
    /// What a change of algorithm or parameters does to the keys already counted.
    fn on_change(&self) -> OnChange;
}

/// What one step decided, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepDecision {
    /// Whether the request passes.
    pub allowed: bool,
    /// How many more requests of cost 1 would pass right now, after this one.
    pub remaining: u64,
    /// Time until the key is back to its full budget if nothing else arrives.
    pub reset_after_us: u64,
    /// For a denied request, the time until a request of the same cost would pass.
    pub retry_after_us: Option<u64>,
}

/// A key's algorithm state. `Empty` is a key with no state, and so is a state of another
/// algorithm (left behind when a policy changes algorithm under the same name).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AlgorithmState {
    /// No state yet.
    #[default]
    Empty,
    /// See [`fixed_window`].
    FixedWindow(fixed_window::State),
    /// See [`sliding_log`]. Boxed so the other states stay small.
    SlidingLog(Box<sliding_log::Log>),
    /// See [`sliding_window`].
    SlidingWindow(sliding_window::State),
    /// See [`token_bucket`].
    TokenBucket(token_bucket::State),
    /// See [`leaky_bucket`].
    LeakyBucket(leaky_bucket::State),
    /// See [`gcra`].
    Gcra(gcra::State),
    /// See [`calendar_quota`]: a fixed window's state on calendar periods.
    CalendarQuota(fixed_window::State),
}

/// Everything stored for one (policy, key): the algorithm's state and the penalty.
///
/// The penalty is one word: the end of the block in its low 56 bits (µs since the Unix epoch,
/// enough until the year 4253; the Lua port's integers stop at 2^53 anyway) and the offense count
/// in its top 8 (a penalty has at most 64 steps). One word keeps the memory store's slot at one
/// 64-byte cache line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyState {
    /// The algorithm's state.
    pub algorithm: AlgorithmState,
    penalty: u64,
}

const BLOCK_BITS: u32 = 56;
const BLOCK_MASK: u64 = (1 << BLOCK_BITS) - 1;

impl KeyState {
    /// Back to no state, keeping a sliding log's allocation for reuse.
    ///
    /// ```
    /// use tollgate::algorithm::KeyState;
    ///
    /// let mut state = KeyState::default();
    /// state.set_penalty(5, 1);
    /// state.clear();
    /// assert_eq!(state, KeyState::default());
    /// ```
    pub fn clear(&mut self) {
        self.penalty = 0;
        match &mut self.algorithm {
            AlgorithmState::SlidingLog(log) => log.clear(),
            other => *other = AlgorithmState::Empty,
        }
    }

    /// Denied until this time (µs since the Unix epoch) because of a penalty; 0 when never
    /// blocked.
    ///
    /// ```
    /// assert_eq!(tollgate::algorithm::KeyState::default().blocked_until_us(), 0);
    /// ```
    #[inline]
    pub fn blocked_until_us(&self) -> u64 {
        self.penalty & BLOCK_MASK
    }

    /// Offenses in a row under an escalating [`Penalty`]: the step the current
    /// (or last) block took, counted from 1; 0 when none is kept. Only meaningful while the
    /// penalty's memory has not passed since [`blocked_until_us`](Self::blocked_until_us): see
    /// [`remembered_offenses`].
    ///
    /// ```
    /// let mut state = tollgate::algorithm::KeyState::default();
    /// state.set_penalty(1_000, 3);
    /// assert_eq!((state.blocked_until_us(), state.offenses()), (1_000, 3));
    /// ```
    #[inline]
    pub fn offenses(&self) -> u64 {
        self.penalty >> BLOCK_BITS
    }

    /// Sets the end of the block and the offense count (times past 2^56 µs and counts past 255
    /// saturate).
    ///
    /// ```
    /// let mut state = tollgate::algorithm::KeyState::default();
    /// state.set_penalty(u64::MAX, 300);
    /// assert_eq!(state.offenses(), 255);
    /// ```
    #[inline]
    pub fn set_penalty(&mut self, blocked_until_us: u64, offenses: u64) {
        self.penalty = blocked_until_us.min(BLOCK_MASK) | (offenses.min(255) << BLOCK_BITS);
    }
}

/// Decides a request of `cost` at `now_us` for `policy`, penalty included: a blocked key is
/// denied until the block ends, and a denial by the algorithm starts a block when the policy has
/// a [`Penalty`], as long as the step of this offense (the offense count goes up
/// by one when the previous offense is still remembered, and back to 1 when it is not). With
/// `commit` the state is updated; without it nothing changes (a peek gives the answer a check
/// would give).
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{KeyState, decide};
/// use tollgate::{Algorithm, Policy};
///
/// let policy = Policy::new("login", Algorithm::sliding_log(1, Duration::from_secs(1))?)?
///     .with_block_for(Duration::from_secs(60))?;
/// let mut state = KeyState::default();
/// assert!(decide(&policy, &mut state, 0, 1, true).allowed);
/// let denied = decide(&policy, &mut state, 1, 1, true);
/// assert_eq!(denied.retry_after_us, Some(60_000_000));
/// // Two seconds later the window is free, but the block holds.
/// assert!(!decide(&policy, &mut state, 2_000_000, 1, true).allowed);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[inline]
pub fn decide(
    policy: &impl PolicyParts,
    state: &mut KeyState,
    now_us: u64,
    cost: u64,
    commit: bool,
) -> StepDecision {
    // A blocked key's step only answers: nothing is spent while the block holds.
    let spends = commit && state.blocked_until_us() <= now_us;
    let mut outcome = step(policy.algorithm(), &mut state.algorithm, now_us, cost, spends);
    penalize(policy, state, now_us, &mut outcome, commit);
    outcome
}

/// Puts the penalty on the algorithm's answer `outcome` (see [`decide`]): a blocked key is
/// denied until the block ends; a denial under a penalty reports the block it starts, and with
/// `commit` starts it. Shared by [`decide`] and [`charge`], whose answer is the one a peek would
/// give. It changes the answer in place: most keys have no penalty, and their answer is then
/// not copied at all.
#[inline(always)]
fn penalize(
    policy: &impl PolicyParts,
    state: &mut KeyState,
    now_us: u64,
    outcome: &mut StepDecision,
    commit: bool,
) {
    if state.blocked_until_us() > now_us {
        let blocked_for = state.blocked_until_us() - now_us;
        *outcome = StepDecision {
            allowed: false,
            remaining: 0,
            reset_after_us: outcome.reset_after_us.max(blocked_for),
            retry_after_us: Some(outcome.retry_after_us.unwrap_or(0).max(blocked_for)),
        };
        return;
    }
    let remembered = remembered_offenses(policy, state, now_us);
    match (outcome.allowed, policy.penalty()) {
        (false, Some(penalty)) => {
            // One more offense in a row, or a first one; never past the last step.
            let offense = (remembered + 1).min(penalty.steps_us().len() as u64);
            let block_for = penalty.block_for_us(offense);
            if commit {
                state.set_penalty(now_us + block_for, if penalty.escalates() { offense } else { 0 });
            }
            outcome.remaining = 0;
            outcome.reset_after_us = outcome.reset_after_us.max(block_for);
            outcome.retry_after_us = outcome.retry_after_us.map(|r| r.max(block_for));
        }
        _ if commit && remembered == 0 => state.set_penalty(state.blocked_until_us(), 0),
        _ => {}
    }
}

/// The offenses in a row `state` still remembers at `now_us` under `policy`'s penalty: its count
/// while the penalty's memory has not passed since the last block ended, 0 after that (and for
/// a penalty that does not escalate).
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{KeyState, remembered_offenses};
/// use tollgate::{Algorithm, Penalty, Policy};
///
/// let s = Duration::from_secs;
/// let policy = Policy::new("p", Algorithm::sliding_log(1, s(1))?)?
///     .with_penalty(Penalty::sequence([s(1), s(2)])?.remember_for(s(10))?);
/// let mut state = KeyState::default();
/// state.set_penalty(1_000_000, 1);
/// assert_eq!(remembered_offenses(&policy, &state, 10_999_999), 1);
/// assert_eq!(remembered_offenses(&policy, &state, 11_000_000), 0);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[inline]
pub fn remembered_offenses(policy: &impl PolicyParts, state: &KeyState, now_us: u64) -> u64 {
    match policy.penalty() {
        Some(p) if p.escalates() && now_us < state.blocked_until_us().saturating_add(p.memory_us()) => {
            state.offenses()
        }
        _ => 0,
    }
}

/// Until when (µs) the state must be kept for its offense count, 0 when it has none to keep. A
/// store keeps a key at least this long even when its budget is full again, or a repeat offender
/// would start from the first step.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{KeyState, keep_until_us};
/// use tollgate::{Algorithm, Penalty, Policy};
///
/// let s = Duration::from_secs;
/// let policy = Policy::new("p", Algorithm::sliding_log(1, s(1))?)?
///     .with_penalty(Penalty::sequence([s(1), s(2)])?.remember_for(s(10))?);
/// let mut state = KeyState::default();
/// state.set_penalty(1_000_000, 1);
/// assert_eq!(keep_until_us(&policy, &state, 0), 11_000_000);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[inline]
pub fn keep_until_us(policy: &impl PolicyParts, state: &KeyState, now_us: u64) -> u64 {
    match (remembered_offenses(policy, state, now_us), policy.penalty()) {
        (0, _) | (_, None) => 0,
        (_, Some(p)) => state.blocked_until_us() + p.memory_us(),
    }
}

/// Gives back up to `cost` of what `policy` admitted for this key, within the algorithm's
/// meaning (a fixed window's count while its window is current, a log's newest entries still in
/// the window, a sliding window's newest counts while they weigh, a bucket's or GCRA's budget up
/// to full). A block stays as it is: a refund returns budget, not a pardon.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{KeyState, decide, refund};
/// use tollgate::{Algorithm, Policy};
///
/// let policy = Policy::new("export", Algorithm::sliding_log(2, Duration::from_secs(60))?)?;
/// let mut state = KeyState::default();
/// decide(&policy, &mut state, 0, 2, true);
/// assert!(!decide(&policy, &mut state, 1, 1, false).allowed);
/// refund(&policy, &mut state, 2, 1);
/// assert!(decide(&policy, &mut state, 3, 1, false).allowed);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
pub fn refund(policy: &impl PolicyParts, state: &mut KeyState, now_us: u64, cost: u64) {
    let slot = &mut state.algorithm;
    macro_rules! copy_state {
        ($params:expr, $variant:ident) => {{
            if let AlgorithmState::$variant(s) = slot {
                let mut state = Some(*s);
                $params.refund(&mut state, now_us, cost);
                if let Some(s) = state {
                    *slot = AlgorithmState::$variant(s);
                }
            }
        }};
    }
    match policy.algorithm() {
        Algorithm::FixedWindow(p) => copy_state!(p, FixedWindow),
        Algorithm::SlidingWindow(p) => copy_state!(p, SlidingWindow),
        Algorithm::TokenBucket(p) => copy_state!(p, TokenBucket),
        Algorithm::LeakyBucket(p) => copy_state!(p, LeakyBucket),
        Algorithm::Gcra(p) => copy_state!(p, Gcra),
        Algorithm::CalendarQuota(p) => copy_state!(p, CalendarQuota),
        Algorithm::SlidingLog(p) => {
            if let AlgorithmState::SlidingLog(log) = slot {
                p.refund(log, now_us, cost);
            }
        }
    }
}

/// What a charge did: the answer a check of cost 1 would get right after it, and the debt.
///
/// Each algorithm's `charge` returns one with its own answer, computed from the state it wrote;
/// [`charge`] adds the penalty to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCharge {
    /// What a check of cost 1 would get now (a peek; from [`charge`], penalty included).
    pub decision: StepDecision,
    /// Units owed beyond the budget, 0 when none; see each algorithm's *Debt*.
    pub debt: u64,
}

/// Records `cost` for this key whatever is left of its budget: a charge, for a cost known only
/// after the request (tokens of a model's answer, bytes sent). It is never refused: the key
/// goes into debt, and the algorithm pays the debt back the way it forgets spending (each
/// algorithm's module docs give its formula). Until then a check is refused with the exact
/// `retry_after`. A charge starts no penalty and lifts none; a key blocked by one stays
/// blocked. A state of another algorithm counts as empty. The answer is what a check of cost 1
/// would get right after the charge (what [`decide`] would answer for a peek), with the debt:
/// the algorithm computes it from the state it wrote, in the same pass.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{KeyState, charge, decide};
/// use tollgate::{Algorithm, Policy, Rate};
///
/// let policy = Policy::new("tokens", Algorithm::token_bucket(100, Rate::per_second(10)?)?)?;
/// let mut state = KeyState::default();
/// let charged = charge(&policy, &mut state, 0, 130);
/// assert_eq!(charged.debt, 30);
/// assert_eq!(charged.decision.retry_after_us, Some(3_100_000));
/// assert_eq!(charged.decision, decide(&policy, &mut state, 0, 1, false));
/// // Three seconds pay the debt back; a tenth more brings one token.
/// assert!(decide(&policy, &mut state, 3_100_000, 1, true).allowed);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[inline(always)]
pub fn charge(policy: &impl PolicyParts, state: &mut KeyState, now_us: u64, cost: u64) -> StepCharge {
    let slot = &mut state.algorithm;
    macro_rules! copy_state {
        ($params:expr, $variant:ident) => {{
            let mut state = match slot {
                AlgorithmState::$variant(s) => Some(*s),
                _ => None,
            };
            let charged = $params.charge(&mut state, now_us, cost);
            if let Some(s) = state {
                *slot = AlgorithmState::$variant(s);
            }
            charged
        }};
    }
    let mut charged = match policy.algorithm() {
        Algorithm::FixedWindow(p) => copy_state!(p, FixedWindow),
        Algorithm::SlidingWindow(p) => copy_state!(p, SlidingWindow),
        Algorithm::TokenBucket(p) => copy_state!(p, TokenBucket),
        Algorithm::LeakyBucket(p) => copy_state!(p, LeakyBucket),
        Algorithm::Gcra(p) => copy_state!(p, Gcra),
        Algorithm::CalendarQuota(p) => copy_state!(p, CalendarQuota),
        Algorithm::SlidingLog(p) => match slot {
            AlgorithmState::SlidingLog(log) => p.charge(log, now_us, cost),
            _ => {
                let mut log = Box::default();
                let charged = p.charge(&mut log, now_us, cost);
                *slot = AlgorithmState::SlidingLog(log);
                charged
            }
        },
    };
    penalize(policy, state, now_us, &mut charged.decision, false);
    charged
}

/// Runs the policy's algorithm on `slot`, treating a state of another algorithm as empty.
#[inline]
fn step(
    algorithm: &Algorithm,
    slot: &mut AlgorithmState,
    now_us: u64,
    cost: u64,
    commit: bool,
) -> StepDecision {
    macro_rules! copy_state {
        ($params:expr, $variant:ident) => {{
            let mut state = match slot {
                AlgorithmState::$variant(s) => Some(*s),
                _ => None,
            };
            let outcome = $params.step(&mut state, now_us, cost, commit);
            if let (true, Some(s)) = (commit, state) {
                *slot = AlgorithmState::$variant(s);
            }
            outcome
        }};
    }
    match algorithm {
        Algorithm::FixedWindow(p) => copy_state!(p, FixedWindow),
        Algorithm::SlidingWindow(p) => copy_state!(p, SlidingWindow),
        Algorithm::TokenBucket(p) => copy_state!(p, TokenBucket),
        Algorithm::LeakyBucket(p) => copy_state!(p, LeakyBucket),
        Algorithm::Gcra(p) => copy_state!(p, Gcra),
        Algorithm::CalendarQuota(p) => copy_state!(p, CalendarQuota),
        Algorithm::SlidingLog(p) => match slot {
            AlgorithmState::SlidingLog(log) => p.step(log, now_us, cost, commit),
            _ if commit => {
                let mut log = Box::default();
                let outcome = p.step(&mut log, now_us, cost, true);
                *slot = AlgorithmState::SlidingLog(log);
                outcome
            }
            _ => p.step(&mut sliding_log::Log::default(), now_us, cost, false),
        },
    }
}

/// Until when (µs) this key is "hot": blocked, or out of budget so that a request of cost 1 would
/// be denied. A store must not forget a hot key to make room for others, or flooding it with new
/// keys would hand the limited client a fresh budget.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{KeyState, decide, hot_until_us};
/// use tollgate::{Algorithm, Policy};
///
/// let policy = Policy::new("p", Algorithm::sliding_log(1, Duration::from_secs(10))?)?;
/// let mut state = KeyState::default();
/// decide(&policy, &mut state, 0, 1, true);
/// assert_eq!(hot_until_us(&policy, &mut state, 4_000_000), 10_000_000);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[inline]
pub fn hot_until_us(policy: &impl PolicyParts, state: &mut KeyState, now_us: u64) -> u64 {
    if state.blocked_until_us() > now_us {
        return state.blocked_until_us();
    }
    let outcome = step(policy.algorithm(), &mut state.algorithm, now_us, 1, false);
    now_us + outcome.retry_after_us.unwrap_or(0)
}

#[cfg(test)]
mod tests;
