//! Finding the policy a route names, with an error that says why there is none: a rate route
//! that names a concurrency policy, or the other way round, is told which route to use instead of
//! getting a bare 404.

use tollgate::concurrency::ConcurrencyPolicy;
use tollgate_config::{Limits, NamedPolicy};

use super::error::ApiError;

/// The rate policy `name`: 404 when there is none, 400 (saying where to go) when it is a
/// concurrency policy.
pub(crate) fn rate_policy<'a>(limits: &'a Limits, name: &str) -> Result<&'a NamedPolicy, ApiError> {
    if let Some(named) = limits.policy(name) {
        return Ok(named);
    }
    if limits.concurrency_policy(name).is_some() {
        return Err(ApiError::bad_request(format!(
            "`{name}` is a concurrency policy, not a rate limit: acquire a lease with \
             POST /v1/concurrency/{name}/{{key}}/acquire and give it back with .../release"
        )));
    }
    Err(ApiError::unknown_policy(name))
}

/// The concurrency policy `name`: 404 when there is none, 400 (saying where to go) when it is a
/// rate policy.
pub(crate) fn concurrency_policy<'a>(
    limits: &'a Limits,
    name: &str,
) -> Result<&'a ConcurrencyPolicy, ApiError> {
    if let Some(policy) = limits.concurrency_policy(name) {
        return Ok(policy);
    }
    if limits.policy(name).is_some() {
        return Err(ApiError::bad_request(format!(
            "`{name}` is a rate policy, not a concurrency policy: check it with POST /v1/check"
        )));
    }
    Err(ApiError::unknown_policy(name))
}
