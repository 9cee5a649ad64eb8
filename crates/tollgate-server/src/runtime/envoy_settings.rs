//! The settings of the Envoy rate limit service that envoyproxy/ratelimit reads from its
//! environment (`SHADOW_MODE`, `QUOTA_MODE`, `LIMIT_RESPONSE_HEADERS_ENABLED`, ...), as plain
//! values: the binary decides where they come from. Every default answers as tollgate does
//! without them.

/// How `ShouldRateLimit` answers beyond the config files.
///
/// ```
/// use tollgate_server::EnvoySettings;
///
/// let settings = EnvoySettings::default();
/// assert!(!settings.global_shadow_mode && !settings.count_every_descriptor);
/// assert!(settings.response_headers.is_none());
/// assert_eq!(settings.near_limit_ratio, 0.8);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EnvoySettings {
    /// Upstream's `SHADOW_MODE`: every request is answered `OK` overall, whatever its
    /// descriptors say (their statuses keep their codes, as upstream's do). Descriptors are
    /// decided and counted as shadow rules, each on its own.
    pub global_shadow_mode: bool,
    /// Upstream's `QUOTA_MODE`: every descriptor is in quota mode, as if each had
    /// `quota_mode: true`.
    pub global_quota_mode: bool,
    /// Upstream's way of counting: each descriptor that passes spends its budget even when
    /// another descriptor of the same request is over the limit, and a charge larger than the
    /// budget left (a `hits_addend` above the remaining count) spends what is left, as
    /// upstream's counter would go past the limit. Off: a request that is over the limit spends
    /// nothing anywhere.
    pub count_every_descriptor: bool,
    /// Upstream's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: a request whose checked
    /// descriptors are over records none of its charges (a descriptor's own `hits_addend`);
    /// they answer as they stand.
    pub stop_charges_when_over: bool,
    /// Upstream's `LIMIT_RESPONSE_HEADERS_ENABLED` and its header names: when set, the answer
    /// carries the limit, remaining budget and reset time of the descriptor closest to its
    /// limit in `response_headers_to_add`.
    pub response_headers: Option<ResponseHeaders>,
    /// Upstream's `RESPONSE_DYNAMIC_METADATA`: when set, the answer carries the request and the
    /// `metadata` of the descriptors that passed in `dynamic_metadata`.
    pub response_dynamic_metadata: bool,
    /// Upstream's `NEAR_LIMIT_RATIO`: the share of a limit past which hits count as
    /// `near_limit` in the per-stats-key counters. Between 0 and 1.
    pub near_limit_ratio: f32,
    /// How many distinct stats keys get their own per-stats-key counters; hits of any further
    /// key are counted under the key `_other`, so `value_to_metric` and `detailed_metric`
    /// cannot make the metrics grow without bound.
    pub max_stats_keys: usize,
    /// The gRPC port is reachable only by trusted callers (the Envoys, on a private network or
    /// behind verified client certificates): refunds (`is_negative_hits`) and charges (a
    /// descriptor's `hits_addend`) through it need no token. Off: once an app or admin token is
    /// set, they need one in the `authorization` metadata (`Bearer <token>`), as `POST /json`
    /// and the HTTP API's refunds and charges do.
    pub trusted_grpc: bool,
    /// An `OVER_LIMIT` answer carries `Retry-After` (whole seconds, at least 1, until the
    /// limiting descriptor admits again) in `response_headers_to_add`, which Envoy adds to the
    /// 429 it sends the client.
    pub retry_after: bool,
    /// Answers carry the IETF draft's `RateLimit-Policy` and `RateLimit` fields for the
    /// descriptor the rate limit headers report, as the HTTP API sends them.
    pub ratelimit_fields: bool,
}

impl EnvoySettings {
    /// The settings that change what a request means, for the planner.
    pub fn modes(&self) -> tollgate_config::envoy_plan::Modes {
        tollgate_config::envoy_plan::Modes::new(
            self.global_shadow_mode,
            self.global_quota_mode,
            self.count_every_descriptor,
        )
        .with_stop_when_over(self.stop_charges_when_over)
    }
}

impl Default for EnvoySettings {
    fn default() -> Self {
        EnvoySettings {
            global_shadow_mode: false,
            global_quota_mode: false,
            count_every_descriptor: false,
            stop_charges_when_over: false,
            response_headers: None,
            response_dynamic_metadata: false,
            near_limit_ratio: 0.8,
            max_stats_keys: 1_000,
            trusted_grpc: false,
            retry_after: false,
            ratelimit_fields: false,
        }
    }
}

/// The names of the rate limit headers of an answer; the default names are upstream's
/// (`LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`).
///
/// ```
/// use tollgate_server::ResponseHeaders;
///
/// let names = ResponseHeaders::default();
/// assert_eq!(names.limit, "RateLimit-Limit");
/// let legacy = ResponseHeaders::new("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset");
/// assert_eq!(legacy.reset, "X-RateLimit-Reset");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResponseHeaders {
    /// The limit's `requests_per_unit`.
    pub limit: String,
    /// The budget left.
    pub remaining: String,
    /// Seconds until the limit's window resets.
    pub reset: String,
}

impl ResponseHeaders {
    /// Headers with these names.
    pub fn new(limit: impl Into<String>, remaining: impl Into<String>, reset: impl Into<String>) -> Self {
        ResponseHeaders {
            limit: limit.into(),
            remaining: remaining.into(),
            reset: reset.into(),
        }
    }
}

impl Default for ResponseHeaders {
    fn default() -> Self {
        ResponseHeaders::new("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
    }
}
