//! Policy tests: timed requests and the answers they must get, read from YAML, so a limit can be
//! tested in CI the way code is, before it is deployed (`tollgate test CONFIG SCENARIOS`, which
//! runs them through the server's own doors on a virtual clock).
//!
//! This module only reads and checks the files; running them is the server's
//! (`tollgate_server::policy_test`). Errors are [`ConfigError`]s, `<file>: <path>: <message>`,
//! as a config's are, and [`PolicyTestFile::check_against`] refuses a test that names a policy or
//! a domain the config does not define, before anything runs.
//!
//! The file lists its tests under `scenarios`, the format's key since its first version (and the
//! word the CLI and the docs use for these files); in code a test is a [`PolicyTest`], so that
//! "scenario" is left to the bench scenarios of `tollgate bench`.
//!
//! # Format
//!
//! ```yaml
//! scenarios:
//!   - name: twenty a minute per client
//!     steps:
//!       - at: 0s             # virtual time since the test started (default: the previous step's)
//!         repeat: 20         # send it this many times (default 1) ...
//!         every: 1s          # ... this far apart (default: all at once)
//!         check: {policy: movies, key: 198.51.100.4}
//!         expect: {status: 200}
//!       - check: {policy: movies, key: 198.51.100.4}
//!         expect: {status: 429, retry_after: 60s}
//! ```
//!
//! Each step asks one door, written as one of:
//!
//! - `check: {policy, key, cost}`: tollgate's own policies, as `POST /v1/check` (`cost`
//!   defaults to 1);
//! - `envoy: {domain, descriptors, hits_addend}`: Envoy's `ShouldRateLimit`, as gRPC and
//!   `POST /json`; each descriptor is a map of its entries in order
//!   (`{remote_address: 198.51.100.4, path: /v4/movies}`);
//! - `request: {method, path, from, headers}`: a request to `tollgate proxy`, from the client
//!   address `from`, matched to the config's `routes`.
//!
//! and `expect`s any of: `allowed` (every door), `status` (the HTTP status of `check` and
//! `request`), `code` (Envoy's overall `OK` or `OVER_LIMIT`), `retry_after` (how long until a
//! retry can pass: the `Retry-After` header, in whole seconds, or the longest
//! `duration_until_reset` of an over-limit descriptor), `remaining` (the least budget left among
//! the limits that applied).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use yaml_serde::Value;

use crate::duration::parse_duration;
use crate::{ConfigError, ConfigErrorKind, Limits};

/// The most times one step may be sent: enough for any limit worth testing, and a typo such as
/// `repeat: 10000000000` is refused instead of running for hours.
pub const MAX_REPEAT: u32 = 100_000;

/// One policy test file, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyTestFile {
    /// The file's name, as errors and reports show it.
    pub file: String,
    /// Its tests (the file's `scenarios`), in order.
    pub tests: Vec<PolicyTest>,
}

/// Requests on one virtual clock, starting from an empty store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyTest {
    /// What it shows, as the report names it.
    pub name: String,
    /// Its steps, in time order.
    pub steps: Vec<Step>,
}

/// One request, sent `repeat` times, and what each answer must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Virtual time of the first sending, since the test started.
    pub at: Duration,
    /// How many times it is sent (at least 1).
    pub repeat: u32,
    /// The time between two sendings.
    pub every: Duration,
    /// What is asked, and of which door.
    pub ask: Ask,
    /// What every answer must be.
    pub expect: Expect,
}

impl Step {
    /// The virtual time of the sending numbered `n` (from 0).
    pub fn time_of(&self, n: u32) -> Duration {
        self.at + self.every * n
    }
}

/// A request, in the terms of the door that takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// `POST /v1/check` of one rule.
    Check {
        /// A policy of the config.
        policy: String,
        /// The key.
        key: String,
        /// What it costs.
        cost: u64,
    },
    /// Envoy's `ShouldRateLimit`.
    Envoy {
        /// A domain of the config.
        domain: String,
        /// Each descriptor's `(key, value)` entries, in order.
        descriptors: Vec<Vec<(String, String)>>,
        /// The request's `hits_addend` (0 counts as 1, as upstream).
        hits_addend: u32,
    },
    /// A request to `tollgate proxy`.
    Request {
        /// The HTTP method.
        method: String,
        /// The path (and query), as sent.
        path: String,
        /// The client's address.
        from: IpAddr,
        /// Request headers, for routes keyed by a header.
        headers: Vec<(String, String)>,
    },
}

