//! Hot-key leases (see [`tollgate::lease`]): an instance that sees one key of a leasing policy
//! hot takes `k` units of its budget from Redis in one script call and admits from them locally,
//! without a round trip.
//!
//! How a decision on a leasing policy goes (only a single enforced rule that spends; peeks,
//! questions, shadow rules and requests of several rules go to Redis as always, and see the
//! leased units as spent):
//!
//! 1. The lease table counts the key's units decided in the current hold period (the rate).
//! 2. If this instance holds a lease of the key that has not ended and covers the cost, the cost
//!    is taken from it: allowed, no round trip.
//! 3. Otherwise, a denial the deny cache holds answers as usual.
//! 4. Otherwise one call of the lease script: it gives back the unused units of the ended or
//!    spent-down lease, and takes the cost plus, when the key is hot and no other lease call of
//!    it is on its way from this instance, up to `k - cost` more, where `k` is the units this
//!    instance decided on the key in the last hold period, at most `max_units`. Not hot: the call
//!    takes exactly the cost, which is the plain decision.
//!
//! A lease ends after the hold period and, on a fixed window, with its window (Redis tells how
//! long the window has left; the local end is counted from when the call was sent, so it is never
//! later than the window's end). Unused units of a fixed window lease that ended with its window
//! are gone with the window; others go back with the key's next call.
//!
//! Why the bounds hold: every unit an instance admits locally was debited in Redis before, so
//! admitted ≤ what Redis counts ≤ limit. Each instance holds at most `max_units` unspent units of
//! a key at any time (one lease call per key at once, and a new lease gives the old one's rest
//! back in the same call), and Redis denies a call only when its budget cannot cover the cost.
//! So while a request is denied, the budget a perfect limiter would still offer is Redis's
//! remainder (less than the cost) plus the unspent leases: at most `instances × max_units` units
//! in a window or refill period are denied that a perfect limiter would have admitted.
//!
//! Resets and penalties: a reset forgets this instance's lease of the key, and the reset message
//! (`reset_channel`) makes every other instance forget its own. A denial from Redis on a policy
//! with `block_for` starts a penalty in Redis; the instance publishes a "drop the lease" message
//! on the same channel, so the other instances stop admitting from their leases one pub/sub hop
//! later (until then they may admit at most their unspent lease units).
//!
//! The table is bounded: it tracks at most a fixed number of keys; when full, keys without
//! unspent units make room, and a key that finds no room is decided call by call.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tollgate::algorithm::StepDecision;
use tollgate::{Algorithm, Clock, Decision, Error, LeaseOptions, Policy, Rule};

use crate::deny_cache::{Denial, DenyCache};
use crate::error::bad_reply;
use crate::keys::KeyNames;
use crate::scripts::{Mode, call_args};
use crate::transport::Transport;

const SHARDS: usize = 16;

/// The first byte of a reset-channel message that asks every instance to drop its lease of a key
/// (a penalty started): Redis key prefixes are text, so no state key starts with it.
pub(crate) const DROP_LEASE: u8 = 0xff;

/// Running totals of the lease path, since the store was built.
///
/// ```
/// let stats = tollgate_redis::LeaseStats::default();
/// assert_eq!(stats.local_decisions, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseStats {
    /// Decisions admitted from a local lease, without a round trip.
    pub local_decisions: u64,
    /// Lease script calls (leases taken, and decisions of leasing policies on keys not hot).
    pub calls: u64,
    /// Units taken beyond the costs of the calls' own requests: leased.
    pub units_leased: u64,
    /// Unused units sent back to Redis with a later call.
    pub units_given_back: u64,
    /// Unused units dropped: their lease ended with its fixed window, or a reset or penalty
    /// made the instance forget it.
    pub units_dropped: u64,
}

