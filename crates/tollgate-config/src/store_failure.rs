//! Which limits of a configuration cannot be decided without the store.
//!
//! When the store fails, each limit's failure mode decides: `fail_open` admits, `local` limits
//! on the instance's own memory, and both answer as well without the store as with it (less
//! exactly, in `local`'s case). A `fail_closed` limit that is enforced can only refuse: its
//! owner would rather see no answer than one the store did not make. The server's readiness
//! asks [`Limits::fail_closed`] whether a store failure leaves such a limit, so that an instance
//! whose store is sick stays in its load balancer while every limit can still be answered, and
//! leaves it only when some limit cannot.
//!
//! A shadow limit never refuses (it fails open whatever its mode says), so it is not listed;
//! neither are Envoy descriptors that are `unlimited` or deny everything, which never ask the
//! store.

use tollgate::FailureMode;

use crate::limits::{Limits, Quota};

impl Limits {
    /// The names of the enforced limits that fail closed, sorted: tollgate policies and
    /// concurrency policies with `on_store_failure: fail_closed`, and Envoy descriptors with it
    /// (named `envoy:<domain>.<path>`). Shadow limits are left out: they never refuse.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "limits.yaml",
    ///     r#"
    /// policies:
    ///   login: {algorithm: gcra, rate: 5/1m, burst: 5, on_store_failure: fail_closed}
    ///   search: {algorithm: gcra, rate: 10/s, burst: 20, on_store_failure: fail_open}
    ///   trial: {algorithm: gcra, rate: 1/s, burst: 1, on_store_failure: fail_closed, shadow: true}
    ///   movies: {algorithm: sliding_log, limit: 20, window: 1m}
    /// "#,
    /// )?;
    /// assert_eq!(limits.fail_closed(), ["login"]);
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn fail_closed(&self) -> Vec<&str> {
        let closed = |mode: FailureMode| mode == FailureMode::FailClosed;
        let mut names: Vec<&str> = Vec::new();
        for (name, policy) in self.policies() {
            if !policy.shadow() && closed(policy.policy().failure_mode()) {
                names.push(name);
            }
        }
        for (name, policy) in self.concurrency_policies() {
            if closed(policy.failure_mode()) {
                names.push(name);
            }
        }
        for node in self.descriptors() {
            let Some(limit) = &node.limit else { continue };
            if let Quota::Limited(policy) = &limit.quota
                && !limit.shadow_mode
                && closed(policy.failure_mode())
            {
                names.push(policy.name());
            }
        }
        names.sort_unstable();
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    use crate::parse_files;

    #[test]
    fn descriptors_and_concurrency_policies_that_fail_closed_are_listed() {
        let envoy = r#"
domain: edge
descriptors:
  - key: login
    rate_limit: {unit: minute, requests_per_unit: 5, on_store_failure: fail_closed}
  - key: login_shadow
    rate_limit: {unit: minute, requests_per_unit: 5, on_store_failure: fail_closed}
    shadow_mode: true
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
"#;
        let ours = r#"
policies:
  exports: {algorithm: concurrency, max_in_flight: 2, lease_timeout: 30s, on_store_failure: fail_closed}
  api: {algorithm: gcra, rate: 10/s, burst: 5, on_store_failure: local, instances: 3}
"#;
        let limits = parse_files(
            &[
                ("edge.yaml".into(), envoy.into()),
                ("ours.yaml".into(), ours.into()),
            ],
            &crate::LoadOptions::default(),
        )
        .expect("config");
        assert_eq!(limits.fail_closed(), ["envoy:edge.login", "exports"]);
    }

    #[test]
    fn the_demo_policies_all_answer_without_the_store() {
        assert!(crate::demo().expect("demo").fail_closed().is_empty());
    }
}