impl std::fmt::Display for Ask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ask::Check { policy, key, cost } => {
                write!(f, "check {policy} {key}")?;
                if *cost != 1 {
                    write!(f, " cost {cost}")?;
                }
                Ok(())
            }
            Ask::Envoy {
                domain, descriptors, ..
            } => {
                write!(f, "envoy {domain}")?;
                for entries in descriptors {
                    let shown: Vec<String> = entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(f, " [{}]", shown.join(","))?;
                }
                Ok(())
            }
            Ask::Request {
                method, path, from, ..
            } => write!(f, "{method} {path} from {from}"),
        }
    }
}

/// What an answer must be; a field left out is not compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expect {
    /// Admitted (`check`, `request`: not 429; Envoy: overall `OK`).
    pub allowed: Option<bool>,
    /// The HTTP status (`check` and `request`).
    pub status: Option<u16>,
    /// Envoy's overall code: `OK` or `OVER_LIMIT`.
    pub code: Option<String>,
    /// How long until a retry can pass; zero expects none.
    pub retry_after: Option<Duration>,
    /// The least budget left among the limits that applied.
    pub remaining: Option<u64>,
}

impl PolicyTestFile {
    /// Reads the policy test file at `path` (at most [`MAX_FILE_BYTES`](crate::MAX_FILE_BYTES), a
    /// regular file, as a config file is read).
    pub fn load(path: &Path) -> Result<PolicyTestFile, ConfigError> {
        let name = path.display().to_string();
        let yaml = crate::read::read_config_file(path)
            .map_err(|e| ConfigError::new(name.clone(), None, ConfigErrorKind::Io(e)))?;
        Self::parse(&name, &yaml)
    }

    /// Reads the policy test files of `paths`: each file as given, and each directory's `*.yaml`
    /// and `*.yml` files in name order, chosen as a config directory's are.
    pub fn load_all(paths: &[impl AsRef<Path>]) -> Result<Vec<PolicyTestFile>, ConfigError> {
        let mut files = Vec::new();
        for path in paths {
            let path = path.as_ref();
            let io = |e| ConfigError::new(path.display().to_string(), None, ConfigErrorKind::Io(e));
            if std::fs::metadata(path).map_err(io)?.is_dir() {
                for file in crate::config_files(path)? {
                    files.push(Self::load(&file)?);
                }
            } else {
                files.push(Self::load(path)?);
            }
        }
        Ok(files)
    }

