//! [`Limits`]: a loaded configuration, compiled and immutable, and the envoyproxy/ratelimit
//! descriptor matcher.
//!
//! A `Limits` is built once per (re)load and then only read, from many requests at once; a reload
//! builds a new one and swaps it in whole. It holds two things:
//!
//! - the named policies of tollgate-format files, looked up with [`Limits::policy`];
//! - per envoyproxy/ratelimit domain, a descriptor tree, walked by [`Limits::resolve`] with the
//!   entries of one request descriptor.
//!
//! # Matching, as envoyproxy/ratelimit does it
//!
//! The request's entries are matched one level of the tree per entry, in order. At each level an
//! entry `(key, value)` picks, among the descriptors with the same `key`:
//!
//! 1. the descriptor whose `value` is exactly `value`; else
//! 2. the first descriptor, in file order, whose `value` holds a `*` and matches `value`, each
//!    `*` standing for zero or more characters (`files/*`, `/api/*/action`, `a*b*c`); else
//! 3. the descriptor without a `value` (or with `value: ""`), which matches any value.
//!
//! A request value written exactly like a wildcard (`a*`) matches that wildcard first, as it
//! does upstream, where the pattern is also a key of the exact-value map.
//!
//! There is no backtracking: once an exact value matches, a wildcard or value-less sibling is
//! not tried even if the exact branch fails deeper down. The rate limit that applies is the one
//! of the descriptor reached by the *last* entry; there is none if an entry matches nothing, if an
//! earlier entry reaches a descriptor without nested descriptors (the request is deeper than the
//! tree), or if the last descriptor reached has no `rate_limit`.
//!
//! Unlike upstream, which joins `key_value` into one string per level, keys and values are
//! compared as separate strings, so key `a_b` and key `a` with value `b` are different
//! descriptors and a wildcard never matches across the key/value boundary.
//!
//! # Counters: policy names and store keys
//!
//! Every distinct request value gets its own counter, as upstream: with a value-less `remote_address`
//! descriptor, each address is limited on its own. The store key returned in [`Resolved::key`]
//! identifies the counter on its own: it encodes the domain, the path of descriptors matched and
//! the request's values, each part length-prefixed (a netstring, `<bytes>:<text>,`), so two
//! different requests can never produce the same key whatever characters their keys and values
//! contain:
//!
//! ```text
//! key      = part(domain) level*
//! level    = part(entry key) part("=" value)               exact value matched
//!          | part(entry key) part("*" pattern) part(value) wildcard matched
//!          | part(entry key) part("~" pattern)             wildcard with share_threshold: one shared counter
//!          | part(entry key) part("?") part(value)         value-less descriptor matched
//! part(s)  = <length of s in bytes> ":" s ","
//! ```
//!
//! The policy of a descriptor is named `envoy:` followed by upstream's name for the descriptor
//! (`envoy:messaging.message_type_marketing.to_number`); names longer than the core's 255 bytes
//! are cut and end in `~` and a 64-bit FNV-1a hash of the full name. Names and keys depend only on
//! the domain, the descriptor path and the request, never on load order or limits, so reloading
//! the same (or a retuned) configuration keeps the counters. The `envoy:` prefix is reserved:
//! tollgate-format policies may not use it, so their counters never meet a descriptor's.

mod descriptors;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use tollgate::Policy;
use tollgate::concurrency::ConcurrencyPolicy;

use crate::routes::Route;

pub(crate) use descriptors::{DescriptorLimit, Domain, Level, Node, Quota, descriptor_policy_name};
pub use descriptors::{ENVOY_POLICY_PREFIX, EntryMatch, Resolved, apply_replaces, override_key};

/// A loaded configuration: named policies and envoyproxy/ratelimit domains.
///
/// ```
/// let limits = tollgate_config::parse(
///     "limits.yaml",
///     r#"
/// policies:
///   login:
///     algorithm: gcra
///     rate: 5/1m
///     burst: 5
/// "#,
/// )?;
/// let login = limits.policy("login").expect("defined above");
/// assert_eq!(login.policy().max_cost(), 5);
/// assert!(limits.policy("logout").is_none());
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
#[derive(Debug, Default)]
pub struct Limits {
    policies: BTreeMap<String, NamedPolicy>,
    concurrency: BTreeMap<String, ConcurrencyPolicy>,
    domains: HashMap<String, Domain>,
    routes: Vec<Route>,
    access: Vec<tollgate::access::AccessEntry>,
}

impl Limits {
    /// The named policy `name` of a tollgate-format file.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "policies:\n  api:\n    algorithm: sliding_log\n    limit: 20\n    window: 1m\n",
    /// )?;
    /// assert_eq!(limits.policy("api").map(|p| p.policy().name()), Some("api"));
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn policy(&self, name: &str) -> Option<&NamedPolicy> {
        self.policies.get(name)
    }

