//! Routes: which policies `tollgate proxy` applies to a request, chosen by path prefix, and what
//! each request is counted by.
//!
//! ```yaml
//! policies:
//!   movies: {algorithm: sliding_log, limit: 20, window: 1m, block_for: 1m}
//!   api: {algorithm: gcra, rate: 10/s, burst: 20}
//! routes:
//!   - prefix: /v4/movies          # this path and everything under it
//!     policies: [movies, api]     # all must allow
//!   - prefix: /
//!     policies: [api]
//!     key: "header:X-Api-Key"     # count by API key instead of client IP
//! ```
//!
//! The longest matching prefix wins, so a catch-all `/` can sit beside specific routes in any
//! order. A prefix matches whole path segments: `/v4/movies` matches `/v4/movies` and
//! `/v4/movies/42` but not `/v4/moviesearch`; a prefix ending in `/` matches everything under it.
//! A request no route matches is forwarded without a check.
//!
//! Routes live in tollgate-format files beside `policies` and may name policies of any file of
//! the same config directory. `tollgate serve` ignores them.

/// What a route counts requests by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteKey {
    /// The client's IP address (`client_ip`, the default): the peer's, or the one a trusted
    /// proxy forwarded.
    ClientIp,
    /// The value of a request header (`header:NAME`); a request without it is refused.
    Header(String),
}

/// One entry of `routes`.
#[derive(Debug, Clone)]
pub struct Route {
    pub(crate) prefix: String,
    pub(crate) policies: Vec<String>,
    pub(crate) key: RouteKey,
}

impl Route {
    /// The path prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The names of the policies applied, in order.
    pub fn policies(&self) -> &[String] {
        &self.policies
    }

    /// What requests are counted by.
    pub fn key(&self) -> &RouteKey {
        &self.key
    }

    /// Whether `path` is this route's prefix or lies under it (whole segments only).
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "proxy.yaml",
    ///     "policies: {}\nroutes:\n  - {prefix: /v4/movies, policies: []}\n",
    /// )?;
    /// let route = &limits.routes()[0];
    /// assert!(route.matches("/v4/movies") && route.matches("/v4/movies/42"));
    /// assert!(!route.matches("/v4/moviesearch") && !route.matches("/v4"));
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn matches(&self, path: &str) -> bool {
        match path.strip_prefix(self.prefix.as_str()) {
            Some(rest) => rest.is_empty() || self.prefix.ends_with('/') || rest.starts_with('/'),
            None => false,
        }
    }
}

/// The route for `path` among `routes`: the longest matching prefix.
///
/// ```
/// let limits = tollgate_config::parse(
///     "proxy.yaml",
///     "policies: {}\nroutes:\n  - {prefix: /, policies: []}\n  - {prefix: /login, policies: []}\n",
/// )?;
/// let pick = |path| tollgate_config::route_for(limits.routes(), path).map(|r| r.prefix());
/// assert_eq!(pick("/login"), Some("/login"));
/// assert_eq!(pick("/movies"), Some("/"));
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
pub fn route_for<'a>(routes: &'a [Route], path: &str) -> Option<&'a Route> {
    routes
        .iter()
        .filter(|route| route.matches(path))
        .max_by_key(|route| route.prefix.len())
}
