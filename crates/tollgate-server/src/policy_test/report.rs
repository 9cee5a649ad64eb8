//! What `tollgate test` prints: one line per test, and under a failed one each request whose
//! answer differed (the step, which sending, its virtual time, the request), then each field
//! expected against what came, so a failure reads without the test file at hand:
//!
//! ```text
//! FAIL  movies.yaml: the 21st request is refused
//!       steps[1], request 1 of 1 at 20s: check movies 198.51.100.4
//!         status: expected 200, got 429
//!         retry_after: expected none, got 60s
//! ```

use std::fmt;
use std::time::Duration;

use tollgate_config::duration::format_duration;
use tollgate_config::policy_tests::Expect;

use super::doors::Got;

/// Every test's result, in the order run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One per test.
    pub tests: Vec<TestResult>,
}

impl Report {
    /// Whether every answer was the expected one.
    pub fn passed(&self) -> bool {
        self.tests.iter().all(TestResult::passed)
    }
}

/// One test's answers that differed from what it expects.
#[derive(Debug, Clone)]
pub struct TestResult {
    /// The test file.
    pub file: String,
    /// The test's name.
    pub name: String,
    /// Requests sent.
    pub requests: u64,
    /// The first requests whose answer differed.
    pub differences: Vec<Difference>,
    /// How many more differed than are kept.
    pub more_differences: u64,
}

impl TestResult {
    /// Whether every answer was the expected one.
    pub fn passed(&self) -> bool {
        self.differences.is_empty()
    }
}

/// One request whose answer differed.
#[derive(Debug, Clone)]
pub struct Difference {
    /// The step's index in the test.
    pub step: usize,
    /// Which sending of the step (from 0).
    pub sending: u32,
    /// How many times the step is sent.
    pub of: u32,
    /// Its virtual time since the test started.
    pub at: Duration,
    /// The request, as one line.
    pub ask: String,
    /// Each field that differed.
    pub mismatches: Vec<Mismatch>,
    /// The door's error message, when it answered with one.
    pub detail: Option<String>,
}

/// One expected field and what came instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The field, as the test file names it.
    pub field: &'static str,
    /// What the test expects.
    pub expected: String,
    /// What the door answered.
    pub got: String,
}

/// The fields of `expect` that `got` does not match.
pub(super) fn compare(expect: &Expect, got: &Got) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let mut field = |field, expected: String, got: String| {
        if expected != got {
            out.push(Mismatch { field, expected, got });
        }
    };
    if let Some(allowed) = expect.allowed {
        field("allowed", allowed.to_string(), got.allowed.to_string());
    }
    if let Some(status) = expect.status {
        field("status", status.to_string(), shown(got.status));
    }
    if let Some(code) = &expect.code {
        field(
            "code",
            code.clone(),
            got.code.clone().unwrap_or_else(|| "none".into()),
        );
    }
    if let Some(retry_after) = expect.retry_after {
        // Zero expects no wait at all.
        let expected = (!retry_after.is_zero()).then_some(retry_after);
        field("retry_after", duration(expected), duration(got.retry_after));
    }
    if let Some(remaining) = expect.remaining {
        field("remaining", remaining.to_string(), shown(got.remaining));
    }
    out
}

fn shown(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "none".to_owned(), |v| v.to_string())
}

/// A duration as test files write it; `none` for no wait.
fn duration(value: Option<Duration>) -> String {
    match value {
        None => "none".to_owned(),
        Some(d) if d.is_zero() => "none".to_owned(),
        // Whole seconds when it is some, as Retry-After gives them.
        Some(d) if d.subsec_millis() == 0 => format_duration(d),
        Some(d) => format!("{}ms", d.as_millis()),
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for test in &self.tests {
            write!(f, "{test}")?;
        }
        let failed = self.tests.iter().filter(|t| !t.passed()).count();
        let total = self.tests.len();
        match failed {
            0 => writeln!(f, "\n{total} scenarios passed"),
            _ => writeln!(f, "\n{failed} of {total} scenarios failed"),
        }
    }
}

impl fmt::Display for TestResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed() {
            let plural = if self.requests == 1 { "" } else { "s" };
            return writeln!(
                f,
                "ok    {}: {} ({} request{plural})",
                self.file, self.name, self.requests
            );
        }
        writeln!(f, "FAIL  {}: {}", self.file, self.name)?;
        for difference in &self.differences {
            writeln!(
                f,
                "      steps[{}], request {} of {} at {}: {}",
                difference.step,
                difference.sending + 1,
                difference.of,
                at(difference.at),
                difference.ask
            )?;
            for mismatch in &difference.mismatches {
                writeln!(
                    f,
                    "        {}: expected {}, got {}",
                    mismatch.field, mismatch.expected, mismatch.got
                )?;
            }
            if let Some(detail) = &difference.detail {
                writeln!(f, "        (the door said: {detail})")?;
            }
        }
        if self.more_differences > 0 {
            writeln!(
                f,
                "      ... and {} more requests that differed",
                self.more_differences
            )?;
        }
        Ok(())
    }
}

/// A virtual time: `0s`, `20s`, `1m30s`, `1500ms`.
fn at(time: Duration) -> String {
    if time.is_zero() {
        "0s".to_owned()
    } else {
        duration(Some(time))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_only_the_fields_expected() {
        let expect = Expect {
            status: Some(429),
            retry_after: Some(Duration::from_secs(60)),
            ..Expect::default()
        };
        let got = Got {
            allowed: true,
            status: Some(200),
            remaining: Some(3),
            ..Got::default()
        };
        let fields: Vec<_> = compare(&expect, &got)
            .into_iter()
            .map(|m| format!("{}: expected {}, got {}", m.field, m.expected, m.got))
            .collect();
        assert_eq!(
            fields,
            [
                "status: expected 429, got 200",
                "retry_after: expected 1m, got none"
            ]
        );
    }

    #[test]
    fn a_zero_retry_after_expects_none() {
        let expect = Expect {
            retry_after: Some(Duration::ZERO),
            ..Expect::default()
        };
        assert!(compare(&expect, &Got::default()).is_empty());
    }
}