    /// Every named policy, by name in byte order.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "policies:\n  b:\n    algorithm: gcra\n    rate: 1/s\n    burst: 1\n  a:\n    algorithm: gcra\n    rate: 1/s\n    burst: 1\n",
    /// )?;
    /// let names: Vec<&str> = limits.policies().map(|(name, _)| name).collect();
    /// assert_eq!(names, ["a", "b"]);
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn policies(&self) -> impl Iterator<Item = (&str, &NamedPolicy)> {
        self.policies.iter().map(|(name, policy)| (name.as_str(), policy))
    }

    /// The `algorithm: concurrency` policy `name` of a tollgate-format file. Concurrency
    /// policies are not in [`policy`](Self::policy): they are acquired and released, never
    /// checked.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "policies:\n  exports:\n    algorithm: concurrency\n    max_in_flight: 5\n    lease_timeout: 30s\n",
    /// )?;
    /// let exports = limits.concurrency_policy("exports").unwrap();
    /// assert_eq!(exports.max_in_flight(), 5);
    /// assert!(limits.policy("exports").is_none());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn concurrency_policy(&self, name: &str) -> Option<&ConcurrencyPolicy> {
        self.concurrency.get(name)
    }

    /// Every concurrency policy, by name in byte order.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "policies:\n  b:\n    algorithm: concurrency\n    max_in_flight: 1\n    lease_timeout: 1s\n",
    /// )?;
    /// assert_eq!(limits.concurrency_policies().map(|(name, _)| name).collect::<Vec<_>>(), ["b"]);
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn concurrency_policies(&self) -> impl Iterator<Item = (&str, &ConcurrencyPolicy)> {
        self.concurrency
            .iter()
            .map(|(name, policy)| (name.as_str(), policy))
    }

    pub(crate) fn insert_concurrency(&mut self, name: String, policy: ConcurrencyPolicy) {
        self.concurrency.insert(name, policy);
    }

    pub(crate) fn has_concurrency(&self, name: &str) -> bool {
        self.concurrency.contains_key(name)
    }

    /// Every envoyproxy/ratelimit domain, sorted.
    ///
    /// ```
    /// let limits = tollgate_config::parse("a.yaml", "domain: edge\ndescriptors: []\n")?;
    /// assert_eq!(limits.domains(), ["edge"]);
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn domains(&self) -> Vec<&str> {
        let mut domains: Vec<&str> = self.domains.keys().map(String::as_str).collect();
        domains.sort_unstable();
        domains
    }

    /// True when there is neither a policy nor a domain.
    ///
    /// ```
    /// assert!(tollgate_config::Limits::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty() && self.domains.is_empty()
    }

    /// Finds the rate limit for one request descriptor (its `(key, value)` entries, in order) of
    /// `domain`, the way envoyproxy/ratelimit does (see the [module docs](self)). `None` when the
    /// domain is unknown, the descriptor is empty, or no rate limit applies.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "edge.yaml",
    ///     r#"
    /// domain: edge
    /// descriptors:
    ///   - key: remote_address          # any address: 10 per second each
    ///     rate_limit: {unit: second, requests_per_unit: 10}
    ///   - key: remote_address          # this one: 100 per second
    ///     value: 203.0.113.1
    ///     rate_limit: {unit: second, requests_per_unit: 100}
    /// "#,
    /// )?;
    /// let entry = |value: &str| [("remote_address".to_owned(), value.to_owned())];
    /// let some = limits.resolve("edge", &entry("192.0.2.7")).expect("the default matches");
    /// assert_eq!(some.policy().map(|p| p.max_cost()), Some(10));
    /// let vip = limits.resolve("edge", &entry("203.0.113.1")).expect("the exact value matches");
    /// assert_eq!(vip.policy().map(|p| p.max_cost()), Some(100));
    /// // Each address has its own counter.
    /// assert_ne!(some.key(), limits.resolve("edge", &entry("192.0.2.8")).unwrap().key());
    /// assert!(limits.resolve("other", &entry("192.0.2.7")).is_none());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn resolve(&self, domain: &str, entries: &[(String, String)]) -> Option<Resolved<'_>> {
        self.domains.get(domain)?.resolve(entries)
    }

    /// How each entry of a descriptor matched `domain`'s tree, in order, as far as the walk
    /// got: for explaining a decision ([`resolve`](Self::resolve) finds the limit itself). An
    /// empty list when the domain is unknown or the first entry matched nothing; a list shorter
    /// than `entries` when the walk stopped before the end.
    ///
    /// ```
    /// use tollgate_config::limits::EntryMatch;
    ///
    /// let limits = tollgate_config::parse(
    ///     "edge.yaml",
    ///     r#"
    /// domain: edge
    /// descriptors:
    ///   - key: path
    ///     value: /api/*
    ///     descriptors:
    ///       - key: user
    ///         rate_limit: {unit: second, requests_per_unit: 10}
    /// "#,
    /// )?;
    /// let entries = [("path".to_owned(), "/api/x".to_owned()), ("user".to_owned(), "ann".to_owned())];
    /// assert_eq!(
    ///     limits.explain_entries("edge", &entries),
    ///     [EntryMatch::Wildcard { pattern: "/api/*".to_owned() }, EntryMatch::Default]
    /// );
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn explain_entries(&self, domain: &str, entries: &[(String, String)]) -> Vec<EntryMatch> {
        self.domains
            .get(domain)
            .map_or_else(Vec::new, |tree| tree.explain(entries))
    }

    /// The routes of `tollgate proxy`, in the order the files list them; see [`crate::routes`].
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "proxy.yaml",
    ///     "policies:\n  api: {algorithm: gcra, rate: 10/s, burst: 20}\nroutes:\n  - {prefix: /, policies: [api]}\n",
    /// )?;
    /// assert_eq!(limits.routes()[0].policies(), ["api"]);
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    pub(crate) fn insert_route(&mut self, route: Route) {
        self.routes.push(route);
    }

    /// The allow and deny list entries of every file, global and per policy, in file order.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "access:\n  deny:\n    cidrs: [203.0.113.0/24]\n",
    /// )?;
    /// let lists = tollgate::access::AccessLists::new(limits.access_entries().iter().cloned());
    /// assert!(lists.lookup("any", b"203.0.113.9").is_some());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn access_entries(&self) -> &[tollgate::access::AccessEntry] {
        &self.access
    }

    pub(crate) fn extend_access(&mut self, entries: Vec<tollgate::access::AccessEntry>) {
        self.access.extend(entries);
    }

    pub(crate) fn insert_policy(&mut self, name: String, policy: NamedPolicy) {
        self.policies.insert(name, policy);
    }

    pub(crate) fn insert_domain(&mut self, domain: Domain) {
        self.domains.insert(domain.name.clone(), domain);
    }

    pub(crate) fn domain_mut(&mut self, name: &str) -> Option<&mut Domain> {
        self.domains.get_mut(name)
    }

    /// Every descriptor of every domain, at any depth, in no particular order.
    pub(crate) fn descriptors(&self) -> Vec<&Node> {
        let mut found = Vec::new();
        let mut pending: Vec<&Node> = self.domains.values().flat_map(|d| d.root.nodes()).collect();
        // Bounded: each descriptor is visited once, the tree has no cycles.
        while let Some(node) = pending.pop() {
            found.push(node);
            pending.extend(node.children.nodes());
        }
        found
    }

    pub(crate) fn has_policy(&self, name: &str) -> bool {
        self.policies.contains_key(name)
    }

    /// Whether an envoyproxy/ratelimit file defines domain `name`.
    ///
    /// ```
    /// let limits = tollgate_config::parse("a.yaml", "domain: edge\ndescriptors: []\n")?;
    /// assert!(limits.has_domain("edge") && !limits.has_domain("api"));
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn has_domain(&self, name: &str) -> bool {
        self.domains.contains_key(name)
    }
}

/// A policy of a tollgate-format file, with its `shadow` flag.
///
/// ```
/// let limits = tollgate_config::parse(
///     "a.yaml",
///     "policies:\n  search:\n    algorithm: fixed_window\n    limit: 100\n    window: 1m\n    shadow: true\n",
/// )?;
/// let search = limits.policy("search").unwrap();
/// assert!(search.shadow());
/// assert_eq!(search.policy().algorithm().name(), "fixed_window");
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPolicy {
    policy: Policy,
    shadow: bool,
}

impl NamedPolicy {
    pub(crate) fn new(policy: Policy, shadow: bool) -> Self {
        NamedPolicy { policy, shadow }
    }

    /// The policy to check.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "policies:\n  api:\n    algorithm: token_bucket\n    capacity: 10\n    refill: 10/s\n",
    /// )?;
    /// assert_eq!(limits.policy("api").unwrap().policy().max_cost(), 10);
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// True when the policy runs in shadow mode: checked and counted, but a denial is reported
    /// and not enforced.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "policies:\n  api:\n    algorithm: gcra\n    rate: 1/s\n    burst: 1\n",
    /// )?;
    /// assert!(!limits.policy("api").unwrap().shadow());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn shadow(&self) -> bool {
        self.shadow
    }
}
