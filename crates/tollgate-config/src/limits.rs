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

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use tollgate::Policy;
use tollgate::concurrency::ConcurrencyPolicy;

use crate::metadata::Metadata;
use crate::pattern::Pattern;
use crate::routes::Route;
use tollgate::bounds::MAX_NAME_LEN;

/// The prefix of every policy name generated for an envoyproxy/ratelimit descriptor, and reserved
/// for them: tollgate-format policies may not use it, so their counters never meet a
/// descriptor's. Policies made at run time for Envoy's limit overrides use it too.
///
/// ```
/// assert_eq!(tollgate_config::ENVOY_POLICY_PREFIX, "envoy:");
/// ```
pub const ENVOY_POLICY_PREFIX: &str = "envoy:";

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
        let tree = self.domains.get(domain)?;
        let mut key = String::with_capacity(64);
        push_part(&mut key, domain);
        let mut any_value_to_metric = false;
        let node = tree.walk(entries, |entry, node, matched| {
            let (entry_key, value) = entry;
            push_part(&mut key, entry_key);
            match matched {
                Matched::Exact => push_tagged(&mut key, '=', value),
                Matched::Wildcard { pattern } if node.share_threshold => push_tagged(&mut key, '~', pattern),
                Matched::Wildcard { pattern } => {
                    push_tagged(&mut key, '*', pattern);
                    push_part(&mut key, value);
                }
                Matched::Any => {
                    push_part(&mut key, "?");
                    push_part(&mut key, value);
                }
            }
            any_value_to_metric |= node.value_to_metric;
        })?;
        let limit = node.limit.as_ref()?;
        let stats_key = if node.detailed_metric || any_value_to_metric {
            Cow::Owned(stats_key(tree, domain, entries, node.detailed_metric))
        } else {
            Cow::Borrowed(node.full_name.as_str())
        };
        Some(Resolved {
            limit,
            detailed_metric: node.detailed_metric,
            key,
            stats_key,
        })
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
        let mut matches = Vec::with_capacity(entries.len());
        if let Some(tree) = self.domains.get(domain) {
            tree.walk(entries, |_, _, matched| {
                matches.push(match matched {
                    Matched::Exact => EntryMatch::Exact,
                    Matched::Wildcard { pattern } => EntryMatch::Wildcard {
                        pattern: pattern.to_owned(),
                    },
                    Matched::Any => EntryMatch::Default,
                })
            });
        }
        matches
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

/// The rate limit that applies to one request descriptor, from [`Limits::resolve`].
///
/// ```
/// let limits = tollgate_config::parse(
///     "internal.yaml",
///     r#"
/// domain: internal
/// descriptors:
///   - key: ldap
///     rate_limit: {unlimited: true}
///   - key: azure
///     shadow_mode: true
///     rate_limit: {unit: minute, requests_per_unit: 100, name: azure_default}
/// "#,
/// )?;
/// let entry = |key: &str| [(key.to_owned(), "x".to_owned())];
/// let ldap = limits.resolve("internal", &entry("ldap")).unwrap();
/// assert!(ldap.is_unlimited() && ldap.policy().is_none());
/// let azure = limits.resolve("internal", &entry("azure")).unwrap();
/// assert!(azure.shadow_mode());
/// assert_eq!(azure.name(), Some("azure_default"));
/// assert_eq!(azure.policy().unwrap().name(), "envoy:internal.azure");
/// assert_eq!(azure.key(), "8:internal,5:azure,1:?,1:x,");
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Resolved<'a> {
    limit: &'a DescriptorLimit,
    detailed_metric: bool,
    key: String,
    stats_key: Cow<'a, str>,
}

