//! Penalties: how long a key is blocked after the algorithm denies it, growing for repeat
//! offenders.
//!
//! A [`Penalty`] is a list of block lengths, one per offense: the first denial blocks for the
//! first, a second offense while the first is still remembered blocks for the second, and so on;
//! past the end of the list every offense blocks for the last. An offense is remembered for
//! [`memory`](Penalty::memory) after the block it started ends; once that has passed with no new
//! offense, the key starts again from the first step. A growth rule ([`Penalty::growth`]) is the
//! same list written as a formula, expanded once at construction, so the stores (and the Lua
//! port) only ever index a list.
//!
//! The offense count is kept with the key's state and changed in the same atomic step as the
//! block itself (the memory store's `KeyState`, the Redis hash's `o` field). A one-step penalty
//! ([`Policy::with_block_for`](crate::Policy::with_block_for)) keeps no count at all, so it
//! behaves and stores exactly as a plain `block_for` always did.

use std::time::Duration;

use crate::{PolicyError, bounds};

/// The most steps a penalty may have; a growth rule reaching its maximum in more steps is
/// refused (with a factor of 2, 1 ms to 1000 days takes 37).
///
/// ```
/// assert_eq!(tollgate::penalty::MAX_STEPS, 64);
/// ```
pub const MAX_STEPS: usize = 64;

/// Block lengths per offense, and how long an offense is remembered.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Penalty;
///
/// let minute = Duration::from_secs(60);
/// let penalty = Penalty::sequence([minute, 10 * minute, 60 * minute])?;
/// assert_eq!(penalty.block_for(1), minute);
/// assert_eq!(penalty.block_for(3), 60 * minute);
/// assert_eq!(penalty.block_for(9), 60 * minute); // past the end: the last step
/// // By default an offense is remembered for the longest block after its block ends.
/// assert_eq!(penalty.memory(), 60 * minute);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Penalty {
    steps_us: Box<[u64]>,
    memory_us: u64,
}

