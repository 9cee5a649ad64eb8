//! How every call reaches Redis: the connection, the scripts, a deadline on each call, the
//! circuit breaker of each node, the batch lanes of decisions, and publishing on the reset
//! channel. The store and each of its features (leases, overrides, concurrency, access lists)
//! talk to Redis only through a [`Transport`], and the transport knows nothing of them.
//!
//! A script call goes through three layers:
//!
//! 1. the circuit breaker of the node that serves the keys refuses it at once while that node
//!    is known to be down;
//! 2. a deadline bounds it, and a call that missed it is never sent again (it may have run; a
//!    decision is applied at most once);
//! 3. decisions waiting for the same node (or cluster slot) while calls are out there go out
//!    together as one batch call, each keeping its own deadline (see `batch`).
//!
//! Decisions of a policy that waits for replicas go the same way, in lanes of their own, with
//! `WAIT` behind each call (see `connection::Wait`), on a second connection: Redis holds a
//! connection's later commands while a `WAIT` waits, and decisions that wait for none must
//! never wait behind it. Their deadline is the store's plus the policy's wait for its replicas
//! (`connection::ReplicaWait`): the calls that wait on one node queue behind each other's
//! `WAIT`, so under load a healthy replica's acknowledgement can come later than the store's
//! deadline, and it is the replica's lateness that the wait bounds, not the node's. A second
//! breaker per node and number of replicas remembers replicas that fell short; until its probe
//! is acknowledged, those calls go on the main connection without waiting (see `breaker`).
//!
//! A failure is returned as a typed store error with the Redis error as its source.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{RedisResult, Script};
use tollgate::{Clock, Error, StoreErrorKind};

use crate::batch::{self, Failure, Job, LaneKey, Lanes};
use crate::breaker::{Admission, Breakers, Watch};
use crate::connection::{self, ConnectOptions, Connection, ReplicaWait, Replied, Target, Wait};
use crate::error::{self, ConnectError};
use crate::keys::{self, KeyNames};
use crate::scripts::Scripts;
use crate::state_loss::{Mark, StateLoss};

/// What a transport is built with.
pub(crate) struct Settings {
    /// Deadline of each call.
    pub(crate) timeout: Duration,
    pub(crate) first_probe_after: Duration,
    pub(crate) probe_interval: Duration,
    /// Decision calls in flight per lane before decisions queue for a batch; 0: no batching.
    pub(crate) calls_in_flight: usize,
    /// Time passed to scripts; `None` means Redis `TIME`.
    pub(crate) script_clock: Option<Arc<dyn Clock>>,
    /// Where [`Transport::publish`] publishes.
    pub(crate) reset_channel: String,
    /// The store's key names, for the slots' sequences (see `state_loss`).
    pub(crate) names: KeyNames,
}

/// The calls to Redis, shared by the store and its features.
pub(crate) struct Transport {
    connection: Connection,
    /// Calls followed by `WAIT`, on a connection of their own: Redis holds a connection's later
    /// commands while its `WAIT` waits, so a replica slow to acknowledge must not hold up the
    /// decisions that wait for none. Made on first use.
    waiting: Connection,
    scripts: Scripts,
    timeout: Duration,
    /// One circuit breaker per Redis node.
    breakers: Breakers,
    /// One per Redis node and number of replicas, for the calls that wait for them.
    replicas: Breakers,
    /// The decisions waiting to go out together, per node or slot (`None`: one call each).
    lanes: Option<Lanes>,
    script_clock: Option<Arc<dyn Clock>>,
    reset_channel: String,
    counters: Counters,
    /// What the decisions' answers tell of each slot's sequence (see `state_loss`).
    state_loss: StateLoss,
}

/// Running totals of the calls, since the transport was built.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CallCounts {
    pub(crate) redis_calls: u64,
    pub(crate) redis_unavailable: u64,
    pub(crate) breaker_refusals: u64,
    pub(crate) publish_failures: u64,
    pub(crate) batch_calls: u64,
    pub(crate) batched_decisions: u64,
    pub(crate) failovers: u64,
}