impl<'a> Resolved<'a> {
    /// The policy to check the [`key`](Self::key) under; `None` when the rate limit is
    /// `unlimited`, which is never checked (and never denies).
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
    /// )?;
    /// let resolved = limits.resolve("d", &[("k".into(), "v".into())]).unwrap();
    /// let policy = resolved.policy().unwrap();
    /// assert_eq!(policy.algorithm().name(), "fixed_window");
    /// assert_eq!(policy.max_cost(), 5);
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn policy(&self) -> Option<&'a Policy> {
        match &self.limit.quota {
            Quota::Limited(policy) => Some(policy),
            Quota::Unlimited | Quota::DenyAll { .. } => None,
        }
    }

    /// True for `rate_limit: {unlimited: true}`: the request matched a rate limit that admits
    /// everything. Upstream answers such descriptors OK without touching its cache.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n",
    /// )?;
    /// assert!(limits.resolve("d", &[("k".into(), "v".into())]).unwrap().is_unlimited());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn is_unlimited(&self) -> bool {
        matches!(self.limit.quota, Quota::Unlimited)
    }

    /// For `requests_per_unit: 0`, which denies every request as upstream does: the unit (or
    /// window) the limit is stated in, and the name its decisions are counted under in metrics.
    /// Such a limit has no [`policy`](Self::policy) and touches no store.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    value: bad\n    rate_limit: {unit: minute, requests_per_unit: 0}\n",
    /// )?;
    /// let resolved = limits.resolve("d", &[("k".into(), "bad".into())]).unwrap();
    /// assert!(resolved.policy().is_none() && !resolved.is_unlimited());
    /// assert_eq!(resolved.deny_all(), Some((Duration::from_secs(60), "envoy:d.k_bad")));
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn deny_all(&self) -> Option<(Duration, &'a str)> {
        match &self.limit.quota {
            Quota::DenyAll { period, policy_name } => Some((*period, policy_name.as_str())),
            Quota::Unlimited | Quota::Limited(_) => None,
        }
    }

    /// The store key of this request's counter; see the [module docs](crate::limits) for the
    /// encoding. It can exceed the core's 8 KiB key limit only if the request's values do, in
    /// which case the store refuses the check.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
    /// )?;
    /// let resolved = limits.resolve("d", &[("k".into(), "v".into())]).unwrap();
    /// assert_eq!(resolved.key(), "1:d,1:k,2:=v,");
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The store key, owned: the counter's key without a copy, for a caller done with the rest.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    /// )?;
    /// let resolved = limits.resolve("d", &[("k".into(), "v".into())]).unwrap();
    /// assert_eq!(resolved.into_key(), "1:d,1:k,2:=v,");
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn into_key(self) -> String {
        self.key
    }

    /// True for `shadow_mode: true`: check and count, but report OK whatever the outcome.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
    /// )?;
    /// assert!(limits.resolve("d", &[("k".into(), "v".into())]).unwrap().shadow_mode());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn shadow_mode(&self) -> bool {
        self.limit.shadow_mode
    }

    /// True for `quota_mode: true`: over the limit, the descriptor reports `OVER_LIMIT` but only
    /// denies the request when every quota-mode descriptor of the request is over.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
    /// )?;
    /// assert!(limits.resolve("d", &[("k".into(), "v".into())]).unwrap().quota_mode());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn quota_mode(&self) -> bool {
        self.limit.quota_mode
    }

    /// The descriptor's `metadata`, for the response's dynamic metadata; `None` when absent or
    /// empty.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
    /// )?;
    /// assert!(limits.resolve("d", &[("k".into(), "v".into())]).unwrap().metadata().is_none());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn metadata(&self) -> Option<&'a Metadata> {
        self.limit.metadata.as_ref()
    }

    /// The rate limit's `name`, which other rate limits' `replaces` refer to.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5, name: daily}\n",
    /// )?;
    /// assert_eq!(limits.resolve("d", &[("k".into(), "v".into())]).unwrap().name(), Some("daily"));
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn name(&self) -> Option<&'a str> {
        self.limit.name.as_deref()
    }

    /// The names this rate limit replaces; see [`apply_replaces`].
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      replaces: [{name: daily}]\n",
    /// )?;
    /// let resolved = limits.resolve("d", &[("k".into(), "v".into())]).unwrap();
    /// assert_eq!(resolved.replaces(), ["daily"]);
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn replaces(&self) -> &'a [String] {
        &self.limit.replaces
    }

    /// True when the matched descriptor has `detailed_metric: true`.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
    /// )?;
    /// assert!(limits.resolve("d", &[("k".into(), "v".into())]).unwrap().detailed_metric());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn detailed_metric(&self) -> bool {
        self.detailed_metric
    }

    /// The name to report metrics under, exactly as upstream names its stats: the domain, then
    /// per level the key and, for a descriptor with a value, `_` and that value (a wildcard shows
    /// its pattern, stars included), joined by `.` (`messaging.message_type_marketing.to_number`).
    /// With `detailed_metric: true` on the matched descriptor every level shows the request's
    /// value instead (as `key_value`, so `key_` for an empty value); with `value_to_metric: true`
    /// on a descriptor, that level does. A level that is a wildcard with `share_threshold: true`
    /// shows its pattern in both cases, since all its values share one counter.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "a.yaml",
    ///     "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
    /// )?;
    /// assert_eq!(limits.resolve("d", &[("k".into(), "v".into())]).unwrap().stats_key(), "d.k_v");
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn stats_key(&self) -> &str {
        &self.stats_key
    }
}