impl Penalty {
    /// The same block for every offense: what [`Policy::with_block_for`](crate::Policy::with_block_for)
    /// sets. No offense count is kept. `block_for` is 1 ms to 1000 days.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let penalty = tollgate::Penalty::fixed(Duration::from_secs(30))?;
    /// assert!(!penalty.escalates());
    /// assert!(tollgate::Penalty::fixed(Duration::ZERO).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn fixed(block_for: Duration) -> Result<Self, PolicyError> {
        Ok(Penalty {
            steps_us: Box::new([bounds::period_us("block_for", block_for)?]),
            memory_us: 0,
        })
    }

    /// One block length per offense, in order: 1 to [`MAX_STEPS`] steps, each 1 ms to 1000 days
    /// and none shorter than the one before. The memory defaults to the last step.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Penalty;
    ///
    /// let s = Duration::from_secs;
    /// assert!(Penalty::sequence([s(60), s(600)]).unwrap().escalates());
    /// let err = Penalty::sequence([s(600), s(60)]).unwrap_err();
    /// assert_eq!(err.to_string(), "block_for step 2 (60s) is shorter than the step before it (600s)");
    /// assert!(Penalty::sequence([]).is_err());
    /// ```
    pub fn sequence(steps: impl IntoIterator<Item = Duration>) -> Result<Self, PolicyError> {
        let mut steps_us = Vec::new();
        for (i, step) in steps.into_iter().enumerate() {
            if i == MAX_STEPS {
                return Err(PolicyError::TooLarge {
                    field: "block_for steps",
                    value: (i + 1) as u64,
                    max: MAX_STEPS as u64,
                });
            }
            let us = bounds::period_us("block_for", step)?;
            if let Some(&before) = steps_us.last()
                && us < before
            {
                return Err(PolicyError::PenaltyShrinks {
                    step: i + 1,
                    value: step,
                    before: Duration::from_micros(before),
                });
            }
            steps_us.push(us);
        }
        let Some(&last) = steps_us.last() else {
            return Err(PolicyError::Zero {
                field: "block_for steps",
            });
        };
        Ok(Penalty {
            memory_us: if steps_us.len() > 1 { last } else { 0 },
            steps_us: steps_us.into(),
        })
    }

    /// A growth rule: `initial` for the first offense, then each block `factor` times the one
    /// before, never above `max`. `factor` is 2 to 1000, `initial` and `max` 1 ms to 1000 days,
    /// `max` at least `initial`. The memory defaults to `max`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Penalty;
    ///
    /// let penalty = Penalty::growth(Duration::from_secs(60), 10, Duration::from_secs(86_400))?;
    /// let steps: Vec<u64> = (1..=6).map(|n| penalty.block_for(n).as_secs()).collect();
    /// assert_eq!(steps, [60, 600, 6_000, 60_000, 86_400, 86_400]);
    /// assert_eq!(penalty.steps().len(), 5);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn growth(initial: Duration, factor: u64, max: Duration) -> Result<Self, PolicyError> {
        let initial_us = bounds::period_us("block_for.initial", initial)?;
        let max_us = bounds::period_us("block_for.max", max)?;
        if !(2..=1000).contains(&factor) {
            return Err(PolicyError::OutOfRange {
                field: "block_for.factor",
                value: factor,
                min: 2,
                max: 1000,
            });
        }
        if max_us < initial_us {
            return Err(PolicyError::PenaltyShrinks {
                step: 2,
                value: max,
                before: initial,
            });
        }
        let mut steps = vec![Duration::from_micros(initial_us)];
        let mut us = initial_us;
        while us < max_us {
            us = us.saturating_mul(factor).min(max_us);
            steps.push(Duration::from_micros(us));
        }
        Self::sequence(steps)
    }

    /// How long an offense is remembered after the block it started ends: a new offense before
    /// then is a repeat and takes the next step. 1 ms to 1000 days; meaningless (and ignored) for
    /// a one-step penalty.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let penalty = tollgate::Penalty::sequence([Duration::from_secs(60), Duration::from_secs(3600)])?
    ///     .remember_for(Duration::from_secs(86_400))?;
    /// assert_eq!(penalty.memory(), Duration::from_secs(86_400));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn remember_for(mut self, memory: Duration) -> Result<Self, PolicyError> {
        let memory_us = bounds::period_us("block_memory", memory)?;
        if self.escalates() {
            self.memory_us = memory_us;
        }
        Ok(self)
    }

    /// True when repeat offenses block longer: more than one step.
    ///
    /// ```
    /// let one = tollgate::Penalty::fixed(std::time::Duration::from_secs(1))?;
    /// assert!(!one.escalates());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn escalates(&self) -> bool {
        self.steps_us.len() > 1
    }

    /// The block lengths, first offense first.
    ///
    /// ```
    /// let one = tollgate::Penalty::fixed(std::time::Duration::from_secs(1))?;
    /// assert_eq!(one.steps(), [std::time::Duration::from_secs(1)]);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn steps(&self) -> Vec<Duration> {
        self.steps_us
            .iter()
            .map(|&us| Duration::from_micros(us))
            .collect()
    }

    /// The block lengths in microseconds.
    ///
    /// ```
    /// let one = tollgate::Penalty::fixed(std::time::Duration::from_millis(5))?;
    /// assert_eq!(one.steps_us(), [5_000]);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn steps_us(&self) -> &[u64] {
        &self.steps_us
    }

    /// How long an offense is remembered after its block ends (zero for a one-step penalty).
    ///
    /// ```
    /// let one = tollgate::Penalty::fixed(std::time::Duration::from_secs(1))?;
    /// assert_eq!(one.memory(), std::time::Duration::ZERO);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn memory(&self) -> Duration {
        Duration::from_micros(self.memory_us)
    }

    /// [`memory`](Self::memory) in microseconds.
    ///
    /// ```
    /// let p = tollgate::Penalty::sequence([std::time::Duration::from_secs(1), std::time::Duration::from_secs(2)])?;
    /// assert_eq!(p.memory_us(), 2_000_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn memory_us(&self) -> u64 {
        self.memory_us
    }

    /// The block for the `offense`-th offense (1 is the first; 0 is read as 1).
    ///
    /// ```
    /// let p = tollgate::Penalty::sequence([std::time::Duration::from_secs(1), std::time::Duration::from_secs(2)])?;
    /// assert_eq!(p.block_for(0).as_secs(), 1);
    /// assert_eq!(p.block_for(2).as_secs(), 2);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn block_for(&self, offense: u64) -> Duration {
        Duration::from_micros(self.block_for_us(offense))
    }

    /// [`block_for`](Self::block_for) in microseconds.
    ///
    /// ```
    /// let p = tollgate::Penalty::fixed(std::time::Duration::from_secs(1))?;
    /// assert_eq!(p.block_for_us(7), 1_000_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn block_for_us(&self, offense: u64) -> u64 {
        let at = usize::try_from(offense.max(1) - 1).unwrap_or(usize::MAX);
        self.steps_us[at.min(self.steps_us.len() - 1)]
    }

    /// The penalty as the Redis scripts read it: the steps in µs joined by commas, then, for an
    /// escalating penalty, `/` and the memory in µs (`"60000000"`, `"60000000,600000000/600000000"`).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let p = tollgate::Penalty::sequence([Duration::from_millis(1), Duration::from_millis(2)])?;
    /// assert_eq!(p.wire(), "1000,2000/2000");
    /// assert_eq!(tollgate::Penalty::fixed(Duration::from_millis(3))?.wire(), "3000");
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn wire(&self) -> String {
        let mut text = self
            .steps_us
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        if self.escalates() {
            text.push('/');
            text.push_str(&self.memory_us.to_string());
        }
        text
    }
}
