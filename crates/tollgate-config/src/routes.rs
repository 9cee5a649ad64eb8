//! Routes: which policies `tollgate proxy` applies to a request, chosen by path prefix, and what
//! each request is counted by.
//!
//! ```yaml
//! policies:
//!   movies: {algorithm: sliding_log, limit: 20, window: 1m, block_for: 1m}
//!   api: {algorithm: gcra, rate: 10/s, burst: 20}
//! routes:
//!   - prefix: /v4/movies          # this path and everything under it, in any case
//!     policies: [movies, api]     # all must allow
//!   - prefix: /Files/             # only as written
//!     policies: [api]
//!     case_sensitive: true
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
//! A prefix matches whatever the case of its ASCII letters (`/V4/MOVIES` is under `/v4/movies`):
//! many upstreams, and the CDNs and frameworks in front of them, fold case, and a limit that a
//! client skips by changing one letter's case is no limit. A route whose upstream tells cases
//! apart sets `case_sensitive: true`. Two routes whose prefixes differ only in case are refused
//! unless both are case-sensitive, since one path would match both.
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
    pub(crate) case_sensitive: bool,
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

    /// Whether the prefix matches only in the case written (`case_sensitive: true`); by default
    /// ASCII letters match in either case.
    pub fn case_sensitive(&self) -> bool {
        self.case_sensitive
    }

    /// Whether `path` is this route's prefix or lies under it (whole segments only; ASCII letters
    /// in any case unless the route is [case-sensitive](Route::case_sensitive)).
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "proxy.yaml",
    ///     "policies: {}\nroutes:\n  - {prefix: /v4/movies, policies: []}\n  - {prefix: /Files, policies: [], case_sensitive: true}\n",
    /// )?;
    /// let (movies, files) = (&limits.routes()[0], &limits.routes()[1]);
    /// assert!(movies.matches("/v4/movies") && movies.matches("/v4/movies/42"));
    /// assert!(movies.matches("/V4/MOVIES") && movies.matches("/v4/Movies/42"));
    /// assert!(!movies.matches("/v4/moviesearch") && !movies.matches("/v4"));
    /// assert!(files.matches("/Files/a") && !files.matches("/files/a"));
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn matches(&self, path: &str) -> bool {
        let (prefix, path) = (self.prefix.as_bytes(), path.as_bytes());
        let Some(head) = path.get(..prefix.len()) else {
            return false;
        };
        let same = if self.case_sensitive {
            head == prefix
        } else {
            head.eq_ignore_ascii_case(prefix)
        };
        let rest = &path[prefix.len()..];
        same && (rest.is_empty() || prefix.ends_with(b"/") || rest.starts_with(b"/"))
    }

    /// Whether one path could match both routes with their prefixes at the same length, which
    /// would leave no longest match: `None` when it cannot; else what to add to the "first
    /// defined" part of the error (empty for the same prefix; for prefixes that differ only in
    /// case, how `earlier` was written and why that collides).
    pub(crate) fn collision(&self, earlier: &Route) -> Option<String> {
        if self.prefix == earlier.prefix {
            return Some(String::new());
        }
        let either_ignores_case = !(self.case_sensitive && earlier.case_sensitive);
        (either_ignores_case && self.prefix.eq_ignore_ascii_case(&earlier.prefix)).then(|| {
            format!(
                " as \"{}\" (prefixes match in any case unless both routes set `case_sensitive: true`)",
                earlier.prefix
            )
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(yaml: &str) -> Result<Vec<Route>, crate::ConfigError> {
        crate::parse("proxy.yaml", &format!("policies: {{}}\nroutes:\n{yaml}")).map(|l| l.routes().to_vec())
    }

    #[test]
    fn prefixes_match_in_any_case_unless_case_sensitive() {
        let routes = routes(
            "  - {prefix: /v4/movies, policies: []}\n  - {prefix: /Files/, policies: [], case_sensitive: true}\n",
        )
        .expect("config");
        let pick = |path| route_for(&routes, path).map(Route::prefix);
        for path in ["/v4/movies", "/V4/MOVIES", "/v4/Movies/42", "/v4/mOvIeS/"] {
            assert_eq!(pick(path), Some("/v4/movies"), "{path}");
        }
        for path in [
            "/v4/moviesearch",
            "/V4/MOVIESEARCH",
            "/v4/movie",
            "/files/a",
            "/FILES/a",
            "/Files",
        ] {
            assert_eq!(pick(path), None, "{path}");
        }
        assert_eq!(pick("/Files/a"), Some("/Files/"));
        // Non-ASCII letters are compared as written: the path is normalized, not case-folded.
        let accented = self::routes("  - {prefix: /caf\u{e9}, policies: []}\n").expect("config");
        assert!(accented[0].matches("/CAF\u{e9}/x"));
        assert!(!accented[0].matches("/CAF\u{c9}/x"));
        assert!(!accented[0].matches("/caf"));
    }

    #[test]
    fn prefixes_differing_only_in_case_collide_unless_both_are_case_sensitive() {
        assert!(routes("  - {prefix: /Api, policies: [], case_sensitive: true}\n  - {prefix: /api, policies: [], case_sensitive: true}\n").is_ok());
        for pair in [
            "  - {prefix: /Api, policies: []}\n  - {prefix: /api, policies: []}\n",
            "  - {prefix: /Api, policies: [], case_sensitive: true}\n  - {prefix: /api, policies: []}\n",
            "  - {prefix: /api, policies: [], case_sensitive: true}\n  - {prefix: /api, policies: [], case_sensitive: true}\n",
        ] {
            let err = routes(pair).expect_err(pair).to_string();
            assert!(
                err.starts_with("proxy.yaml: routes[1].prefix: duplicate route prefix"),
                "{err}"
            );
        }
    }
}