/// Applies `replaces` across the descriptors of one request, as upstream does: every rate limit
/// whose [`name`](Resolved::name) is listed in the `replaces` of any matched rate limit of the
/// request (unlimited ones included) is dropped, so it is neither checked nor counted.
///
/// ```
/// use tollgate_config::apply_replaces;
///
/// let limits = tollgate_config::parse(
///     "a.yaml",
///     r#"
/// domain: d
/// descriptors:
///   - key: user
///     rate_limit: {unit: second, requests_per_unit: 5, name: per_user}
///   - key: vip
///     rate_limit: {unit: second, requests_per_unit: 50, replaces: [{name: per_user}]}
/// "#,
/// )?;
/// let descriptor = |key: &str| vec![(key.to_owned(), "alice".to_owned())];
/// let mut resolved: Vec<_> = [descriptor("user"), descriptor("vip")]
///     .iter()
///     .map(|entries| limits.resolve("d", entries))
///     .collect();
/// apply_replaces(&mut resolved);
/// assert!(resolved[0].is_none());
/// assert_eq!(resolved[1].as_ref().and_then(|r| r.policy()).map(|p| p.max_cost()), Some(50));
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
pub fn apply_replaces(resolved: &mut [Option<Resolved<'_>>]) {
    let replaced: HashSet<&str> = resolved
        .iter()
        .flatten()
        .flat_map(|r| r.replaces().iter().map(String::as_str))
        .collect();
    if replaced.is_empty() {
        return;
    }
    for slot in resolved.iter_mut() {
        if slot
            .as_ref()
            .and_then(Resolved::name)
            .is_some_and(|name| replaced.contains(name))
        {
            *slot = None;
        }
    }
}

/// One envoyproxy/ratelimit domain: the top level of its descriptor tree.
#[derive(Debug)]
pub(crate) struct Domain {
    pub(crate) name: String,
    pub(crate) root: Level,
}

impl Domain {
    /// Walks `entries` down the tree, calling `visit` with each entry and the descriptor it
    /// matched, and returns the descriptor the last entry reached.
    fn walk<'a, 'e>(
        &'a self,
        entries: &'e [(String, String)],
        mut visit: impl FnMut((&'e str, &'e str), &'a Node, Matched<'a>),
    ) -> Option<&'a Node> {
        let last = entries.len().checked_sub(1)?;
        let mut level = &self.root;
        for (i, (key, value)) in entries.iter().enumerate() {
            let (node, matched) = level.find(key, value)?;
            visit((key, value), node, matched);
            if i == last {
                return Some(node);
            }
            if node.children.is_empty() {
                // The request is deeper than the tree: upstream finds no limit.
                return None;
            }
            level = &node.children;
        }
        None
    }
}

/// How one entry of a request's descriptor matched the config's descriptor at its level; see
/// [`Limits::explain_entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryMatch {
    /// A descriptor with this very value.
    Exact,
    /// A descriptor whose value is a pattern (`*`) that the value matches.
    Wildcard {
        /// The descriptor's value as written.
        pattern: String,
    },
    /// A descriptor without a value: any value of the key.
    Default,
}

impl EntryMatch {
    /// `exact`, `wildcard` or `default`.
    ///
    /// ```
    /// assert_eq!(tollgate_config::limits::EntryMatch::Default.as_str(), "default");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            EntryMatch::Exact => "exact",
            EntryMatch::Wildcard { .. } => "wildcard",
            EntryMatch::Default => "default",
        }
    }
}

/// How an entry matched a descriptor.
#[derive(Debug, Clone, Copy)]
enum Matched<'a> {
    Exact,
    /// `pattern`: the descriptor's value as written, stars included.
    Wildcard {
        pattern: &'a str,
    },
    Any,
}

