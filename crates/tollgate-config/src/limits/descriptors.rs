//! The envoyproxy/ratelimit descriptor trees of a [`Limits`](crate::Limits): matching a request
//! descriptor ([`Resolved`]), the key of its counter and upstream's stats key, as the
//! [module docs](super) describe them.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use tollgate::Policy;
use tollgate::bounds::MAX_NAME_LEN;

use crate::metadata::Metadata;
use crate::pattern::Pattern;

/// The prefix of every policy name generated for an envoyproxy/ratelimit descriptor, and reserved
/// for them: tollgate-format policies may not use it, so their counters never meet a
/// descriptor's. Policies made at run time for Envoy's limit overrides use it too.
///
/// ```
/// assert_eq!(tollgate_config::ENVOY_POLICY_PREFIX, "envoy:");
/// ```
pub const ENVOY_POLICY_PREFIX: &str = "envoy:";

/// The rate limit that applies to one request descriptor, from
/// [`Limits::resolve`](crate::Limits::resolve).
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
    /// Finds the rate limit for one request descriptor of this domain: see
    /// [`Limits::resolve`](crate::Limits::resolve).
    pub(crate) fn resolve(&self, entries: &[(String, String)]) -> Option<Resolved<'_>> {
        let domain = self.name.as_str();
        let mut key = String::with_capacity(64);
        push_part(&mut key, domain);
        let mut any_value_to_metric = false;
        let node = self.walk(entries, |entry, node, matched| {
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
            Cow::Owned(stats_key(self, domain, entries, node.detailed_metric))
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

    /// How each entry of a descriptor matched this domain's tree: see
    /// [`Limits::explain_entries`](crate::Limits::explain_entries).
    pub(crate) fn explain(&self, entries: &[(String, String)]) -> Vec<EntryMatch> {
        let mut matches = Vec::with_capacity(entries.len());
        self.walk(entries, |_, _, matched| {
            matches.push(match matched {
                Matched::Exact => EntryMatch::Exact,
                Matched::Wildcard { pattern } => EntryMatch::Wildcard {
                    pattern: pattern.to_owned(),
                },
                Matched::Any => EntryMatch::Default,
            })
        });
        matches
    }

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
/// [`Limits::explain_entries`](crate::Limits::explain_entries).
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

pub(super) fn fnv1a64(bytes: &[u8]) -> u64 {
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
pub(super) fn push_part(out: &mut String, text: &str) {
    let _ = write!(out, "{}:{text},", text.len());
}

/// Appends a netstring of `tag` followed by `text`.
pub(super) fn push_tagged(out: &mut String, tag: char, text: &str) {
    let _ = write!(out, "{}:{tag}{text},", text.len() + tag.len_utf8());
}
