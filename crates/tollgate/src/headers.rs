//! The IETF RateLimit header fields, as text, so every way in (the HTTP API, the tower layer,
//! the proxy) answers with the same headers.
//!
//! Follows draft-ietf-httpapi-ratelimit-headers (versions 08 to 10): `RateLimit-Policy` states a
//! policy's quota `q` per window `w` (seconds), `RateLimit` states what is left `r` and the
//! seconds `t` until the quota is whole again; both name the policy, so a response can carry
//! several. `Retry-After` (RFC 9110) is whole seconds, rounded up so a client that waits exactly
//! that long is never early.

use std::time::Duration;

use crate::{Algorithm, Decision, FailureMode, Outcome, Policy, Rule, Verdict};

/// `RateLimit-Policy` for one policy, e.g. `"movies";q=20;w=60`.
///
/// The window of a bucket or GCRA is the time it takes to refill from empty.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Policy, Rate, headers};
///
/// let movies = Policy::new("movies", Algorithm::sliding_log(20, Duration::from_secs(60))?)?;
/// assert_eq!(headers::ratelimit_policy(&movies), r#""movies";q=20;w=60"#);
/// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 5)?)?;
/// assert_eq!(headers::ratelimit_policy(&api), r#""api";q=5;w=1"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn ratelimit_policy(policy: &Policy) -> String {
    format!(
        "{};q={};w={}",
        quoted(policy.name()),
        policy.max_cost(),
        seconds_up(window(policy.algorithm()))
    )
}

/// `RateLimit` for one decision, e.g. `"movies";r=0;t=42`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, MemoryStore, Policy, headers};
///
/// let store = MemoryStore::new();
/// let movies = Policy::new("movies", Algorithm::fixed_window(20, Duration::from_secs(60), tollgate::Anchor::FirstHit)?)?;
/// let decision = store.check(&movies, "client", 1)?;
/// assert_eq!(headers::ratelimit(&movies, &decision), r#""movies";r=19;t=60"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn ratelimit(policy: &Policy, decision: &Decision) -> String {
    format!(
        "{};r={};t={}",
        quoted(policy.name()),
        decision.remaining,
        seconds_up(decision.reset_after)
    )
}

/// `Retry-After` in whole seconds, rounded up (at least 1); `None` when allowed.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Decision, headers};
///
/// let denied = Decision {
///     allowed: false,
///     limit: 5,
///     remaining: 0,
///     reset_after: Duration::from_millis(2_100),
///     retry_after: Some(Duration::from_millis(100)),
///     degraded: false,
/// };
/// assert_eq!(headers::retry_after_seconds(&denied), Some(1));
/// ```
pub fn retry_after_seconds(decision: &Decision) -> Option<u64> {
    decision.retry_after.map(|d| seconds_up(d).max(1))
}

/// A duration in whole seconds, rounded up.
///
/// ```
/// use std::time::Duration;
///
/// assert_eq!(tollgate::headers::seconds_up(Duration::from_millis(1_001)), 2);
/// assert_eq!(tollgate::headers::seconds_up(Duration::ZERO), 0);
/// ```
pub fn seconds_up(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// A duration in whole milliseconds, rounded up, so a client waiting that long is never early:
/// the `*_ms` members of every JSON answer.
///
/// ```
/// use std::time::Duration;
///
/// assert_eq!(tollgate::headers::millis_up(Duration::from_micros(1_001)), 2);
/// assert_eq!(tollgate::headers::millis_up(Duration::ZERO), 0);
/// ```
pub fn millis_up(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// Which rules of a verdict a response's `RateLimit` headers report, by index into `rules`, in
/// order: the one rule every door (the HTTP API, the tower layer, the proxy) follows.
///
/// A rule is reported when it is enforced (a shadow rule never limits, so it shows nothing), has
/// a budget of its own to show (not one that failed closed, and not one a failure mode let
/// through without the store, unless that mode keeps a budget here: `Local`; a `fail_open`
/// answer has no budget and must not invent one), and is the first enforced rule with its
/// policy and key (two such rules spend from one budget, shown once).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Engine, MemoryStore, Policy, Rule, headers};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::new(MemoryStore::new());
/// let api = Policy::new("api", Algorithm::sliding_log(10, Duration::from_secs(60))?)?;
/// let rules = [Rule::new(&api, "k", 1), Rule::new(&api, "k", 1), Rule::new(&api, "k", 1).as_shadow()];
/// let verdict = engine.check_all(&rules).await?;
/// assert_eq!(headers::reported(&rules, &verdict).collect::<Vec<_>>(), [0]);
/// # Ok(())
/// # }
/// ```
pub fn reported<'a>(rules: &'a [Rule<'a>], verdict: &'a Verdict) -> impl Iterator<Item = usize> + 'a {
    rules
        .iter()
        .zip(verdict.rules())
        .enumerate()
        .filter(move |&(i, (rule, result))| {
            let has_budget = result.outcome != Outcome::Error
                && (!result.decision.degraded
                    || matches!(rule.policy.failure_mode(), FailureMode::Local { .. }));
            !rule.shadow
                && has_budget
                && !rules[..i].iter().any(|earlier| {
                    !earlier.shadow && earlier.key == rule.key && earlier.policy.name() == rule.policy.name()
                })
        })
        .map(|(i, _)| i)
}

fn window(algorithm: &Algorithm) -> Duration {
    match algorithm {
        Algorithm::FixedWindow(p) => p.window(),
        Algorithm::SlidingLog(p) => p.window(),
        Algorithm::SlidingWindow(p) => p.window(),
        // Validated: a whole refill takes at most 1000 days, so these products are small.
        Algorithm::TokenBucket(p) => Duration::from_micros(p.refill().interval_us() * p.capacity()),
        Algorithm::LeakyBucket(p) => Duration::from_micros(p.leak().interval_us() * p.capacity()),
        Algorithm::Gcra(p) => Duration::from_micros(p.tolerance_us()),
        // Calendar periods vary in length; the header announces the longest.
        Algorithm::CalendarQuota(p) => p.longest_period(),
    }
}

/// A structured-field string: quotes and backslashes escaped; anything outside printable ASCII,
/// which the syntax cannot carry, becomes `_`.
fn quoted(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;

    #[test]
    fn names_are_valid_structured_strings() {
        assert_eq!(quoted(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(quoted("café\n"), "\"caf__\"");
    }

    #[test]
    fn bucket_windows_are_the_time_to_refill() -> Result<(), crate::PolicyError> {
        let bucket = Policy::new("b", Algorithm::token_bucket(10, Rate::per_minute(60)?)?)?;
        assert_eq!(ratelimit_policy(&bucket), r#""b";q=10;w=10"#);
        let leaky = Policy::new("l", Algorithm::leaky_bucket(3, Rate::per_second(2)?)?)?;
        assert_eq!(ratelimit_policy(&leaky), r#""l";q=3;w=2"#);
        Ok(())
    }
}
