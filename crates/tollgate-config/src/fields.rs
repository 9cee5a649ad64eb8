//! The field types both file formats share (algorithm names, failure modes, scalars) and the
//! helpers that turn them into core values with errors that point at the right field.
//!
//! Files are read in two passes: serde checks the shape (unknown fields, wrong types) and keeps
//! durations and rates as raw [`Scalar`]s; then each format's compiler parses and validates them
//! knowing the path of every field, so a bad value is reported at its own field rather than at
//! the map around it.

use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Visitor};
use tollgate::{FailureMode, Penalty, PolicyError, Rate};

use crate::duration::{parse_duration, parse_rate};
use crate::{ConfigError, ConfigErrorKind};

/// A YAML scalar kept as written: text, a number or a boolean.
///
/// Durations and rates are kept raw so a number can be told apart from text (`90` gets a hint to
/// add a unit), and descriptor keys and values accept numbers and booleans as their text, as
/// envoyproxy/ratelimit (Go, yaml.v2) does for `value: 123`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    Text(String),
    Number(String),
    Bool(bool),
}

impl Scalar {
    /// The scalar as text: numbers and booleans as YAML would print them.
    pub(crate) fn text(&self) -> Cow<'_, str> {
        match self {
            Scalar::Text(text) | Scalar::Number(text) => Cow::Borrowed(text),
            Scalar::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        }
    }

    pub(crate) fn duration(&self) -> Result<Duration, ConfigErrorKind> {
        match self {
            Scalar::Text(text) => parse_duration(text),
            Scalar::Number(number) => Err(ConfigErrorKind::DurationWithoutUnit { got: number.clone() }),
            Scalar::Bool(_) => Err(ConfigErrorKind::BadDuration {
                got: self.text().into_owned(),
            }),
        }
    }

    pub(crate) fn rate(&self) -> Result<Rate, ConfigErrorKind> {
        match self {
            Scalar::Text(text) => parse_rate(text),
            _ => Err(ConfigErrorKind::BadRate {
                got: self.text().into_owned(),
            }),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;

        impl Visitor<'_> for ScalarVisitor {
            type Value = Scalar;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_owned()))
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Number(v.to_string()))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Number(v.to_string()))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Number(v.to_string()))
            }
        }

        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// The `algorithm` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AlgorithmName {
    FixedWindow,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    LeakyBucket,
    Gcra,
    /// A concurrency limit: not a rate, so only tollgate's format takes it.
    Concurrency,
    CalendarQuota,
}

impl AlgorithmName {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AlgorithmName::FixedWindow => "fixed_window",
            AlgorithmName::SlidingLog => "sliding_log",
            AlgorithmName::SlidingWindow => "sliding_window",
            AlgorithmName::TokenBucket => "token_bucket",
            AlgorithmName::LeakyBucket => "leaky_bucket",
            AlgorithmName::Gcra => "gcra",
            AlgorithmName::Concurrency => "concurrency",
            AlgorithmName::CalendarQuota => "calendar_quota",
        }
    }
}

/// The `period` field of a calendar quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PeriodName {
    Day,
    Week,
    Month,
    Year,
}

impl From<PeriodName> for tollgate::algorithm::calendar_quota::Period {
    fn from(name: PeriodName) -> Self {
        use tollgate::algorithm::calendar_quota::Period;
        match name {
            PeriodName::Day => Period::Day,
            PeriodName::Week => Period::Week,
            PeriodName::Month => Period::Month,
            PeriodName::Year => Period::Year,
        }
    }
}

/// The `week_starts` field of a weekly calendar quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WeekdayName {
    Monday,
    Tuesday,
    Wednesday,
    Thursday,
    Friday,
    Saturday,
    Sunday,
}

impl From<WeekdayName> for tollgate::algorithm::calendar_quota::Weekday {
    fn from(name: WeekdayName) -> Self {
        use tollgate::algorithm::calendar_quota::Weekday;
        match name {
            WeekdayName::Monday => Weekday::Monday,
            WeekdayName::Tuesday => Weekday::Tuesday,
            WeekdayName::Wednesday => Weekday::Wednesday,
            WeekdayName::Thursday => Weekday::Thursday,
            WeekdayName::Friday => Weekday::Friday,
            WeekdayName::Saturday => Weekday::Saturday,
            WeekdayName::Sunday => Weekday::Sunday,
        }
    }
}

/// The `anchor` field of a fixed window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AnchorName {
    Epoch,
    FirstHit,
}

/// The `on_change` field: what a later change of the policy's algorithm or parameters does to
/// the keys it already counts (see [`tollgate::OnChange`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OnChangeName {
    Keep,
    Scale,
    Reset,
}

impl From<OnChangeName> for tollgate::OnChange {
    fn from(name: OnChangeName) -> Self {
        match name {
            OnChangeName::Keep => tollgate::OnChange::Keep,
            OnChangeName::Scale => tollgate::OnChange::Scale,
            OnChangeName::Reset => tollgate::OnChange::Reset,
        }
    }
}

/// The `hash_tag` field: which part of a policy's Redis keys picks the cluster slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum HashTagName {
    PolicyAndKey,
    Key,
}

impl From<HashTagName> for tollgate::HashTag {
    fn from(name: HashTagName) -> Self {
        match name {
            HashTagName::PolicyAndKey => tollgate::HashTag::PolicyAndKey,
            HashTagName::Key => tollgate::HashTag::Key,
        }
    }
}

