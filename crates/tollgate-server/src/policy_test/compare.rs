//! A door's answer ([`Got`]) against what a test expects of it: [`compare`] lists each field that
//! differs ([`Mismatch`]), written as test files write values.

use std::time::Duration;

use tollgate_config::duration::format_duration;
use tollgate_config::policy_tests::Expect;

/// What a door answered, in the terms a test expects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Got {
    /// Admitted: a 2xx answer, or Envoy's overall `OK`.
    pub allowed: bool,
    /// The HTTP status (`check` and `request`).
    pub status: Option<u16>,
    /// Envoy's overall code.
    pub code: Option<String>,
    /// `Retry-After`, or the longest reset of an over-limit Envoy descriptor.
    pub retry_after: Option<Duration>,
    /// The least budget left among the limits that applied.
    pub remaining: Option<u64>,
    /// An error's message (a problem's `detail`, a gRPC status), shown with a difference.
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
pub(super) fn duration(value: Option<Duration>) -> String {
    match value {
        None => "none".to_owned(),
        Some(d) if d.is_zero() => "none".to_owned(),
        // Whole seconds when it is some, as Retry-After gives them.
        Some(d) if d.subsec_millis() == 0 => format_duration(d),
        Some(d) => format!("{}ms", d.as_millis()),
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