/// Upstream's stats key of a request that reached a rate limit through `tree`; see
/// [`Resolved::stats_key`].
fn stats_key(tree: &Domain, domain: &str, entries: &[(String, String)], detailed: bool) -> String {
    // (entry, matched descriptor, how): the walk is repeated only for keys that need values.
    let mut levels = Vec::with_capacity(entries.len());
    tree.walk(entries, |entry, node, matched| {
        levels.push((entry, node, matched))
    });
    fn shared<'n>(node: &Node, matched: Matched<'n>) -> Option<&'n str> {
        match matched {
            Matched::Wildcard { pattern } if node.share_threshold => Some(pattern),
            _ => None,
        }
    }
    let mut out = domain.to_owned();
    let mut push = |key: &str, value: &str, underscore: bool| {
        out.push('.');
        out.push_str(key);
        if underscore || !value.is_empty() {
            out.push('_');
            out.push_str(value);
        }
    };
    if detailed {
        // Every level shows the request's value; a level whose wildcard shares its counter shows
        // the pattern. Upstream writes `key_` for an empty value unless some level shares.
        let any_shared = levels
            .iter()
            .any(|&(_, node, matched)| shared(node, matched).is_some());
        for &((key, value), node, matched) in &levels {
            match shared(node, matched) {
                Some(pattern) => push(key, pattern, true),
                None => push(key, value, !any_shared),
            }
        }
    } else {
        // `value_to_metric` shows the request's value on its own level, unless the level is a
        // wildcard sharing its counter, which shows the pattern.
        for &((key, value), node, matched) in &levels {
            let shown = match matched {
                Matched::Wildcard { pattern } if node.share_threshold || !node.value_to_metric => pattern,
                Matched::Exact | Matched::Wildcard { .. } => value,
                Matched::Any if node.value_to_metric => value,
                Matched::Any => "",
            };
            push(key, shown, false);
        }
    }
    out
}

/// The descriptors of one level, grouped by key.
#[derive(Debug, Default)]
pub(crate) struct Level {
    keys: HashMap<String, KeyDescriptors>,
}

impl Level {
    /// Every descriptor of this level (not those below it), in no particular order.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.keys.values().flat_map(|group| {
            group
                .exact
                .values()
                .chain(group.wildcards.iter().map(|(_, node)| node))
                .chain(group.any.as_deref())
        })
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn find(&self, key: &str, value: &str) -> Option<(&Node, Matched<'_>)> {
        let group = self.keys.get(key)?;
        if let Some(node) = group.exact.get(value) {
            return Some((node, Matched::Exact));
        }
        let literal = group
            .wildcards
            .iter()
            .find(|(pattern, _)| pattern.text() == value);
        if let Some((pattern, node)) =
            literal.or_else(|| group.wildcards.iter().find(|(pattern, _)| pattern.matches(value)))
        {
            return Some((
                node,
                Matched::Wildcard {
                    pattern: pattern.text(),
                },
            ));
        }
        group.any.as_deref().map(|node| (node, Matched::Any))
    }

    /// Adds a descriptor; false (and the descriptor dropped) if one with the same key and value
    /// is already there.
    pub(crate) fn insert(&mut self, key: String, value: Option<String>, node: Node) -> bool {
        let group = self.keys.entry(key).or_default();
        match value {
            None if group.any.is_some() => false,
            None => {
                group.any = Some(Box::new(node));
                true
            }
            Some(value) => match Pattern::new(&value) {
                Some(pattern) if group.wildcards.iter().any(|(p, _)| *p == pattern) => false,
                Some(pattern) => {
                    group.wildcards.push((pattern, node));
                    true
                }
                None => match group.exact.entry(value) {
                    std::collections::hash_map::Entry::Occupied(_) => false,
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(node);
                        true
                    }
                },
            },
        }
    }
}

/// The descriptors of one level with one key.
#[derive(Debug, Default)]
struct KeyDescriptors {
    exact: HashMap<String, Node>,
    /// Wildcard descriptors in file order: upstream tries them in that order.
    wildcards: Vec<(Pattern, Node)>,
    any: Option<Box<Node>>,
}

/// One descriptor of the tree.
#[derive(Debug)]
pub(crate) struct Node {
    /// Upstream's name for the descriptor: `domain.key_value.key`.
    pub(crate) full_name: String,
    pub(crate) limit: Option<DescriptorLimit>,
    pub(crate) children: Level,
    pub(crate) detailed_metric: bool,
    pub(crate) value_to_metric: bool,
    pub(crate) share_threshold: bool,
}

/// A descriptor's `rate_limit`, compiled.
#[derive(Debug)]
pub(crate) struct DescriptorLimit {
    pub(crate) quota: Quota,
    pub(crate) name: Option<String>,
    pub(crate) replaces: Vec<String>,
    pub(crate) shadow_mode: bool,
    pub(crate) quota_mode: bool,
    /// `None` when absent or empty.
    pub(crate) metadata: Option<Metadata>,
}

