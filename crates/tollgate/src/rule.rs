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
    /// starts a penalty. Envoy's `hits_addend: 0`.
    pub question: bool,
    /// What allow and deny lists match instead of `key`, when the key a door counts under is
    /// not the one an operator lists (the gRPC door counts a descriptor's encoded path, and
    /// lists its client address). `None`: `key`.
    pub list_key: Option<&'a [u8]>,
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
        }
    }

    /// The same rule in shadow mode.
    #[inline]
    pub fn as_shadow(mut self) -> Self {
        self.shadow = true;
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
