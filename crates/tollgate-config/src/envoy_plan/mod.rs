//! The Envoy planner: what a `ShouldRateLimit` request means, as envoyproxy/ratelimit answers
//! it, in one pure place. The gRPC door, `POST /json` and explain all plan with it, so they
//! cannot disagree; they only read their input into [`Asked`] descriptors, run
//! [`Plan::request`] with one [`Engine::run`](tollgate::Engine::run) call, and write
//! [`Plan::answer`] back in their protocol. No I/O here: the engine call is the caller's, and
//! the time is the engine's.
//!
//! # One request
//!
//! A request names a `domain` and carries descriptors, each a list of `(key, value)` entries.
//! Each descriptor is matched on its own with [`Limits::resolve`], then [`apply_replaces`]
//! drops the rate limits that another matched rate limit of the same request `replaces`. Each
//! descriptor then answers:
//!
//! - no rate limit applies (unknown domain, no descriptor matched, or the limit was replaced):
//!   `OK`, without a current limit;
//! - `unlimited: true`: `OK` with `u32::MAX` left, as upstream;
//! - `requests_per_unit: 0`: over the limit without asking the store, with the time to the end
//!   of the current unit;
//! - a cost above what the policy can ever admit: over the limit, with no reset time (no wait
//!   makes it pass);
//! - otherwise the engine decides the descriptor's rule: its key is the descriptor's encoded
//!   path, and allow and deny lists match its `remote_address` value (else its last entry's).
//!
//! A descriptor that carries its own limit ([`LimitOverride`]) is not matched against the
//! config: for any descriptor of a known domain it is a fixed window of `requests_per_unit` per
//! `unit` aligned to the unit (0 denies everything), never in shadow mode, kept apart from the
//! configured limit of the same descriptor.
//!
//! The cost of a descriptor is its own `hits_addend` when set, else the request's (0 meaning 1).
//! A descriptor's own `hits_addend` of 0 is a question ([`Rule::question`](tollgate::Rule) of
//! cost 0): "is the key past its limit?", `OK` while it is not (a budget exactly spent is not
//! past it), never spent. A descriptor's own `hits_addend` above 0 is counted as upstream counts
//! it: a charge ([`Op::Charge`]), recorded even past the limit, the key going into debt,
//! and `OVER_LIMIT` when it went past. `is_negative_hits` gives that many back (a refund). This
//! is Envoy's pattern for costs known after the response: ask with 0 before, debit the real cost
//! after. Descriptors without their own `hits_addend` are checked all or nothing.
//!
//! # Modes, as engine rules
//!
//! Every limited descriptor is one rule of one engine request, decided all or nothing: a
//! request over the limit spends nothing anywhere. The modes only say how each rule weighs:
//!
//! - a descriptor in `shadow_mode`, and every descriptor under global shadow mode
//!   ([`Modes::global_shadow`]), is a shadow rule: decided and counted, never denying. Its own
//!   shadow mode answers `OK`; the global one keeps the descriptor's code and answers the
//!   request `OK` overall;
//! - a descriptor in quota mode (its own `quota_mode`, or [`Modes::global_quota`]) is a rule
//!   [`Apart::Quota`]: the request is over only when every quota descriptor is;
//! - under upstream's counting ([`Modes::count_every`]) every other descriptor is a rule
//!   [`Apart::Alone`]: each spends when it fits, whatever the others say, and one over its
//!   limit is charged its cost ([`Op::Count`]), as upstream's counter counts it.
//!
//! A refusal without the store (an enforced deny-all descriptor, a cost no budget admits, or
//! every quota descriptor over at once) refuses the request: then its rules are only looked at
//! ([`Op::Peek`]). A deny-listed address refuses it too (see [`Plan::request`]).
//!
//! # The answer
//!
//! [`Plan::answer`] turns the engine's verdict into one [`DescriptorAnswer`] per descriptor and
//! the request's code: over when a descriptor not in quota mode is over, or when the request
//! has quota-mode descriptors and all of them are over; `OK` under global shadow mode; over
//! whenever a key is deny-listed, whatever the modes.

mod answer;
mod limit_override;

use std::borrow::Cow;