#[derive(Default)]
struct Counters {
    redis_calls: AtomicU64,
    redis_unavailable: AtomicU64,
    breaker_refusals: AtomicU64,
    publish_failures: AtomicU64,
    batch_calls: AtomicU64,
    batched_decisions: AtomicU64,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Transport {
    /// Prepares the connection; unless `lazy`, connects and loads every script and the
    /// function library now, so an unreachable Redis is an error now.
    pub(crate) async fn open(
        target: &Target,
        options: &ConnectOptions,
        settings: Settings,
        lazy: bool,
    ) -> Result<Self, ConnectError> {
        let connection = Connection::open(
            target,
            settings.timeout.max(Duration::from_millis(1)),
            lazy,
            options,
        )
        .await?;
        let timeout = settings.timeout.max(Duration::from_millis(1));
        let waiting = connection
            .another(
                target,
                timeout,
                timeout + tollgate::bounds::MAX_REPLICA_WAIT,
                options,
            )
            .await?;
        let scripts = Scripts::new();
        if !lazy {
            let mut conn = connection.clone();
            for script in scripts.all() {
                script
                    .load_async(&mut conn)
                    .await
                    .map_err(|err| scripting(target, err))?;
            }
            match connection::load_library(&scripts.library, &mut conn).await {
                Ok(()) => {}
                Err(err) if connection::no_functions(&err) => scripts.library.unusable(),
                Err(err) => return Err(err.into()),
            }
        }
        Ok(Transport {
            connection,
            waiting,
            scripts,
            timeout: settings.timeout,
            breakers: Breakers::new(Watch::Node, settings.first_probe_after, settings.probe_interval),
            replicas: Breakers::new(
                Watch::Replicas,
                settings.first_probe_after,
                settings.probe_interval,
            ),
            lanes: (settings.calls_in_flight > 0).then(|| Lanes::new(settings.calls_in_flight)),
            script_clock: settings.script_clock,
            reset_channel: settings.reset_channel,
            counters: Counters::default(),
            state_loss: StateLoss::new(settings.names),
        })
    }

    /// Every script the store calls.
    pub(crate) fn scripts(&self) -> &Scripts {
        &self.scripts
    }

    /// The deadline of each call.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether this is a Redis Cluster, where one script call only reaches the keys of one slot.
    pub(crate) fn is_cluster(&self) -> bool {
        self.connection.is_cluster()
    }

    pub(crate) fn counts(&self) -> CallCounts {
        let c = &self.counters;
        CallCounts {
            redis_calls: c.redis_calls.load(Ordering::Relaxed),
            redis_unavailable: c.redis_unavailable.load(Ordering::Relaxed),
            breaker_refusals: c.breaker_refusals.load(Ordering::Relaxed),
            publish_failures: c.publish_failures.load(Ordering::Relaxed),
            batch_calls: c.batch_calls.load(Ordering::Relaxed),
            batched_decisions: c.batched_decisions.load(Ordering::Relaxed),
            failovers: self.connection.failovers(),
        }
    }

    /// How many times a decision found its slot's state older than this instance had seen it
    /// (see `state_loss`).
    pub(crate) fn state_lost(&self) -> u64 {
        self.state_loss.lost()
    }

    /// True while a circuit breaker is open.
    pub(crate) fn any_breaker_open(&self) -> bool {
        self.breakers.any_open()
    }

    /// Each node called so far and whether its circuit breaker is open, sorted by node.
    pub(crate) fn breaker_states(&self) -> Vec<(String, bool)> {
        self.breakers.states()
    }

    /// The time argument of a script call: the script clock's, or empty for Redis `TIME`.
    pub(crate) fn script_now(&self) -> String {
        match &self.script_clock {
            Some(clock) => clock.now_us().to_string(),
            None => String::new(),
        }
    }

    /// The scripts' time in µs since the Unix epoch: the script clock's, or Redis `TIME` read
    /// on `conn`.
    pub(crate) async fn script_time_us(&self, conn: &mut Connection) -> RedisResult<u64> {
        match &self.script_clock {
            Some(clock) => Ok(clock.now_us()),
            None => {
                let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
                Ok(secs * 1_000_000 + micros)
            }
        }
    }

    /// Runs a script through its node's breaker and the deadline, at most once (see
    /// `connection`).
    pub(crate) async fn call<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[Vec<u8>],
        args: &[String],
    ) -> Result<T, Error> {
        self.try_call(script, keys, args, self.timeout, ReplicaWait::NONE)
            .await
            .map(|replied| replied.value)
            .map_err(Failure::into_error)
    }

    /// Plain commands on the shared connection, bounded together by the deadline. They bypass
    /// the breaker.
    pub(crate) async fn within_deadline<T, F>(&self, run: impl FnOnce(Connection) -> F) -> Result<T, Error>
    where
        F: Future<Output = RedisResult<T>>,
    {
        match tokio::time::timeout(self.timeout, run(self.connection.clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(error::store_error(err)),
            Err(_) => Err(error::store_error(error::deadline(self.timeout))),
        }
    }

    /// One plain command, bounded by the deadline.
    pub(crate) async fn command<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        self.within_deadline(|mut conn| async move { cmd.query_async::<T>(&mut conn).await })
            .await
    }

