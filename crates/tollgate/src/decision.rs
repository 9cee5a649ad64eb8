//! What a check answers.

use std::time::Duration;

use crate::algorithm::StepDecision;

/// The answer to a check or peek. Being denied is a normal answer, not an error.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, ManualClock, MemoryStore, Policy};
///
/// let store = MemoryStore::builder().clock(ManualClock::new(0)).build();
/// let policy = Policy::new("api", Algorithm::sliding_log(1, Duration::from_secs(10))?)?;
/// let first = store.check(&policy, "client-1", 1)?;
/// assert!(first.allowed);
/// assert_eq!(first.remaining, 0);
/// let second = store.check(&policy, "client-1", 1)?;
/// assert!(!second.allowed);
/// assert_eq!(second.retry_after, Some(Duration::from_secs(10)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may pass.
    pub allowed: bool,
    /// The policy's limit, capacity or burst.
    pub limit: u64,
    /// How many more requests of cost 1 would pass right now, after this one.
    pub remaining: u64,
    /// Time until the key has its full budget back, if nothing else arrives.
    pub reset_after: Duration,
    /// When denied: time until a retry of the same cost would pass (never earlier, never later).
    /// `None` when allowed.
    pub retry_after: Option<Duration>,
    /// True when the store could not decide and the policy's
    /// [`FailureMode`](crate::FailureMode) did instead.
    pub degraded: bool,
}

impl Decision {
    /// Builds a decision from what a step decided and the policy's limit.
    ///
    /// ```
    /// use tollgate::Decision;
    /// use tollgate::algorithm::StepDecision;
    ///
    /// let step = StepDecision { allowed: true, remaining: 4, reset_after_us: 1_500, retry_after_us: None };
    /// let decision = Decision::from_step(step, 5);
    /// assert_eq!(decision.reset_after, std::time::Duration::from_micros(1_500));
    /// ```
    #[inline]
    pub fn from_step(step: StepDecision, limit: u64) -> Self {
        Decision {
            allowed: step.allowed,
            limit,
            remaining: step.remaining,
            reset_after: Duration::from_micros(step.reset_after_us),
            retry_after: step.retry_after_us.map(Duration::from_micros),
            degraded: false,
        }
    }
}

/// The answer to a charge ([`Store::charge`](crate::Store::charge)) for one rule: what a check of
/// cost 1 would get right after it, and the debt.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, ManualClock, MemoryStore, Policy, Rule};
///
/// let store = MemoryStore::builder().clock(ManualClock::new(0)).build();
/// let tokens = Policy::new("tokens", Algorithm::sliding_log(1_000, Duration::from_secs(60))?)?;
/// let charged = store.charge(&[Rule::new(&tokens, "tenant-a", 1_200)])?;
/// assert_eq!(charged[0].debt, 200);
/// assert!(!charged[0].decision.allowed);
/// assert_eq!(charged[0].decision.retry_after, Some(Duration::from_secs(60)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Charged {
    /// What a check of cost 1 would get now, after the charge (penalty included).
    pub decision: Decision,
    /// Units owed beyond the budget, 0 when none: how far the charge took the key into debt.
    pub debt: u64,
}

/// The answer to [`try_attempt`](crate::AttemptsStore::try_attempt): whether the try was
/// counted, and the counter after it.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, MemoryStore};
///
/// let store = MemoryStore::builder().clock(ManualClock::new(0)).build();
/// let hour = Duration::from_secs(3600);
/// let first = store.try_attempt("login:alice", 2, hour)?;
/// assert_eq!((first.allowed, first.attempts, first.remaining), (true, 1, 1));
/// store.try_attempt("login:alice", 2, hour)?;
/// let refused = store.try_attempt("login:alice", 2, hour)?;
/// assert_eq!((refused.allowed, refused.attempts, refused.remaining), (false, 2, 0));
/// assert_eq!(refused.ttl, hour);
/// # Ok::<(), tollgate::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptTry {
    /// The try was counted: fewer than the maximum were counted before it.
    pub allowed: bool,
    /// Attempts counted, this one included when it was allowed.
    pub attempts: u64,
    /// Tries left before the maximum.
    pub remaining: u64,
    /// Time until the counter expires: when refused, how long until tries are allowed again.
    pub ttl: Duration,
}

/// The answer to [`check_limit`](crate::AttemptsStore::check_limit) on an attempts counter.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, MemoryStore};
///
/// let store = MemoryStore::builder().clock(ManualClock::new(0)).build();
/// store.increment_attempts("login:alice", Duration::from_secs(3600))?;
/// let status = store.check_limit("login:alice", 5)?;
/// assert!(status.allowed);
/// assert_eq!(status.remaining, 4);
/// assert_eq!(status.ttl, Some(Duration::from_secs(3600)));
/// # Ok::<(), tollgate::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptsStatus {
    /// True while the count is below the maximum.
    pub allowed: bool,
    /// Attempts left before the maximum is reached.
    pub remaining: u64,
    /// Time until the counter expires; `None` when there is no counter.
    pub ttl: Option<Duration>,
}

impl Default for Decision {
    /// A denial with nothing left: the placeholder before a store answers.
    fn default() -> Self {
        Decision {
            allowed: false,
            limit: 0,
            remaining: 0,
            reset_after: Duration::ZERO,
            retry_after: None,
            degraded: false,
        }
    }
}

/// Per rule of a list, in the rules' order: its decision (as [`Decisions`]) or its charge (see
/// [`Store::charge`](crate::Store::charge)). One is held inline, so deciding or charging a
/// single rule allocates nothing. It reads as a slice.
///
/// ```
/// use tollgate::{Decision, Decisions};
///
/// let one = Decisions::from(vec![Decision::default()]);
/// assert_eq!(one.as_slice().len(), 1);
/// assert_eq!(one[0], Decision::default());
/// assert!(Decisions::default().is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PerRule<T> {
    /// No rules.
    #[default]
    None,
    /// One rule, inline.
    One(T),
    /// Several rules.
    Many(Vec<T>),
}

/// The decisions of a list of rules, in the rules' order.
pub type Decisions = PerRule<Decision>;

impl<T> PerRule<T> {
    /// The values, in the rules' order.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        match self {
            PerRule::None => &[],
            PerRule::One(d) => std::slice::from_ref(d),
            PerRule::Many(v) => v,
        }
    }

    /// The values, mutably.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            PerRule::None => &mut [],
            PerRule::One(d) => std::slice::from_mut(d),
            PerRule::Many(v) => v,
        }
    }
}

impl<T> std::ops::Deref for PerRule<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T> std::ops::DerefMut for PerRule<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<'a, T> IntoIterator for &'a PerRule<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl<T> IntoIterator for PerRule<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        let (one, many) = match self {
            PerRule::None => (None, Vec::new()),
            PerRule::One(value) => (Some(value), Vec::new()),
            PerRule::Many(values) => (None, values),
        };
        one.into_iter().chain(many)
    }
}

impl<T> From<Vec<T>> for PerRule<T> {
    fn from(mut values: Vec<T>) -> Self {
        match values.len() {
            0 => PerRule::None,
            1 => PerRule::One(values.remove(0)),
            _ => PerRule::Many(values),
        }
    }
}

impl<T> FromIterator<T> for PerRule<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        let mut values = values.into_iter();
        match (values.next(), values.next()) {
            (None, _) => PerRule::None,
            (Some(one), None) => PerRule::One(one),
            (Some(first), Some(second)) => {
                let mut all = vec![first, second];
                all.extend(values);
                PerRule::Many(all)
            }
        }
    }
}
