//! [`Rule`]: one limit a request is subject to. A request is a list of rules, decided together
//! by a store ([`Store::decide`](crate::Store::decide)) or, with failure modes and outcome
//! labels, by the [`Engine`](crate::Engine).

use crate::Policy;

/// One limit of a request: spend `cost` of `key`'s budget under `policy`.
///
/// A shadow rule is decided and recorded like any other, but its denial never denies the
/// request: it is how a new limit is tried on live traffic before it is enforced.
///
/// ```
/// use tollgate::{Algorithm, Policy, Rate, Rule};
///
/// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?;
/// let rule = Rule::new(&api, b"203.0.113.9", 1);
/// assert!(!rule.shadow);
/// assert!(rule.as_shadow().shadow);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Rule<'a> {
    /// The policy whose budget is spent.
    pub policy: &'a Policy,
    /// Whose budget: an IP, a user id, a tenant.
    pub key: &'a [u8],
    /// How much of it: at least 1, at most the policy's [`max_cost`](Policy::max_cost).
    pub cost: u64,
    /// Decide and record, but never deny the request.
    pub shadow: bool,
    /// Ask without spending: the rule is decided as the budget stands before the request (an
    /// enforced question that would be denied denies the request), and it never spends nor
    /// starts a penalty. A question of cost 0 asks whether the key is past its limit (in debt
    /// after a [charge](crate::Store::charge)): a budget exactly spent is not. Envoy's
    /// `hits_addend: 0`.
    pub question: bool,
    /// What allow and deny lists match instead of `key`, when the key a door counts under is
    /// not the one an operator lists (the gRPC door counts a descriptor's encoded path, and
    /// lists its client address). `None`: `key`.
    pub list_key: Option<&'a [u8]>,
    /// Decided on its own, not all or nothing with the request's other rules; `None` for the
    /// usual rule. Ignored on a shadow rule (it never denies anyway).
    pub apart: Option<Apart>,
}

/// How a rule decided on its own weighs on its request.
///
/// The store decides such a rule as it decides a shadow rule (it spends when it fits, and its
/// denial stops nothing else from spending); the [`Engine`](crate::Engine) then labels its
/// denial [`Outcome::Denied`](crate::Outcome::Denied) and lets it deny the request:
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Apart, Engine, MemoryStore, Outcome, Policy, Rule};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::new(MemoryStore::new());
/// let one = Policy::new("one", Algorithm::sliding_log(1, Duration::from_secs(60))?)?;
/// let ten = Policy::new("ten", Algorithm::sliding_log(10, Duration::from_secs(60))?)?;
/// let rules = [Rule::new(&one, "k", 1).apart(Apart::Alone), Rule::new(&ten, "k", 1).apart(Apart::Alone)];
/// assert!(engine.check_all(&rules).await?.allowed());
/// let second = engine.check_all(&rules).await?;
/// assert_eq!(second.outcome(), Outcome::Denied);
/// // The rule that fitted spent anyway: 10 - 2 left.
/// assert_eq!(second.rules()[1].decision.remaining, 8);
///
/// // Quota rules deny the request only all together.
/// let quota = [Rule::new(&one, "q", 1).apart(Apart::Quota), Rule::new(&ten, "q", 1).apart(Apart::Quota)];
/// engine.check_all(&quota).await?;
/// let verdict = engine.check_all(&quota).await?;
/// assert_eq!(verdict.rules()[0].outcome, Outcome::Denied);
/// assert!(verdict.allowed(), "the other quota rule still fits");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apart {
    /// Its denial denies the request, and the other rules spend anyway: every rule counts on
    /// its own (envoyproxy/ratelimit's way of counting descriptors).
    Alone,
    /// The request is denied when every quota rule of it is denied; one quota rule over is only
    /// reported (Envoy's quota mode).
    Quota,
}

impl<'a> Rule<'a> {
    /// An enforced rule.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("p", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert_eq!(tollgate::Rule::new(&policy, "k", 1).key, b"k");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn new(policy: &'a Policy, key: &'a (impl AsRef<[u8]> + ?Sized), cost: u64) -> Self {
        Rule {
            policy,
            key: key.as_ref(),
            cost,
            shadow: false,
            question: false,
            list_key: None,
            apart: None,
        }
    }

    /// The same rule in shadow mode.
    #[inline]
    pub fn as_shadow(mut self) -> Self {
        self.shadow = true;
        self
    }

    /// The same rule, decided on its own as `apart` says.
    #[inline]
    pub fn apart(mut self, apart: Apart) -> Self {
        self.apart = Some(apart);
        self
    }

    /// The same rule as a question: decided, never spent.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("p", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert!(tollgate::Rule::new(&policy, "k", 1).as_question().question);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn as_question(mut self) -> Self {
        self.question = true;
        self
    }

    /// The same rule, with `list_key` matched by allow and deny lists instead of the key.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("p", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// let rule = tollgate::Rule::new(&policy, "5:edge,...", 1).with_list_key(b"203.0.113.9");
    /// assert_eq!(rule.listed_key(), b"203.0.113.9");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn with_list_key(mut self, list_key: &'a [u8]) -> Self {
        self.list_key = Some(list_key);
        self
    }

    /// What allow and deny lists match: `list_key`, else `key`.
    #[inline]
    pub fn listed_key(&self) -> &'a [u8] {
        self.list_key.unwrap_or(self.key)
    }

    /// Whether a denial of this rule is only reported (a shadow rule, or a rule decided apart
    /// once the store has decided it as one).
    #[inline]
    pub(crate) fn never_denies(&self) -> bool {
        self.shadow && self.apart.is_none()
    }

    /// Whether `other` spends from the same budget (same policy name, same key), so that the
    /// two count as one rule with the sum of their costs. Questions spend nothing and are never
    /// merged: each is answered as the budget stands before the request.
    #[inline]
    pub(crate) fn same_budget(&self, other: &Rule<'_>) -> bool {
        !self.question
            && !other.question
            && self.key == other.key
            && self.policy.name() == other.policy.name()
    }
}