    /// Publishes `message` on the reset channel (see `reset_channel`); a message that cannot be
    /// sent within the deadline is counted and dropped.
    pub(crate) async fn publish(&self, message: &[u8]) {
        let mut conn = self.connection.clone();
        let publish = redis::cmd("PUBLISH")
            .arg(&self.reset_channel)
            .arg(message)
            .clone();
        let sent = tokio::time::timeout(self.timeout, publish.query_async::<u64>(&mut conn)).await;
        if !matches!(sent, Ok(Ok(_))) {
            add(&self.counters.publish_failures, 1);
        }
    }

    /// Loads the decision script within `within`, bypassing the breaker: an error answer that
    /// says the server cannot run Lua is [`ConnectError::NoScripting`]; any other failure is
    /// returned as it is, for the caller to judge (a server that does not answer says nothing of
    /// its scripting).
    pub(crate) async fn check_scripting(
        &self,
        target: &Target,
        within: Duration,
    ) -> Result<(), ConnectError> {
        let mut conn = self.connection.clone();
        match tokio::time::timeout(within, self.scripts.decide.load_async(&mut conn)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(scripting(target, err)),
            Err(_) => Err(ConnectError::Redis(error::deadline(within))),
        }
    }

    /// Whether Redis answers a PING within the deadline, bypassing the breaker.
    pub(crate) async fn ping(&self) -> Result<(), Error> {
        let conn = self.connection.clone();
        match tokio::time::timeout(self.timeout, conn.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(error::store_error(e)),
            Err(_) => Err(error::store_error(error::deadline(self.timeout))),
        }
    }

    /// Whether Redis answers a PING within `within`, bypassing the breaker, and a standalone
    /// address does not point at a cluster node.
    pub(crate) async fn health(&self, within: Duration) -> Result<(), Error> {
        let conn = self.connection.clone();
        let checked = tokio::time::timeout(within, async {
            conn.ping().await.map_err(error::store_error)?;
            if conn
                .standalone_is_cluster_node()
                .await
                .map_err(error::store_error)?
            {
                return Err(error::wrong_mode(
                    "the standalone address points at a redis cluster node; use redis+cluster://",
                ));
            }
            Ok(())
        })
        .await;
        match checked {
            Ok(result) => result,
            Err(_) => Err(error::store_error(error::deadline(within))),
        }
    }

    /// One call of the decision script: sent with the other decisions waiting for the same
    /// node (or cluster slot) as one batch call when calls are already in flight there (see
    /// `batch`), alone otherwise. The deadline counts from now, whenever the call goes out.
    ///
    /// With `replicas` waiting for some, the call is followed by `WAIT` (see
    /// `connection::Wait`), on the connection for calls that wait, and its deadline is the
    /// store's plus the wait (see the module docs); the reply then says how many replicas
    /// acknowledged. What to make of too few is the caller's: only an admission needs them.
    pub(crate) async fn decide_call(
        self: &Arc<Self>,
        keys: Vec<Vec<u8>>,
        args: Vec<String>,
        replicas: ReplicaWait,
    ) -> Result<Replied<Vec<u64>>, Error> {
        let replicas = match replicas.replicas {
            0 => ReplicaWait::NONE,
            _ => replicas,
        };
        let within = self.timeout + replicas.wait;
        let Some(lanes) = &self.lanes else {
            return self
                .decide_one(keys, &args, within, replicas)
                .await
                .map_err(Failure::into_error);
        };
        let lane = LaneKey {
            slot: self.slot_of(&keys),
            replicas,
        };
        let deadline = Instant::now() + within;
        let (job, answer) = Job::new(keys, args, deadline);
        match lanes.push(lane, job) {
            // A free place and nothing queued: this caller sends its own call, as without
            // batching, and hands the lane on to a sender for whatever queued meanwhile (also
            // when its future is dropped mid-call).
            Some(mut jobs) if jobs.len() == 1 => {
                let Some(job) = jobs.pop() else {
                    return Err(error::store_error(error::deadline(within)));
                };
                let _handover = Handover {
                    transport: self,
                    lane,
                };
                return self
                    .decide_one(job.keys, &job.args, within, replicas)
                    .await
                    .map_err(Failure::into_error);
            }
            Some(jobs) => {
                let transport = self.clone();
                tokio::spawn(async move { transport.send_batches(lane, jobs).await });
            }
            None => {}
        }
        match tokio::time::timeout_at(deadline.into(), answer).await {
            Ok(Ok(answer)) => answer.map_err(Failure::into_error),
            // Not sent: the deadline passed while it waited in the queue.
            Ok(Err(_)) | Err(_) => Err(error::store_error(error::deadline(within))),
        }
    }