#[derive(Default)]
struct Counters {
    local_decisions: AtomicU64,
    calls: AtomicU64,
    units_leased: AtomicU64,
    units_given_back: AtomicU64,
    units_dropped: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64) {
    if n > 0 {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// One key's lease and rate on this instance.
struct Entry {
    /// Unspent leased units.
    units: u64,
    /// Local time (µs) the lease ends.
    ends_at_us: u64,
    /// Where the lease counted in Redis (a fixed window's start), for giving units back.
    mark: u64,
    /// Redis's remaining budget right after the lease was taken, for `remaining`.
    store_remaining: u64,
    /// Local time (µs) the budget is full again if nothing else is spent, as the call said.
    reset_at_us: u64,
    /// Which lease call is on its way (`Some`), so that only one is; a reset drops the entry and
    /// with it the claim of the call.
    taking: Option<u64>,
    /// Units decided in the current hold period, and in the one before.
    period_start_us: u64,
    period_units: u64,
    last_period_units: u64,
}

impl Entry {
    fn new(now_us: u64) -> Self {
        Entry {
            units: 0,
            ends_at_us: 0,
            mark: 0,
            store_remaining: 0,
            reset_at_us: 0,
            taking: None,
            period_start_us: now_us,
            period_units: 0,
            last_period_units: 0,
        }
    }
}

/// What the lease table says to do with a request.
enum Plan {
    /// Admitted from the lease.
    Spent(Decision),
    /// A denial the deny cache holds.
    Cached(Denial),
    /// Call the lease script.
    Call(Call),
}

#[derive(Debug, Clone, Copy)]
struct Call {
    want: u64,
    give_back: u64,
    mark: u64,
    /// The ticket of this lease call, when the grant may exceed the cost and is to be kept.
    ticket: Option<u64>,
}

/// Every key's lease on this instance, bounded and sharded.
pub(crate) struct Leases {
    shards: Vec<Mutex<HashMap<Vec<u8>, Entry>>>,
    hasher: RandomState,
    per_shard: usize,
    next_ticket: AtomicU64,
    stats: Counters,
}

impl Leases {
    pub(crate) fn new(max_keys: usize) -> Self {
        Leases {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            per_shard: (max_keys / SHARDS).max(1),
            next_ticket: AtomicU64::new(1),
            stats: Counters::default(),
        }
    }

    pub(crate) fn stats(&self) -> LeaseStats {
        let c = &self.stats;
        LeaseStats {
            local_decisions: c.local_decisions.load(Ordering::Relaxed),
            calls: c.calls.load(Ordering::Relaxed),
            units_leased: c.units_leased.load(Ordering::Relaxed),
            units_given_back: c.units_given_back.load(Ordering::Relaxed),
            units_dropped: c.units_dropped.load(Ordering::Relaxed),
        }
    }

    /// Forgets the lease of `state` (a reset, or a penalty started elsewhere): its unspent units
    /// are dropped, and a lease call on its way is not kept.
    pub(crate) fn forget(&self, state: &[u8]) {
        if let Some(entry) = self.shard(state).lock().remove(state) {
            add(&self.stats.units_dropped, entry.units);
        }
    }

    /// Forgets every lease: after a gap in the reset channel, when a reset may have been missed.
    pub(crate) fn forget_all(&self) {
        for shard in &self.shards {
            let mut shard = shard.lock();
            add(&self.stats.units_dropped, shard.values().map(|e| e.units).sum());
            shard.clear();
        }
    }

    fn shard(&self, state: &[u8]) -> &Mutex<HashMap<Vec<u8>, Entry>> {
        &self.shards[self.hasher.hash_one(state) as usize % SHARDS]
    }

    /// Counts the request and decides how to answer it; see the module docs.
    fn plan(
        &self,
        state: &[u8],
        policy: &Policy,
        options: &LeaseOptions,
        cost: u64,
        now_us: u64,
        deny_cache: Option<&DenyCache>,
    ) -> Plan {
        let cached = || deny_cache.and_then(|c| c.get(state, policy, cost, now_us));
        let plain = Call {
            want: cost,
            give_back: 0,
            mark: 0,
            ticket: None,
        };
        let mut shard = self.shard(state).lock();
        if !shard.contains_key(state) {
            if shard.len() >= self.per_shard {
                // Make room: keys holding nothing and idle for two periods go first.
                let stale_before = now_us.saturating_sub(2 * options.hold_us());
                shard.retain(|_, e| e.units > 0 || e.taking.is_some() || e.period_start_us >= stale_before);
            }
            if shard.len() >= self.per_shard {
                drop(shard);
                return cached().map_or(Plan::Call(plain), Plan::Cached);
            }
            shard.insert(state.to_vec(), Entry::new(now_us));
        }
        let Some(entry) = shard.get_mut(state) else {
            drop(shard);
            return cached().map_or(Plan::Call(plain), Plan::Cached);
        };
        let hold_us = options.hold_us();
        if now_us >= entry.period_start_us.saturating_add(hold_us) {
            let next_period = now_us < entry.period_start_us.saturating_add(2 * hold_us);
            entry.last_period_units = if next_period { entry.period_units } else { 0 };
            entry.period_units = 0;
            entry.period_start_us = now_us;
        }
        entry.period_units = entry.period_units.saturating_add(cost);
        if now_us < entry.ends_at_us && entry.units >= cost {
            entry.units -= cost;
            add(&self.stats.local_decisions, 1);
            return Plan::Spent(Decision {
                allowed: true,
                limit: policy.max_cost(),
                remaining: entry.store_remaining.saturating_add(entry.units),
                reset_after: Duration::from_micros(entry.reset_at_us.saturating_sub(now_us)),
                retry_after: None,
                degraded: false,
            });
        }
        if let Some(denial) = cached() {
            return Plan::Cached(denial);
        }
        if entry.taking.is_some() {
            // Another request is taking this key's lease: decide this one on its own.
            return Plan::Call(plain);
        }
        // The lease (if any) has ended or cannot cover the cost: its rest goes back with this
        // call, unless it ended with its fixed window, which took the units along.
        let mut call = plain;
        if entry.units > 0 {
            let window_over = matches!(policy.algorithm(), Algorithm::FixedWindow(_))
                && now_us >= entry.ends_at_us
                && now_us >= entry.reset_at_us;
            if window_over {
                add(&self.stats.units_dropped, entry.units);
            } else {
                call.give_back = entry.units;
                call.mark = entry.mark;
            }
            entry.units = 0;
        }
        let rate = entry.last_period_units.max(entry.period_units);
        if rate >= options.hot_per_hold() {
            let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
            entry.taking = Some(ticket);
            call.want = rate.clamp(1, options.max_units()).max(cost);
            call.ticket = Some(ticket);
        }
        Plan::Call(call)
    }

    /// Keeps the units a lease call granted beyond the cost, if its claim still stands.
    fn keep(&self, state: &[u8], ticket: u64, grant: Option<Grant>) {
        let mut shard = self.shard(state).lock();
        let Some(entry) = shard.get_mut(state).filter(|e| e.taking == Some(ticket)) else {
            // Forgotten meanwhile (a reset or a penalty): the grant may predate it.
            if let Some(grant) = grant {
                add(&self.stats.units_dropped, grant.units);
            }
            return;
        };
        entry.taking = None;
        if let Some(grant) = grant {
            entry.units = grant.units;
            entry.ends_at_us = grant.ends_at_us;
            entry.mark = grant.mark;
            entry.store_remaining = grant.store_remaining;
            entry.reset_at_us = grant.reset_at_us;
        }
    }
}

/// A lease call's claim on its key: if the call is abandoned (its future dropped), the claim is
/// released so that the key can lease again; what the call may have taken is lost.
struct Claim<'a> {
    leases: &'a Leases,
    state: &'a [u8],
    ticket: Option<u64>,
}

impl Claim<'_> {
    fn settle(mut self, grant: Option<Grant>) {
        if let Some(ticket) = self.ticket.take() {
            self.leases.keep(self.state, ticket, grant);
        }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.leases.keep(self.state, ticket, None);
        }
    }
}