use tollgate::{Apart, Op, Policy, Request, Rule};

pub use self::answer::{Answer, CurrentLimit, DescriptorAnswer, Hit, Kind};
use self::limit_override::{Admits, OverridePolicies};
pub use self::limit_override::{CACHED_OVERRIDES, LimitOverride, OverrideError};
use crate::{Limits, Metadata, Resolved, Unit, apply_replaces, override_key};

/// Upstream's global settings that change what a request means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Modes {
    /// `SHADOW_MODE`: every descriptor is a shadow rule, and the request is answered `OK`.
    pub global_shadow: bool,
    /// `QUOTA_MODE`: every descriptor is in quota mode.
    pub global_quota: bool,
    /// Upstream's counting: every descriptor spends on its own.
    pub count_every: bool,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: a request whose checked descriptors are over
    /// records none of its charges ([`Plan::request`]).
    pub stop_when_over: bool,
}

impl Modes {
    /// The modes, from upstream's settings.
    pub fn new(global_shadow: bool, global_quota: bool, count_every: bool) -> Self {
        Modes {
            global_shadow,
            global_quota,
            count_every,
            stop_when_over: false,
        }
    }

    /// These modes with upstream's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` on or off.
    ///
    /// ```
    /// use tollgate_config::envoy_plan::Modes;
    ///
    /// assert!(Modes::default().with_stop_when_over(true).stop_when_over);
    /// ```
    #[must_use]
    pub fn with_stop_when_over(mut self, stop: bool) -> Self {
        self.stop_when_over = stop;
        self
    }
}

/// One descriptor of a request, as the door read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    /// Its `(key, value)` entries, in order.
    pub entries: Vec<(String, String)>,
    /// What it costs: its own `hits_addend`, else the request's; 0 asks whether the key is past
    /// its limit, spending nothing.
    pub cost: u64,
    /// Its own limit, instead of the config's.
    pub limit: Option<LimitOverride>,
    /// How its cost is spent.
    pub hits: Hits,
}

/// How a descriptor's cost is spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Hits {
    /// Checked with the request's other descriptors, all or nothing (the request's
    /// `hits_addend`, or a descriptor's own `hits_addend` of 0, a question).
    #[default]
    Checked,
    /// Its own `hits_addend` above 0: charged, recorded even past the limit, as upstream
    /// counts it (Envoy debits the real cost of a response this way).
    Charged,
    /// `is_negative_hits`: given back.
    Refunded,
}

/// Why a request cannot be planned: the caller's mistake.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// Upstream's message for an empty domain.
    #[error("rate limit domain must not be empty")]
    NoDomain,
    /// Upstream's message for a request without descriptors.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// A descriptor's limit override makes no policy.
    #[error("descriptors[{index}]: {source}")]
    Override {
        /// The descriptor.
        index: usize,
        /// Why.
        source: OverrideError,
    },
    /// A descriptor's key is one the store refuses (past the core's key length).
    #[error("descriptors[{index}]: {source}")]
    Key {
        /// The descriptor.
        index: usize,
        /// Why.
        source: tollgate::Error,
    },
}

/// Plans requests; holds the policies of recent limit overrides, so share one per server.
///
/// ```
/// use tollgate::{Engine, MemoryStore};
/// use tollgate_config::envoy_plan::{Asked, Modes, Planner};
///
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     match std::pin::pin!(f).poll(&mut cx) { std::task::Poll::Ready(v) => v, _ => unreachable!() }
/// # }
/// let limits = tollgate_config::parse(
///     "edge.yaml",
///     "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
/// )?;
/// let planner = Planner::default();
/// let engine = Engine::new(MemoryStore::new());
/// let asked = || vec![Asked { entries: vec![("ip".into(), "192.0.2.7".into())], cost: 1, ..Asked::default() }];
/// for expect_over in [false, true] {
///     let plan = planner.plan(&limits, Modes::default(), "edge", asked())?;
///     // The memory store answers at once, so one poll decides.
///     let settled = block_on(engine.run(&plan.request()))?;
///     assert_eq!(plan.answer(&settled).over, expect_over);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct Planner {
    overrides: OverridePolicies,
}