    /// A lane's sender: sends `jobs`, then whatever queued meanwhile, until the queue is empty.
    async fn send_batches(&self, lane: LaneKey, mut jobs: Vec<Job>) {
        let Some(lanes) = &self.lanes else { return };
        loop {
            let now = Instant::now();
            // A decision past its deadline, or whose caller left, is never sent.
            jobs.retain(|job| job.is_live(now));
            self.send_batch(jobs, now, lane.replicas).await;
            match lanes.next(lane) {
                Some(next) => jobs = next,
                None => return,
            }
        }
    }

    /// One call for `jobs`: the decision script for one, the batch script for more.
    async fn send_batch(&self, mut jobs: Vec<Job>, now: Instant, replicas: ReplicaWait) {
        let within = batch::time_left(&jobs, now);
        match jobs.len() {
            0 => {}
            1 => {
                let Some(mut job) = jobs.pop() else { return };
                let keys = std::mem::take(&mut job.keys);
                let reply = self.decide_one(keys, &job.args, within, replicas).await;
                job.answer(reply);
            }
            count => {
                add(&self.counters.batch_calls, 1);
                add(&self.counters.batched_decisions, count as u64);
                let wrote = jobs.iter().any(|job| writes(&job.args));
                let (mut keys, args) = batch::call(&mut jobs);
                let (mark, node) = self.sequence(&mut keys);
                let reply = self
                    .try_call::<redis::Value>(&self.scripts.batch, &keys, &args, within, replicas)
                    .await
                    .and_then(|mut replied| {
                        let before = match &mut replied.value {
                            redis::Value::Array(parts) => match parts.pop() {
                                Some(redis::Value::Int(n)) => u64::try_from(n).ok(),
                                _ => None,
                            },
                            _ => None,
                        };
                        let before = before.ok_or_else(|| Failure::Redis(no_sequence()))?;
                        self.state_loss.observe(mark, before, wrote, &node);
                        Ok(replied)
                    });
                if let Err(Failure::Refused(_)) = reply {
                    // Counted per decision, as unbatched refusals are.
                    add(&self.counters.breaker_refusals, count as u64 - 1);
                }
                batch::answer(jobs, reply);
            }
        }
    }

    /// One call of the decision script with `keys` and `args`, its slot's sequence passed and
    /// read back (see `state_loss`): the reply is the decision script's, without it.
    async fn decide_one(
        &self,
        mut keys: Vec<Vec<u8>>,
        args: &[String],
        within: Duration,
        replicas: ReplicaWait,
    ) -> Result<Replied<Vec<u64>>, Failure> {
        let (mark, node) = self.sequence(&mut keys);
        let mut replied = self
            .try_call::<Vec<u64>>(&self.scripts.decide, &keys, args, within, replicas)
            .await?;
        let before = replied.value.pop().ok_or_else(|| Failure::Redis(no_sequence()))?;
        self.state_loss.observe(mark, before, writes(args), &node);
        Ok(replied)
    }

    /// Adds the sequence of the slot of `keys` as their last key; returns what the call is sent
    /// with and the node it goes to.
    fn sequence(&self, keys: &mut Vec<Vec<u8>>) -> (Mark, Arc<str>) {
        let slot = self.slot_of(keys);
        keys.push(self.state_loss.key(slot));
        (self.state_loss.mark(slot), self.connection.node_of(slot))
    }

    /// The cluster slot of a call's keys (they share one); 0 on standalone Redis.
    fn slot_of(&self, keys: &[Vec<u8>]) -> u16 {
        match self.connection.is_cluster() {
            true => keys.first().map_or(0, |name| keys::slot(name)),
            false => 0,
        }
    }