/// The units a lease call left for later.
#[derive(Debug, Clone, Copy)]
struct Grant {
    units: u64,
    ends_at_us: u64,
    mark: u64,
    store_remaining: u64,
    reset_at_us: u64,
}

/// What a decision on the lease path uses besides the lease table.
pub(crate) struct Context<'a> {
    pub(crate) transport: &'a Transport,
    pub(crate) keys: &'a KeyNames,
    pub(crate) deny_cache: Option<&'a DenyCache>,
    /// Local time, for the leases and the deny cache.
    pub(crate) clock: &'a dyn Clock,
}

/// Decides one enforced, spending rule of a leasing policy; see the module docs.
pub(crate) async fn decide(
    leases: &Leases,
    context: Context<'_>,
    rule: &Rule<'_>,
    options: &LeaseOptions,
) -> Result<Decision, Error> {
    let Context {
        transport,
        keys,
        deny_cache,
        clock,
    } = context;
    let policy = rule.policy;
    let cost = rule.cost;
    let state = keys.state(policy.hash_tag(), policy.name(), rule.key);
    let sent_at_us = clock.now_us();
    let call = match leases.plan(&state, policy, options, cost, sent_at_us, deny_cache) {
        Plan::Spent(decision) => return Ok(decision),
        Plan::Cached(denial) => return Ok(denial.decision(policy, sent_at_us)),
        Plan::Call(call) => call,
    };
    let claim = Claim {
        leases,
        state: &state,
        ticket: call.ticket,
    };
    add(&leases.stats.calls, 1);
    add(&leases.stats.units_given_back, call.give_back);
    let mut args = call_args(transport.script_now(), Mode::Lease, [(rule, 0)].into_iter());
    args.extend([
        call.want.to_string(),
        call.give_back.to_string(),
        call.mark.to_string(),
    ]);
    let reply = transport
        .call::<Vec<u64>>(
            &transport.scripts().lease,
            &[state.clone(), KeyNames::override_of(&state)],
            &args,
        )
        .await;
    let reply = match reply.and_then(|r| parse(&r)) {
        Ok(reply) => reply,
        Err(err) => {
            // The call may have run: whatever it granted or took back is lost, never spent twice.
            claim.settle(None);
            return Err(err);
        }
    };
    let (outcome, granted, mark) = reply;
    let kept = granted.saturating_sub(cost);
    add(&leases.stats.units_leased, kept);
    {
        let grant = (kept > 0).then(|| {
            let mut ends_at_us = sent_at_us.saturating_add(options.hold_us());
            if matches!(policy.algorithm(), Algorithm::FixedWindow(_)) {
                // A fixed window's reset_after is the time left in its window.
                ends_at_us = ends_at_us.min(sent_at_us.saturating_add(outcome.reset_after_us));
            }
            Grant {
                units: kept,
                ends_at_us,
                mark,
                store_remaining: outcome.remaining,
                reset_at_us: sent_at_us.saturating_add(outcome.reset_after_us),
            }
        });
        claim.settle(grant);
    }
    let mut decision = Decision::from_step(outcome, policy.max_cost());
    decision.remaining = decision.remaining.saturating_add(kept);
    if let Some(retry_us) = outcome.retry_after_us {
        if let Some(cache) = deny_cache {
            let denial = Denial::new(policy, cost, sent_at_us, retry_us, outcome.reset_after_us);
            cache.insert(&state, denial, sent_at_us);
        }
        if policy.block_for().is_some() {
            // A penalty started: no instance may keep admitting this key from its lease.
            leases.forget(&state);
            let mut message = Vec::with_capacity(state.len() + 1);
            message.push(DROP_LEASE);
            message.extend_from_slice(&state);
            transport.publish(&message).await;
        }
    }
    Ok(decision)
}