/// What a descriptor's `rate_limit` admits.
#[derive(Debug)]
pub(crate) enum Quota {
    /// `unlimited: true`: everything, without counting.
    Unlimited,
    /// `requests_per_unit: 0`: nothing. `period` is the unit (or window), for
    /// `duration_until_reset`; `policy_name` names it in metrics.
    DenyAll { period: Duration, policy_name: String },
    /// A limit the store decides.
    Limited(Policy),
}

/// The policy name for a descriptor: `envoy:` and upstream's name, cut and hashed when longer
/// than the core allows.
pub(crate) fn descriptor_policy_name(full_name: &str) -> String {
    let name = format!("{ENVOY_POLICY_PREFIX}{full_name}");
    if name.len() <= MAX_NAME_LEN {
        return name;
    }
    // `~` and 16 hex digits of a hash of the whole name; FNV-1a because it is stable across
    // builds and platforms (std's hasher is not), so counters in Redis survive an upgrade.
    const SUFFIX_LEN: usize = 17;
    let mut cut = MAX_NAME_LEN - SUFFIX_LEN;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut short = name[..cut].to_owned();
    let _ = write!(short, "~{:016x}", fnv1a64(name.as_bytes()));
    short
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash: u64, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The store key of a descriptor that carries its own limit override: the domain and every
/// entry's key and value, matched against nothing. The override's policy name keeps these keys
/// apart from the configured limits' keys.
///
/// ```
/// let entries = [("k".to_owned(), "v".to_owned())];
/// assert_eq!(tollgate_config::override_key("d", &entries), "1:d,1:k,1:v,");
/// ```
pub fn override_key(domain: &str, entries: &[(String, String)]) -> String {
    let mut key = String::with_capacity(64);
    push_part(&mut key, domain);
    for (entry_key, value) in entries {
        push_part(&mut key, entry_key);
        push_part(&mut key, value);
    }
    key
}

/// Appends a netstring: `<len>:<text>,`.
fn push_part(out: &mut String, text: &str) {
    let _ = write!(out, "{}:{text},", text.len());
}

/// Appends a netstring of `tag` followed by `text`.
fn push_tagged(out: &mut String, tag: char, text: &str) {
    let _ = write!(out, "{}:{tag}{text},", text.len() + tag.len_utf8());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_can_be_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Limits>();
        shared::<Resolved<'static>>();
    }

    #[test]
    fn short_descriptor_names_are_kept_whole() {
        assert_eq!(descriptor_policy_name("d.k_v"), "envoy:d.k_v");
        let exactly = "x".repeat(MAX_NAME_LEN - ENVOY_POLICY_PREFIX.len());
        assert_eq!(descriptor_policy_name(&exactly).len(), MAX_NAME_LEN);
        assert!(descriptor_policy_name(&exactly).ends_with('x'));
    }

    #[test]
    fn long_descriptor_names_are_cut_and_hashed_stably() {
        let long = "d.".to_owned() + &"k_v.".repeat(100);
        let name = descriptor_policy_name(&long);
        assert_eq!(name.len(), MAX_NAME_LEN);
        assert!(name.starts_with("envoy:d.k_v."));
        assert_eq!(name, descriptor_policy_name(&long), "same input, same name");
        let other = "d.".to_owned() + &"k_v.".repeat(101);
        assert_ne!(
            name,
            descriptor_policy_name(&other),
            "the hash tells apart a shared prefix"
        );
        // A fixed value, so a change of hash (which would orphan counters in Redis) is caught.
        assert_eq!(fnv1a64(b"envoy:d.k"), 0x2ed7_324c_bd77_7079);
    }

    #[test]
    fn long_multibyte_names_are_cut_on_a_char_boundary() {
        let long = "é".repeat(300);
        let name = descriptor_policy_name(&long);
        assert!(name.len() <= MAX_NAME_LEN);
        assert!(
            tollgate::Policy::new(
                name,
                tollgate::Algorithm::sliding_log(1, std::time::Duration::from_secs(1)).unwrap()
            )
            .is_ok()
        );
    }

    #[test]
    fn parts_are_length_prefixed_in_bytes() {
        let mut out = String::new();
        push_part(&mut out, "a,b");
        push_part(&mut out, "");
        push_part(&mut out, "é");
        push_tagged(&mut out, '=', "v");
        assert_eq!(out, "3:a,b,0:,2:é,2:=v,");
    }
}