    /// [`call`](Self::call) with a deadline `within` from now, followed by `WAIT` when
    /// `replicas` waits for some (see [`decide_call`](Self::decide_call)), failing with a
    /// [`Failure`] that every decision of a batch can get a copy of.
    async fn try_call<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[Vec<u8>],
        args: &[String],
        within: Duration,
        ReplicaWait {
            replicas,
            wait: replica_wait,
        }: ReplicaWait,
    ) -> Result<Replied<T>, Failure> {
        let slot = self.slot_of(keys);
        let node = self.connection.node_of(slot);
        // A call that would wait for replicas the node lately did not have goes without WAIT,
        // on the main connection, until the next probe (see `breaker`): its denials are answered
        // as usual, its admissions are not acknowledged. One breaker per node and number of
        // replicas.
        let mut replicas_breaker = (replicas > 0).then(|| self.replicas.node(&format!("{node}/{replicas}")));
        let replicas_probe = match replicas_breaker.as_ref().map(|b| b.admit()) {
            Some(Admission::Call { probe }) => probe,
            Some(Admission::Refuse(_)) => {
                replicas_breaker = None;
                false
            }
            None => false,
        };
        let replicas = if replicas_breaker.is_some() { replicas } else { 0 };
        let breaker = self.breakers.node(&node);
        let probe = match breaker.admit() {
            Admission::Call { probe } => probe,
            Admission::Refuse(next_probe_in) => {
                add(&self.counters.breaker_refusals, 1);
                return Err(Failure::Refused(error::BreakerOpen {
                    next_probe_in,
                    cause: breaker.cause(),
                }));
            }
        };
        add(&self.counters.redis_calls, 1);
        // On the deadline the call is dropped, not sent again: it may have run already.
        let (connection, wait) = match replicas {
            0 => (&self.connection, None),
            replicas => {
                // The policy's wait, less what queueing took of it: the store's own deadline
                // stays for the call and for WAIT's answer to come back, so that too few
                // replicas in time is told apart from a node that does not answer.
                let left = within.saturating_sub(self.timeout).min(replica_wait);
                let timeout_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
                let wait = Wait {
                    replicas,
                    timeout_ms: timeout_ms.max(1),
                };
                (&self.waiting, Some(wait))
            }
        };
        let call = connection.invoke::<T>(&self.scripts.library, script, keys, args, wait);
        let err = match tokio::time::timeout(within, call).await {
            Ok(Ok(replied)) => {
                breaker.succeeded();
                if let Some(breaker) = &replicas_breaker {
                    match replied.replicas {
                        Some(n) if n >= u64::from(replicas) => breaker.succeeded(),
                        n => breaker.failed(error::replicas_short(replicas, n.unwrap_or(0)), replicas_probe),
                    }
                }
                return Ok(replied);
            }
            Ok(Err(e)) => e,
            Err(_) => error::deadline(self.timeout + replica_wait),
        };
        connection.failed(&err);
        let class = error::classify(&err);
        match &replicas_breaker {
            // A call that waits and times out may have waited behind another's WAIT on the
            // connection of waiting calls: it says nothing of the node, which the calls that
            // wait for none judge, but a replica may be missing.
            Some(replicas_breaker) if class == StoreErrorKind::Timeout => {
                add(&self.counters.redis_unavailable, 1);
                replicas_breaker.failed(err.clone(), replicas_probe);
            }
            _ if error::is_unavailable(class) => {
                add(&self.counters.redis_unavailable, 1);
                breaker.failed(err.clone(), probe);
            }
            // Redis answered, if with an error: it is there.
            _ => breaker.succeeded(),
        }
        Err(Failure::Redis(err))
    }
}

/// The error of loading a script: [`ConnectError::NoScripting`] when the answer says the server
/// cannot run Lua, else the Redis error.
fn scripting(target: &Target, err: redis::RedisError) -> ConnectError {
    match error::no_scripting(&err) {
        // Without the arguments Redis quotes back: the script's first bytes say nothing.
        true => ConnectError::NoScripting {
            store: target.display(),
            answer: err
                .detail()
                .unwrap_or_default()
                .split(", with args beginning with")
                .next()
                .unwrap_or_default()
                .to_owned(),
        },
        false => ConnectError::Redis(err),
    }
}

/// Whether a decision call with these arguments may write: any mode but a peek (ARGV[3]).
fn writes(args: &[String]) -> bool {
    args.get(2).is_some_and(|mode| mode != "peek")
}

/// A decision reply without the slot's sequence at its end.
fn no_sequence() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected script reply",
        "no sequence at the end".to_owned(),
    ))
}

/// Frees a lane's place taken by a caller sending its own call: what queued meanwhile goes to
/// a sender task.
struct Handover<'a> {
    transport: &'a Arc<Transport>,
    lane: LaneKey,
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        let Some(lanes) = &self.transport.lanes else {
            return;
        };
        if let Some(jobs) = lanes.next(self.lane) {
            // Outside a runtime (one shutting down) the jobs are dropped unsent: their callers
            // see their deadline.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let (transport, lane) = (self.transport.clone(), self.lane);
                runtime.spawn(async move { transport.send_batches(lane, jobs).await });
            }
        }
    }
}