/// The request's outcome, the units granted and the grant's mark (see `lua/lease.lua`).
fn parse(reply: &[u64]) -> Result<(StepDecision, u64, u64), Error> {
    match reply {
        &[
            allowed,
            remaining,
            reset_after_us,
            retry_after_us,
            _limit,
            granted,
            mark,
        ] => Ok((
            StepDecision {
                allowed: allowed == 1,
                remaining,
                reset_after_us,
                retry_after_us: (allowed != 1).then_some(retry_after_us),
            },
            granted,
            mark,
        )),
        _ => Err(bad_reply(reply)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::Anchor;

    fn policy(max_units: u64) -> (Policy, LeaseOptions) {
        let options = LeaseOptions::new(max_units).unwrap().hot_per_second(10).unwrap();
        let algorithm = Algorithm::fixed_window(1000, Duration::from_secs(1), Anchor::Epoch).unwrap();
        let policy = Policy::new("p", algorithm).unwrap().with_lease(options).unwrap();
        (policy, options)
    }

    fn call(plan: Plan) -> Call {
        match plan {
            Plan::Call(call) => call,
            _ => panic!("expected a call"),
        }
    }

    #[test]
    fn cold_keys_are_decided_call_by_call() {
        let (policy, options) = policy(50);
        // 100 per second over 100 ms: the tenth request in a period makes the key hot.
        let options = options.hot_per_second(100).unwrap();
        let leases = Leases::new(100);
        for _ in 0..9 {
            let plain = call(leases.plan(b"k", &policy, &options, 1, 0, None));
            assert_eq!((plain.want, plain.ticket), (1, None));
        }
        let hot = call(leases.plan(b"k", &policy, &options, 1, 0, None));
        assert_eq!(hot.want, 10);
        assert!(hot.ticket.is_some());
    }

    #[test]
    fn a_hot_key_leases_what_it_used_last_period_at_most_max_units() {
        let (policy, options) = policy(50);
        let leases = Leases::new(100);
        // 10 per second over 100 ms is 1 per period: the first request already makes it hot.
        let first = call(leases.plan(b"k", &policy, &options, 1, 0, None));
        assert_eq!(first.want, 1);
        let ticket = first.ticket.expect("a lease call");
        let second = call(leases.plan(b"k", &policy, &options, 1, 0, None));
        assert_eq!(second.ticket, None, "one lease call at a time");
        leases.keep(b"k", ticket, None);
        for _ in 0..200 {
            let _ = leases.plan(b"k", &policy, &options, 1, 10, None);
            let taking = leases
                .shard(b"k")
                .lock()
                .get(b"k".as_slice())
                .and_then(|e| e.taking);
            if let Some(ticket) = taking {
                leases.keep(b"k", ticket, None);
            }
        }
        let next = call(leases.plan(b"k", &policy, &options, 1, 150_000, None));
        assert_eq!(next.want, 50, "capped by max_units");
    }

    #[test]
    fn a_lease_is_spent_locally_and_its_rest_goes_back() {
        let (policy, options) = policy(50);
        let leases = Leases::new(100);
        let ticket = call(leases.plan(b"k", &policy, &options, 1, 0, None))
            .ticket
            .unwrap();
        let grant = Grant {
            units: 3,
            ends_at_us: 100,
            mark: 7,
            store_remaining: 10,
            reset_at_us: 1_000,
        };
        leases.keep(b"k", ticket, Some(grant));
        for _ in 0..3 {
            assert!(matches!(
                leases.plan(b"k", &policy, &options, 1, 50, None),
                Plan::Spent(d) if d.allowed
            ));
        }
        let next = call(leases.plan(b"k", &policy, &options, 1, 50, None));
        assert_eq!(next.give_back, 0, "spent down");
        leases.keep(b"k", next.ticket.unwrap(), Some(Grant { units: 2, ..grant }));
        // Ended by the hold period, inside its window: the rest goes back.
        let after = call(leases.plan(b"k", &policy, &options, 1, 200, None));
        assert_eq!((after.give_back, after.mark), (2, 7));
    }

    #[test]
    fn a_forgotten_lease_keeps_nothing_of_a_call_on_its_way() {
        let (policy, options) = policy(50);
        let leases = Leases::new(100);
        let ticket = call(leases.plan(b"k", &policy, &options, 1, 0, None))
            .ticket
            .unwrap();
        leases.forget(b"k");
        let grant = Grant {
            units: 5,
            ends_at_us: 100,
            mark: 0,
            store_remaining: 0,
            reset_at_us: 100,
        };
        leases.keep(b"k", ticket, Some(grant));
        assert!(matches!(
            leases.plan(b"k", &policy, &options, 1, 1, None),
            Plan::Call(_)
        ));
        assert_eq!(leases.stats().units_dropped, 5);
    }

    #[test]
    fn an_abandoned_lease_call_lets_the_key_lease_again() {
        let (policy, options) = policy(50);
        let leases = Leases::new(100);
        let first = call(leases.plan(b"k", &policy, &options, 1, 0, None));
        drop(Claim {
            leases: &leases,
            state: b"k",
            ticket: first.ticket,
        });
        let again = call(leases.plan(b"k", &policy, &options, 1, 0, None));
        assert!(again.ticket.is_some(), "the dropped call released its claim");
    }

    #[test]
    fn stays_bounded() {
        let (policy, options) = policy(50);
        let leases = Leases::new(SHARDS * 2);
        for i in 0..1_000u32 {
            let _ = leases.plan(&i.to_be_bytes(), &policy, &options, 1, 0, None);
        }
        let total: usize = leases.shards.iter().map(|s| s.lock().len()).sum();
        assert!(total <= SHARDS * 2);
    }
}