    /// Reads one policy test file's text; `file` names it in errors.
    ///
    /// ```
    /// use tollgate_config::policy_tests::{Ask, PolicyTestFile};
    ///
    /// let file = PolicyTestFile::parse(
    ///     "movies.yaml",
    ///     "scenarios:\n  - name: one\n    steps:\n      - check: {policy: movies, key: 198.51.100.4}\n        expect: {allowed: true}\n",
    /// )?;
    /// assert!(matches!(&file.tests[0].steps[0].ask, Ask::Check { cost: 1, .. }));
    ///
    /// let err = PolicyTestFile::parse(
    ///     "movies.yaml",
    ///     "scenarios:\n  - name: one\n    steps:\n      - check: {policy: movies, key: k}\n        expect: {status: 429, retry_after: soon}\n",
    /// )
    /// .unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     r#"movies.yaml: scenarios[0].steps[0].expect.retry_after: expected a duration like "1m", got "soon""#
    /// );
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn parse(file: &str, yaml: &str) -> Result<PolicyTestFile, ConfigError> {
        let value: Value = crate::yaml::parse(file, yaml)?;
        if value.is_null() {
            return Err(ConfigError::new(
                file,
                None,
                ConfigErrorKind::Format("the file is empty: expected `scenarios`"),
            ));
        }
        let raw: RawFile = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let path = (path != ".").then_some(path);
            ConfigError::new(file, path, ConfigErrorKind::Schema(e.into_inner().to_string()))
        })?;
        let at = |path: String, kind| ConfigError::new(file, Some(path), kind);
        if raw.scenarios.is_empty() {
            return Err(at("scenarios".into(), ConfigErrorKind::Empty));
        }
        let mut tests = Vec::with_capacity(raw.scenarios.len());
        for (i, test) in raw.scenarios.into_iter().enumerate() {
            let here = format!("scenarios[{i}]");
            if test.name.trim().is_empty() {
                return Err(at(format!("{here}.name"), ConfigErrorKind::Empty));
            }
            if test.steps.is_empty() {
                return Err(at(format!("{here}.steps"), ConfigErrorKind::Empty));
            }
            let mut steps = Vec::with_capacity(test.steps.len());
            let mut now = Duration::ZERO;
            for (j, step) in test.steps.into_iter().enumerate() {
                let step = step
                    .read(&format!("{here}.steps[{j}]"), now)
                    .map_err(|(path, kind)| at(path, kind))?;
                now = step.time_of(step.repeat - 1);
                steps.push(step);
            }
            tests.push(PolicyTest {
                name: test.name,
                steps,
            });
        }
        Ok(PolicyTestFile {
            file: file.to_owned(),
            tests,
        })
    }

    /// Refuses a step that names a policy or a domain `limits` does not define, naming the
    /// field: a typo would otherwise only show as an unexpected answer.
    ///
    /// ```
    /// use tollgate_config::policy_tests::PolicyTestFile;
    ///
    /// let limits = tollgate_config::parse("a.yaml", "policies:\n  api: {algorithm: gcra, rate: 1/s, burst: 1}\n")?;
    /// let file = PolicyTestFile::parse(
    ///     "t.yaml",
    ///     "scenarios:\n  - name: one\n    steps:\n      - check: {policy: apii, key: k}\n        expect: {allowed: true}\n",
    /// )?;
    /// let err = file.check_against(&limits).unwrap_err();
    /// assert_eq!(err.to_string(), r#"t.yaml: scenarios[0].steps[0].check.policy: unknown policy "apii""#);
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn check_against(&self, limits: &Limits) -> Result<(), ConfigError> {
        for (i, test) in self.tests.iter().enumerate() {
            for (j, step) in test.steps.iter().enumerate() {
                let path = |field: &str| Some(format!("scenarios[{i}].steps[{j}].{field}"));
                match &step.ask {
                    Ask::Check { policy, .. } if limits.policy(policy).is_none() => {
                        let kind = if limits.has_concurrency(policy) {
                            ConfigErrorKind::Value(format!(
                                "`{policy}` is a concurrency policy: a check applies rate limits only"
                            ))
                        } else {
                            ConfigErrorKind::UnknownPolicy { name: policy.clone() }
                        };
                        return Err(ConfigError::new(self.file.as_str(), path("check.policy"), kind));
                    }
                    Ask::Envoy { domain, .. } if !limits.has_domain(domain) => {
                        return Err(ConfigError::new(
                            self.file.as_str(),
                            path("envoy.domain"),
                            ConfigErrorKind::Value(format!("unknown domain \"{domain}\"")),
                        ));
                    }
                    Ask::Request { .. } if limits.routes().is_empty() => {
                        return Err(ConfigError::new(
                            self.file.as_str(),
                            path("request"),
                            ConfigErrorKind::Value("the config has no `routes` for a proxy request".into()),
                        ));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a map with `scenarios`")]
struct RawFile {
    scenarios: Vec<RawTest>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTest {
    name: String,
    steps: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    at: Option<Value>,
    repeat: Option<u32>,
    every: Option<Value>,
    check: Option<RawCheck>,
    envoy: Option<RawEnvoy>,
    request: Option<RawRequest>,
    expect: RawExpect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    policy: String,
    key: String,
    #[serde(default = "one")]
    cost: u64,
}

fn one() -> u64 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvoy {
    domain: String,
    descriptors: Vec<yaml_serde::Mapping>,
    #[serde(default)]
    hits_addend: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    #[serde(default = "get")]
    method: String,
    path: String,
    from: IpAddr,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

fn get() -> String {
    "GET".to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    allowed: Option<bool>,
    status: Option<u16>,
    code: Option<String>,
    retry_after: Option<Value>,
    remaining: Option<u64>,
}

/// A field's path and what is wrong with it.
type FieldError = (String, ConfigErrorKind);

impl RawStep {
    fn read(self, here: &str, previous: Duration) -> Result<Step, FieldError> {
        let field = |name: &str| format!("{here}.{name}");
        let at = match &self.at {
            Some(value) => time(value).map_err(|kind| (field("at"), kind))?,
            None => previous,
        };
        if at < previous {
            return Err((
                field("at"),
                ConfigErrorKind::Value(format!(
                    "time goes forward: the step before ends at {}",
                    crate::duration::format_duration(previous)
                )),
            ));
        }
        let repeat = self.repeat.unwrap_or(1);
        if repeat == 0 || repeat > MAX_REPEAT {
            return Err((
                field("repeat"),
                ConfigErrorKind::Value(format!("expected 1 to {MAX_REPEAT}, got {repeat}")),
            ));
        }
        let every = match &self.every {
            Some(value) => time(value).map_err(|kind| (field("every"), kind))?,
            None => Duration::ZERO,
        };
        let ask = match (self.check, self.envoy, self.request) {
            (Some(check), None, None) => {
                if check.key.is_empty() {
                    return Err((field("check.key"), ConfigErrorKind::Empty));
                }
                Ask::Check {
                    policy: check.policy,
                    key: check.key,
                    cost: check.cost,
                }
            }
            (None, Some(envoy), None) => envoy.read(&field("envoy"))?,
            (None, None, Some(request)) => {
                if !request.path.starts_with('/') {
                    return Err((
                        field("request.path"),
                        ConfigErrorKind::Value(format!(
                            "expected a path starting with `/`, got \"{}\"",
                            request.path
                        )),
                    ));
                }
                Ask::Request {
                    method: request.method,
                    path: request.path,
                    from: request.from,
                    headers: request.headers.into_iter().collect(),
                }
            }
            _ => {
                return Err((
                    here.to_owned(),
                    ConfigErrorKind::Value("a step asks exactly one of `check`, `envoy` or `request`".into()),
                ));
            }
        };
        let expect = self.expect.read(&field("expect"), &ask)?;
        Ok(Step {
            at,
            repeat,
            every,
            ask,
            expect,
        })
    }
}

impl RawEnvoy {
    fn read(self, here: &str) -> Result<Ask, FieldError> {
        if self.domain.is_empty() {
            return Err((format!("{here}.domain"), ConfigErrorKind::Empty));
        }
        if self.descriptors.is_empty() {
            return Err((format!("{here}.descriptors"), ConfigErrorKind::Empty));
        }
        let mut descriptors = Vec::with_capacity(self.descriptors.len());
        for (i, map) in self.descriptors.into_iter().enumerate() {
            let at = format!("{here}.descriptors[{i}]");
            if map.is_empty() {
                return Err((at, ConfigErrorKind::Empty));
            }
            let mut entries = Vec::with_capacity(map.len());
            for (key, value) in map {
                let Some(key) = scalar(&key) else {
                    return Err((at, ConfigErrorKind::Value("an entry's key is a string".into())));
                };
                let Some(value) = scalar(&value) else {
                    return Err((
                        format!("{at}.{key}"),
                        ConfigErrorKind::Value("an entry's value is a string".into()),
                    ));
                };
                entries.push((key, value));
            }
            descriptors.push(entries);
        }
        Ok(Ask::Envoy {
            domain: self.domain,
            descriptors,
            hits_addend: self.hits_addend,
        })
    }
}

impl RawExpect {
    fn read(self, here: &str, ask: &Ask) -> Result<Expect, FieldError> {
        let field = |name: &str| format!("{here}.{name}");
        let envoy = matches!(ask, Ask::Envoy { .. });
        if envoy && self.status.is_some() {
            return Err((
                field("status"),
                ConfigErrorKind::Value(
                    "an Envoy answer has a `code` (OK or OVER_LIMIT), not a status".into(),
                ),
            ));
        }
        if let Some(code) = &self.code {
            if !envoy {
                return Err((
                    field("code"),
                    ConfigErrorKind::Value("`code` is Envoy's; expect a `status` of this door".into()),
                ));
            }
            if code != "OK" && code != "OVER_LIMIT" {
                return Err((
                    field("code"),
                    ConfigErrorKind::Value(format!("expected OK or OVER_LIMIT, got \"{code}\"")),
                ));
            }
        }
        let retry_after = match &self.retry_after {
            Some(value) => Some(time(value).map_err(|kind| (field("retry_after"), kind))?),
            None => None,
        };
        let expect = Expect {
            allowed: self.allowed,
            status: self.status,
            code: self.code,
            retry_after,
            remaining: self.remaining,
        };
        if expect == Expect::default() {
            return Err((
                here.to_owned(),
                ConfigErrorKind::Value(
                    "expect at least one of `allowed`, `status`, `code`, `retry_after`, `remaining`".into(),
                ),
            ));
        }
        Ok(expect)
    }
}

/// A point or span of virtual time: a duration as configs write them, or zero (`0s`, `0`).
fn time(value: &Value) -> Result<Duration, ConfigErrorKind> {
    match value {
        Value::Number(n) if n.as_u64() == Some(0) => Ok(Duration::ZERO),
        Value::String(text) => match parse_duration(text) {
            Err(ConfigErrorKind::ZeroDuration { .. }) => Ok(Duration::ZERO),
            other => other,
        },
        Value::Number(n) => Err(ConfigErrorKind::DurationWithoutUnit { got: n.to_string() }),
        other => Err(ConfigErrorKind::BadDuration {
            got: format!("{other:?}"),
        }),
    }
}

/// A string, number or boolean as text; `None` for anything else.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(yaml: &str) -> String {
        PolicyTestFile::parse("t.yaml", yaml).unwrap_err().to_string()
    }

    #[test]
    fn steps_default_to_the_previous_steps_end() {
        let file = PolicyTestFile::parse(
            "t.yaml",
            "scenarios:\n  - name: s\n    steps:\n      - {at: 10s, repeat: 3, every: 5s, check: {policy: p, key: k}, expect: {allowed: true}}\n      - {check: {policy: p, key: k}, expect: {allowed: false}}\n",
        )
        .expect("parses");
        let steps = &file.tests[0].steps;
        assert_eq!(steps[0].time_of(2), Duration::from_secs(20));
        assert_eq!(steps[1].at, Duration::from_secs(20));
    }

    #[test]
    fn names_the_field_of_each_mistake() {
        let cases = [
            (
                "scenarios:\n  - name: s\n    steps:\n      - {at: 10s, check: {policy: p, key: k}, expect: {allowed: true}}\n      - {at: 5s, check: {policy: p, key: k}, expect: {allowed: true}}\n",
                "t.yaml: scenarios[0].steps[1].at: time goes forward: the step before ends at 10s",
            ),
            (
                "scenarios:\n  - name: s\n    steps:\n      - {check: {policy: p, key: k}, expect: {allowed: true, statuss: 200}}\n",
                "t.yaml: scenarios[0].steps[0].expect.statuss: unknown field `statuss`",
            ),
            (
                "scenarios:\n  - name: s\n    steps:\n      - {check: {policy: p, key: k}, envoy: {domain: d, descriptors: [{a: b}]}, expect: {allowed: true}}\n",
                "t.yaml: scenarios[0].steps[0]: a step asks exactly one of `check`, `envoy` or `request`",
            ),
            (
                "scenarios:\n  - name: s\n    steps:\n      - {envoy: {domain: d, descriptors: [{a: b}]}, expect: {status: 429}}\n",
                "t.yaml: scenarios[0].steps[0].expect.status: an Envoy answer has a `code` (OK or OVER_LIMIT), not a status",
            ),
            (
                "scenarios:\n  - name: s\n    steps:\n      - {request: {path: /, from: 198.51.100.400}, expect: {status: 200}}\n",
                "t.yaml: scenarios[0].steps[0].request.from: invalid IP address syntax",
            ),
            (
                "scenarios:\n  - name: s\n    steps:\n      - {repeat: 0, check: {policy: p, key: k}, expect: {allowed: true}}\n",
                "t.yaml: scenarios[0].steps[0].repeat: expected 1 to 100000, got 0",
            ),
            (
                "scenarios:\n  - name: s\n    steps:\n      - {check: {policy: p, key: k}, expect: {}}\n",
                "t.yaml: scenarios[0].steps[0].expect: expect at least one of `allowed`, `status`, `code`, `retry_after`, `remaining`",
            ),
            (
                "scenarios:\n  - name: s\n    steps:\n      - {at: 90, check: {policy: p, key: k}, expect: {allowed: true}}\n",
                "t.yaml: scenarios[0].steps[0].at: expected a duration like \"1m\", got 90 (add a unit, such as \"90s\")",
            ),
        ];
        for (yaml, expected) in cases {
            assert!(
                error(yaml).starts_with(expected),
                "{}\n  wanted: {expected}",
                error(yaml)
            );
        }
    }
}