impl Planner {
    /// Plans `asked` under `domain` against `limits`; see the [module docs](self).
    pub fn plan<'l>(
        &self,
        limits: &'l Limits,
        modes: Modes,
        domain: &str,
        asked: Vec<Asked>,
    ) -> Result<Plan<'l>, PlanError> {
        if domain.is_empty() {
            return Err(PlanError::NoDomain);
        }
        if asked.is_empty() {
            return Err(PlanError::NoDescriptors);
        }
        // A descriptor with an override takes no part in matching, `unlimited` or `replaces`.
        let mut resolved: Vec<Option<Resolved<'l>>> = asked
            .iter()
            .map(|asked| match asked.limit {
                Some(_) => None,
                None => limits.resolve(domain, &asked.entries),
            })
            .collect();
        let found: Vec<bool> = resolved.iter().map(Option::is_some).collect();
        // Upstream decides "unlimited" before `replaces`: a replaced unlimited limit still
        // answers as unlimited.
        let unlimited: Vec<bool> = resolved
            .iter()
            .map(|r| r.as_ref().is_some_and(Resolved::is_unlimited))
            .collect();
        apply_replaces(&mut resolved);
        let mut slots = Vec::with_capacity(asked.len());
        let mut unlimited_keys = Vec::new();
        for (index, (asked, resolved)) in asked.into_iter().zip(resolved).enumerate() {
            let listed = list_key(&asked.entries);
            let none = Slot::None {
                quota: modes.global_quota,
                replaced: found[index],
            };
            let slot = match (asked.limit, resolved) {
                (Some(limit), _) if limits.has_domain(domain) => {
                    let admits = self
                        .overrides
                        .get(limit)
                        .map_err(|source| PlanError::Override { index, source })?;
                    let matched = Matched::overridden(domain, asked, modes.global_quota);
                    match admits {
                        Admits::Nothing { unit, policy_name } => Slot::DenyAll {
                            matched,
                            unit,
                            policy_name: Cow::Owned(policy_name),
                        },
                        Admits::Window(policy) => Slot::limited(matched, Cow::Owned(policy)),
                    }
                }
                (Some(_), _) => none,
                _ if unlimited[index] => Slot::Unlimited,
                (None, None) => none,
                (None, Some(resolved)) => match (resolved.policy(), resolved.deny_all()) {
                    (Some(policy), _) => Slot::limited(
                        Matched::configured(resolved, &asked, modes.global_quota),
                        Cow::Borrowed(policy),
                    ),
                    (None, Some((period, policy_name))) => Slot::DenyAll {
                        matched: Matched::configured(resolved, &asked, modes.global_quota),
                        unit: Unit::reported(1, period, 1).1,
                        policy_name: Cow::Borrowed(policy_name),
                    },
                    (None, None) => Slot::Unlimited,
                },
            };
            if let Slot::Limited { matched, .. } = &slot {
                tollgate::store::validate_key(matched.key.as_bytes())
                    .map_err(|source| PlanError::Key { index, source })?;
            }
            if matches!(slot, Slot::None { .. } | Slot::Unlimited) {
                unlimited_keys.push((index, listed));
            }
            slots.push(slot);
        }
        Ok(Plan {
            slots,
            modes,
            unlimited_keys,
            looking: false,
        })
    }
}

/// A planned request: the engine [`Request`] to run, and how to answer from what it settled.
#[derive(Debug)]
pub struct Plan<'l> {
    slots: Vec<Slot<'l>>,
    modes: Modes,
    /// The descriptors the store never sees (no limit, `unlimited`), with what allow and deny
    /// lists match of them.
    unlimited_keys: Vec<(usize, Option<String>)>,
    /// Explain's plan: everything is only looked at, charges and refunds left out.
    looking: bool,
}