/// The `on_store_failure` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FailureName {
    FailOpen,
    FailClosed,
    Local,
}

/// Builds the failure mode from `on_store_failure` and `instances`, which is only meaningful with
/// `local` and defaults to 1 there. `at` is the path of the map holding both fields.
pub(crate) fn failure_mode(
    file: &str,
    at: &str,
    mode: Option<FailureName>,
    instances: Option<NonZeroU32>,
) -> Result<Option<FailureMode>, ConfigError> {
    match (mode, instances) {
        (Some(FailureName::Local), instances) => Ok(Some(FailureMode::Local {
            instances: instances.unwrap_or(NonZeroU32::MIN),
        })),
        (_, Some(_)) => Err(ConfigError::new(
            file,
            Some(format!("{at}.instances")),
            ConfigErrorKind::FieldNotAllowed {
                field: "instances",
                why: "is only used with `on_store_failure: local`".to_owned(),
            },
        )),
        (Some(FailureName::FailOpen), None) => Ok(Some(FailureMode::FailOpen)),
        (Some(FailureName::FailClosed), None) => Ok(Some(FailureMode::FailClosed)),
        (None, None) => Ok(None),
    }
}

/// The core's name for the parameter a [`PolicyError`] is about (`limit`, `window`, `capacity`,
/// `burst`, `rate`, `rate period`, `block_for`), so the error can be placed at the field that
/// supplied it.
pub(crate) fn policy_error_field(err: &PolicyError) -> Option<&'static str> {
    match err {
        PolicyError::Zero { field }
        | PolicyError::TooLarge { field, .. }
        | PolicyError::DurationOutOfRange { field, .. }
        | PolicyError::NotWholeMilliseconds { field, .. }
        | PolicyError::HorizonTooLong { field, .. } => Some(field),
        _ => None,
    }
}

/// A `block_for` as written: one duration, a list of them (one per offense in a row), or a
/// growth rule.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a duration like \"15m\", a list of durations like [1m, 10m, 1h], or a map with `initial`, `factor` and `max`"
)]
pub(crate) enum PenaltySpec {
    One(Scalar),
    Steps(Vec<Scalar>),
    Growth(GrowthSpec),
}

/// A growth rule: `initial`, then `factor` times the block before, up to `max`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrowthSpec {
    initial: Scalar,
    factor: u64,
    max: Scalar,
}

impl PenaltySpec {
    /// The penalty, with `block_memory` when given. An error comes with the field it is about,
    /// relative to the policy: `block_for`, `block_for[1]`, `block_for.factor`, `block_memory`.
    pub(crate) fn compile(&self, memory: Option<&Scalar>) -> Result<Penalty, (String, ConfigErrorKind)> {
        fn at(field: &'static str) -> impl Fn(ConfigErrorKind) -> (String, ConfigErrorKind) {
            move |kind| (field.to_owned(), kind)
        }
        fn policy(field: &'static str) -> impl Fn(PolicyError) -> (String, ConfigErrorKind) {
            move |e| (field.to_owned(), ConfigErrorKind::Policy(e))
        }
        let penalty = match self {
            PenaltySpec::One(block_for) => {
                let block_for = block_for.duration().map_err(at("block_for"))?;
                Penalty::fixed(block_for).map_err(policy("block_for"))?
            }
            PenaltySpec::Steps(steps) => {
                let mut durations = Vec::with_capacity(steps.len());
                for (i, step) in steps.iter().enumerate() {
                    durations.push(
                        step.duration()
                            .map_err(|kind| (format!("block_for[{i}]"), kind))?,
                    );
                }
                Penalty::sequence(durations.iter().copied()).map_err(|e| {
                    let field = match &e {
                        PolicyError::PenaltyShrinks { step, .. } => format!("block_for[{}]", step - 1),
                        PolicyError::DurationOutOfRange { value, .. } => durations
                            .iter()
                            .position(|d| d == value)
                            .map_or_else(|| "block_for".to_owned(), |i| format!("block_for[{i}]")),
                        _ => "block_for".to_owned(),
                    };
                    (field, ConfigErrorKind::Policy(e))
                })?
            }
            PenaltySpec::Growth(growth) => {
                let initial = growth.initial.duration().map_err(at("block_for.initial"))?;
                let max = growth.max.duration().map_err(at("block_for.max"))?;
                Penalty::growth(initial, growth.factor, max).map_err(|e| {
                    let field = match &e {
                        PolicyError::OutOfRange { .. } => "block_for.factor",
                        PolicyError::DurationOutOfRange { field, .. } => field,
                        PolicyError::PenaltyShrinks { .. } => "block_for.max",
                        _ => "block_for",
                    };
                    (field.to_owned(), ConfigErrorKind::Policy(e))
                })?
            }
        };
        let Some(memory) = memory else {
            return Ok(penalty);
        };
        if !penalty.escalates() {
            return Err((
                "block_memory".to_owned(),
                ConfigErrorKind::Value(
                    "is only used by an escalating `block_for` (a list or a growth rule)".to_owned(),
                ),
            ));
        }
        let memory = memory.duration().map_err(at("block_memory"))?;
        penalty.remember_for(memory).map_err(policy("block_memory"))
    }
}

/// Joins a path and a field: `join("policies.login", "window")`.
pub(crate) fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_owned()
    } else {
        format!("{at}.{field}")
    }
}
