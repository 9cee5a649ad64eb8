//! [`ConfigError`]: what is wrong, in which file, at which field.
//!
//! A config error is read by a person fixing a YAML file, often from a log line after a reload was
//! refused, so every error says `<file>: <path>: <message>`, with the path written the way the
//! file is nested (`policies.login.window`, `descriptors[1].rate_limit.unit`). The [`kind`]
//! carries the same information for code that wants to match on it.
//!
//! [`kind`]: ConfigError::kind

use std::fmt;

use tollgate::PolicyError;

/// A config file that could not be read or used.
///
/// Displays as `<file>: <path>: <message>`, or `<file>: <message>` when the problem is not at one
/// field (unreadable file, YAML syntax, duplicate domain across files).
///
/// ```
/// let err = tollgate_config::parse(
///     "tollgate.yaml",
///     "policies:\n  login:\n    algorithm: sliding_log\n    limit: 5\n    window: fortnight\n",
/// )
/// .unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     r#"tollgate.yaml: policies.login.window: expected a duration like "1m", got "fortnight""#
/// );
/// assert_eq!(err.file(), "tollgate.yaml");
/// assert_eq!(err.path(), Some("policies.login.window"));
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{file}: {}{kind}", PathPrefix(.path.as_deref()))]
pub struct ConfigError {
    file: String,
    path: Option<String>,
    kind: ConfigErrorKind,
}

impl ConfigError {
    /// `file`'s YAML that does not parse, with where it broke.
    pub(crate) fn syntax(file: &str, e: &yaml_serde::Error) -> Self {
        let location = e.location();
        ConfigError::new(
            file,
            None,
            ConfigErrorKind::Syntax {
                message: e.to_string(),
                line: location.as_ref().map(|l| l.line()),
                column: location.as_ref().map(|l| l.column()),
            },
        )
    }

    pub(crate) fn new(file: impl Into<String>, path: Option<String>, kind: ConfigErrorKind) -> Self {
        ConfigError {
            file: file.into(),
            // A field at the top level of a text with no path (an override's body) is no path.
            path: path.filter(|p| !p.is_empty()),
            kind,
        }
    }

    /// The file, by name (a directory's files are named without the directory).
    ///
    /// ```
    /// let err = tollgate_config::parse("a.yaml", "[").unwrap_err();
    /// assert_eq!(err.file(), "a.yaml");
    /// ```
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The path to the field, such as `policies.login.window`, if the error is at one field.
    ///
    /// ```
    /// let err = tollgate_config::parse("a.yaml", "domain: api\ndescriptors:\n  - key: ''\n")
    ///     .unwrap_err();
    /// assert_eq!(err.path(), Some("descriptors[0].key"));
    /// ```
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// What is wrong.
    ///
    /// ```
    /// use tollgate_config::ConfigErrorKind;
    ///
    /// let err = tollgate_config::parse(
    ///     "a.yaml",
    ///     "policies:\n  api:\n    algorithm: fixed_window\n    limit: 0\n    window: 1m\n",
    /// )
    /// .unwrap_err();
    /// assert!(matches!(err.kind(), ConfigErrorKind::Policy(_)));
    /// ```
    pub fn kind(&self) -> &ConfigErrorKind {
        &self.kind
    }
}

/// Writes `path: `, or nothing when there is no path.
struct PathPrefix<'a>(Option<&'a str>);

impl fmt::Display for PathPrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(path) => write!(f, "{path}: "),
            None => Ok(()),
        }
    }
}

/// What is wrong with a config file. The messages are lower case, without the file and path
/// (which [`ConfigError`] adds).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file or directory could not be read.
    #[error("cannot read: {0}")]
    Io(std::io::Error),
    /// A link in a config directory, named like a config file, that leads to no file: its target
    /// is missing, or links point at each other. The file it stood for would not be read.
    #[error("broken link to {target:?}: {source}")]
    BrokenLink {
        /// Where the link points, as written in it.
        target: std::path::PathBuf,
        /// Why it cannot be followed (not found, too many levels of links).
        source: std::io::Error,
    },
    /// The file is not valid YAML. The message is the parser's and ends with the line and column.
    #[error("{message}")]
    Syntax {
        /// The parser's message, with the position.
        message: String,
        /// 1-based line of the error, when the parser knows it.
        line: Option<usize>,
        /// 1-based column of the error, when the parser knows it.
        column: Option<usize>,
    },
    /// The YAML does not have the expected shape: an unknown or missing field, a value of the
    /// wrong type. The message is serde's, such as ``unknown field `windw`, expected ...``.
    #[error("{0}")]
    Schema(String),
    /// The file has neither a `policies` map nor a `domain`, or is empty.
    #[error("{0}")]
    Format(&'static str),
    /// A duration that does not follow the grammar (`"90s"`, `"1h30m"`, ...).
    #[error("expected a duration like \"1m\", got \"{got}\"")]
    BadDuration {
        /// The text given.
        got: String,
    },
    /// A number where a duration was expected: the unit is missing.
    #[error("expected a duration like \"1m\", got {got} (add a unit, such as \"{got}s\")")]
    DurationWithoutUnit {
        /// The number given.
        got: String,
    },
    /// A duration of zero.
    #[error("a duration must be more than zero, got \"{got}\"")]
    ZeroDuration {
        /// The text given.
        got: String,
    },
    /// A duration too long to count in milliseconds.
    #[error("duration \"{got}\" is too long")]
    DurationOverflow {
        /// The text given.
        got: String,
    },
    /// A rate that does not follow the grammar (`"10/s"`, `"5/1h"`, ...).
    #[error("expected a rate like \"10/s\", got \"{got}\"")]
    BadRate {
        /// The text given.
        got: String,
    },
    /// An envoyproxy/ratelimit `unit` that is not one of the known units.
    #[error("unknown unit \"{got}\", expected second, minute, hour, day, week, month or year")]
    BadUnit {
        /// The text given.
        got: String,
    },
    /// A required field is missing for this kind of limit.
    #[error("missing field `{field}`, {why}")]
    MissingField {
        /// The field.
        field: &'static str,
        /// Who needs it.
        why: String,
    },
    /// A field that this kind of limit does not use, or that conflicts with another field.
    #[error("`{field}` {why}")]
    FieldNotAllowed {
        /// The field.
        field: &'static str,
        /// Why it cannot be here.
        why: String,
    },
    /// A value that is not one of the accepted forms; the message says which are.
    #[error("{0}")]
    Value(String),
    /// A route names a policy no file of the config defines.
    #[error("unknown policy \"{name}\"")]
    UnknownPolicy {
        /// The name.
        name: String,
    },
    /// A name, key or domain that is empty.
    #[error("must not be empty")]
    Empty,
    /// A policy name in the prefix reserved for names generated from descriptors.
    #[error("policy names starting with \"{prefix}\" are reserved for envoyproxy/ratelimit descriptors")]
    ReservedName {
        /// The reserved prefix.
        prefix: &'static str,
    },
    /// A rate limit that lists its own name in `replaces`.
    #[error("a rate limit cannot replace itself (\"{name}\")")]
    ReplacesItself {
        /// The name.
        name: String,
    },
    /// The same thing defined twice.
    #[error("duplicate {what} \"{name}\", first defined {first}")]
    Duplicate {
        /// What is duplicated: `policy`, `domain` or `descriptor`.
        what: &'static str,
        /// The duplicated name.
        name: String,
        /// Where the first one is: `in a.yaml`, or `at descriptors[0]`.
        first: String,
    },
    /// A parameter the core rejects: zero or oversized limits, too short or too long windows, ...
    #[error("{0}")]
    Policy(PolicyError),
}