impl Plan<'_> {
    /// This plan as explain runs it: the checked descriptors only looked at
    /// ([`Op::Peek`]), charges and refunds left out, so that the store is left as it was.
    #[must_use]
    pub fn looking(mut self) -> Self {
        self.looking = true;
        self
    }

    /// The engine request of the plan, its ops in descriptor order:
    ///
    /// - each limited descriptor checked with the others ([`Op::Check`]; [`Op::Count`] under
    ///   upstream's counting, [`Modes::count_every`]), or only looked at ([`Op::Peek`]) when the
    ///   request is refused without the store or [looked at](Self::looking);
    /// - a descriptor's own `hits_addend` above 0 charged ([`Op::Charge`]): never refused,
    ///   recorded past the limit as upstream counts it; held back under
    ///   [`Modes::stop_when_over`] when the checks refuse the request;
    /// - `is_negative_hits` refunded ([`Op::Refund`]), at most what the policy can hold;
    /// - the address of a descriptor no limit applies to ([`Op::Listed`]): a deny list is
    ///   absolute, whether or not a limit matched.
    pub fn request(&self) -> Request<'_> {
        let spends = !self.looking && self.spends();
        let mut ops = Vec::with_capacity(self.slots.len());
        let mut listed = self.unlimited_keys.iter().peekable();
        for (index, slot) in self.slots.iter().enumerate() {
            match slot {
                Slot::Limited { matched, policy } => {
                    let key = matched.key.as_bytes();
                    match matched.hits {
                        Hits::Checked => {
                            let rule = matched.rule(policy, self.modes);
                            ops.push(match (spends, self.modes.count_every) {
                                (false, _) => Op::Peek(rule),
                                (true, true) => Op::Count(rule),
                                (true, false) => Op::Check(rule),
                            });
                        }
                        _ if self.looking => {}
                        Hits::Charged => ops.push(Op::Charge(Rule::new(policy, key, matched.cost))),
                        Hits::Refunded => {
                            let cost = matched.cost.min(policy.max_cost());
                            ops.push(Op::Refund(Rule::new(policy, key, cost)));
                        }
                    }
                }
                _ => {
                    if let Some((_, Some(key))) = listed.next_if(|(at, _)| *at == index) {
                        ops.push(Op::Listed(key.as_bytes()));
                    }
                }
            }
        }
        let request = Request::new(ops);
        match self.modes.stop_when_over {
            true => request.holding_charges_when_refused(),
            false => request,
        }
    }

    /// Whether the checked descriptors are to be decided and spent; false when the request is
    /// refused without the store, so they are only looked at.
    fn spends(&self) -> bool {
        let modes = self.modes;
        let enforced_refusal = self
            .slots
            .iter()
            .any(|slot| slot.over_at_door() && slot.matched().is_some_and(|m| !m.apart(modes)));
        if enforced_refusal {
            return false;
        }
        if modes.global_shadow || modes.count_every {
            return true;
        }
        // Every quota-mode descriptor over at the door (and none of them in shadow mode, which
        // answers OK): the request is over whatever the store says.
        let mut quota = self.slots.iter().filter(|slot| slot.quota()).peekable();
        let all_over = quota.peek().is_some()
            && quota.all(|slot| slot.over_at_door() && slot.matched().is_some_and(|m| !m.shadow));
        !all_over
    }
}

