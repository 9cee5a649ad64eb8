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

use super::compare::{Mismatch, duration};

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
