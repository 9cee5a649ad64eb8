//! One of envoyproxy/ratelimit's environment variables, read: [`EnvError`], which names the
//! variable a value is wrong for, Go's booleans, and a lookup of given variables for tests. Shared
//! by the modules that read upstream's variables (`envoy_env`, `stats_args`, `xds_args`).

/// A variable whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value}: {why}")]
pub(crate) struct EnvError {
    /// The variable's name.
    pub var: &'static str,
    /// Its value, as given.
    pub value: String,
    /// What was expected.
    pub why: String,
}

impl EnvError {
    pub(crate) fn new(var: &'static str, value: &str, why: impl Into<String>) -> Self {
        EnvError {
            var,
            value: value.to_owned(),
            why: why.into(),
        }
    }
}

/// A Go boolean; unset is false.
pub(crate) fn boolean(var: &'static str, value: Option<String>) -> Result<bool, EnvError> {
    match value.as_deref() {
        None => Ok(false),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => Ok(false),
        Some(other) => Err(EnvError::new(var, other, "expected true or false")),
    }
}

/// A lookup of `vars` (name, value), as `EnvoyEnv::from_lookup` takes one: for tests.
#[cfg(test)]
pub(crate) fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}