/// What applies to one descriptor.
#[derive(Debug)]
enum Slot<'l> {
    /// No rate limit; `quota` under global quota mode; `replaced` when one matched but another
    /// descriptor's `replaces` dropped it.
    None { quota: bool, replaced: bool },
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`, stated per `unit`, counted under `policy_name`.
    DenyAll {
        matched: Matched<'l>,
        unit: Unit,
        policy_name: Cow<'l, str>,
    },
    /// A cost above what the policy can ever admit.
    TooLarge {
        matched: Matched<'l>,
        policy: Cow<'l, Policy>,
    },
    /// Decided by the engine.
    Limited {
        matched: Matched<'l>,
        policy: Cow<'l, Policy>,
    },
}

impl<'l> Slot<'l> {
    fn limited(matched: Matched<'l>, policy: Cow<'l, Policy>) -> Self {
        // A charge may go past the limit; a refund gives back at most what was spent.
        if matched.cost > policy.max_cost() && matched.hits == Hits::Checked {
            Slot::TooLarge { matched, policy }
        } else {
            Slot::Limited { matched, policy }
        }
    }

    fn matched(&self) -> Option<&Matched<'l>> {
        match self {
            Slot::DenyAll { matched, .. }
            | Slot::TooLarge { matched, .. }
            | Slot::Limited { matched, .. } => Some(matched),
            Slot::None { .. } | Slot::Unlimited => None,
        }
    }

    fn over_at_door(&self) -> bool {
        matches!(self, Slot::DenyAll { .. } | Slot::TooLarge { .. })
    }

    fn quota(&self) -> bool {
        match self {
            Slot::None { quota, .. } => *quota,
            Slot::Unlimited => false,
            _ => self.matched().is_some_and(|m| m.quota),
        }
    }
}

/// The rate limit a descriptor matched (or its override): where its counter lives and how it is
/// reported.
#[derive(Debug)]
struct Matched<'l> {
    /// The store key.
    key: String,
    /// What allow and deny lists match: the `remote_address` value, else the last entry's.
    list_key: Option<String>,
    /// The rate limit's `name`.
    name: Option<&'l str>,
    /// The descriptor's own `shadow_mode`.
    shadow: bool,
    /// Quota mode: the descriptor's own or the global one.
    quota: bool,
    /// Upstream's stats key.
    stats_key: String,
    metadata: Option<&'l Metadata>,
    /// What the descriptor spends; 0 asks.
    cost: u64,
    /// How it is spent.
    hits: Hits,
    /// How the descriptor matched, for explain.
    kind: Kind,
}

impl<'l> Matched<'l> {
    fn configured(resolved: Resolved<'l>, asked: &Asked, global_quota: bool) -> Self {
        Matched {
            list_key: list_key(&asked.entries),
            name: resolved.name(),
            shadow: resolved.shadow_mode(),
            quota: global_quota || resolved.quota_mode(),
            stats_key: resolved.stats_key().to_owned(),
            metadata: resolved.metadata(),
            cost: asked.cost,
            hits: asked.hits,
            kind: Kind::Configured,
            key: resolved.into_key(),
        }
    }

    fn overridden(domain: &str, asked: Asked, global_quota: bool) -> Self {
        Matched {
            list_key: list_key(&asked.entries),
            stats_key: override_stats_key(domain, &asked.entries),
            key: override_key(domain, &asked.entries),
            name: None,
            shadow: false,
            quota: global_quota,
            metadata: None,
            cost: asked.cost,
            hits: asked.hits,
            kind: Kind::LimitOverride,
        }
    }

    /// Whether its denial leaves the rest of the request to be decided on its own.
    fn apart(&self, modes: Modes) -> bool {
        self.shadow || self.quota || modes.global_shadow || modes.count_every
    }

    /// The descriptor as an engine rule; a question (cost 0) asks whether the key is past its
    /// limit.
    fn rule<'p>(&'p self, policy: &'p Policy, modes: Modes) -> Rule<'p> {
        let mut rule = Rule::new(policy, self.key.as_bytes(), self.cost);
        if let Some(listed) = &self.list_key {
            rule = rule.with_list_key(listed.as_bytes());
        }
        rule.question = self.cost == 0;
        if self.shadow || modes.global_shadow {
            rule.as_shadow()
        } else if self.quota {
            rule.apart(Apart::Quota)
        } else if modes.count_every {
            rule.apart(Apart::Alone)
        } else {
            rule
        }
    }
}

/// What allow and deny lists match for a descriptor: its `remote_address` value, else its last
/// entry's value (`None` for an empty value).
fn list_key(entries: &[(String, String)]) -> Option<String> {
    entries
        .iter()
        .find(|(key, _)| key == "remote_address")
        .or_else(|| entries.last())
        .map(|(_, value)| value.clone())
        .filter(|value| !value.is_empty())
}

/// Upstream's stats key of a limit override: the domain, then each entry as `key_value` (or
/// `key` for an empty value), joined by `.`.
fn override_stats_key(domain: &str, entries: &[(String, String)]) -> String {
    let mut out = domain.to_owned();
    for (key, value) in entries {
        out.push('.');
        out.push_str(key);
        if !value.is_empty() {
            out.push('_');
            out.push_str(value);
        }
    }
    out
}
