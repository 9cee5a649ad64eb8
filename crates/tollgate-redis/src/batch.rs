//! Many decisions per script call: the queues that gather them and the batch call's layout.
//!
//! Every script call pays an entry cost in Redis (running the library's top level, reading the
//! arguments and the time) that is larger than deciding one rule. Decisions that wait for the
//! same Redis node at the same moment (standalone: the one node; cluster: the same slot, since
//! a script may only touch one slot) therefore go out together as one call of the batch script
//! (`lua/batch.lua`), which decides each request in turn exactly as the decision script would
//! decide it alone.
//!
//! Nothing ever waits for a batch to fill. Each lane (node or slot, and the replicas its
//! decisions wait for: see [`LaneKey`]) keeps at most a few calls in
//! flight; a decision that finds a free place and an empty queue is sent at once, alone, by its
//! own caller; one that finds every place taken joins the lane's queue, and the next call to
//! finish hands everything queued (up to [`MAX_BATCH`]) to a sender task as its next call. So
//! under low load every decision is a single call of the decision script, sent as without
//! batching, and under high load the queue fills while calls are out, and each call carries what
//! arrived meanwhile.
//!
//! What each decision keeps:
//!
//! - its own deadline, counted from when it was asked: the caller stops waiting at its
//!   deadline, a sender never sends a decision whose deadline has passed or whose caller is
//!   gone, and a batch call is bounded by the latest deadline among its decisions;
//! - at most once: a batch call is never sent again (only the answers that prove it did not run
//!   are followed by another attempt, in `connection`), so no decision is applied twice;
//! - its independence: a request denied in a batch changes only its own rules' state, and a
//!   request whose keys hold a value we did not write gets its own error while the others are
//!   decided; a call that fails as a whole (timeout, connection, breaker) fails each of its
//!   decisions with that error.
//!
//! Batches are sent by tasks of their own, and a caller sending its own call hands the lane on
//! when it finishes or its future is dropped, so a caller that gives up never strands the
//! decisions queued behind it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{RedisError, Value};
use tokio::sync::oneshot;
use tollgate::Error;

use crate::connection::{ReplicaWait, Replied};
use crate::error::{self, BreakerOpen};
use crate::scripts::{RULE_FIELDS, reply_len};

/// At most this many decisions per batch call: a bound on the time one call holds Redis (other
/// clients wait while a script runs) and on the size of its reply.
pub(crate) const MAX_BATCH: usize = 128;

/// Calls in flight per lane unless the builder says otherwise.
pub(crate) const DEFAULT_CALLS_IN_FLIGHT: usize = 2;

/// Why a call failed, in a form every decision of a batch can get a copy of.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// Redis failed or answered with an error (or the deadline passed).
    Redis(RedisError),
    /// The node's circuit breaker refused the call.
    Refused(BreakerOpen),
}

impl Failure {
    pub(crate) fn into_error(self) -> Error {
        match self {
            Failure::Redis(err) => error::store_error(err),
            Failure::Refused(refusal) => error::breaker_open(refusal),
        }
    }
}

/// The reply of a decision script call: its integers (and, when the call waited for replicas,
/// how many acknowledged it), or why there are none.
pub(crate) type Answer = Result<Replied<Vec<u64>>, Failure>;

/// One decision waiting to be sent: the decision script's KEYS and ARGV for it.
pub(crate) struct Job {
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) args: Vec<String>,
    pub(crate) deadline: Instant,
    /// How many integers the decision script answers it with (see `scripts::reply_len`).
    reply_len: usize,
    answer: oneshot::Sender<Answer>,
}

impl Job {
    pub(crate) fn new(
        keys: Vec<Vec<u8>>,
        args: Vec<String>,
        deadline: Instant,
    ) -> (Job, oneshot::Receiver<Answer>) {
        let (answer, receiver) = oneshot::channel();
        (
            Job {
                reply_len: reply_len(&args),
                keys,
                args,
                deadline,
                answer,
            },
            receiver,
        )
    }

    /// Whether the decision may still be sent: its caller still waits and its deadline has not
    /// passed.
    pub(crate) fn is_live(&self, now: Instant) -> bool {
        now < self.deadline && !self.answer.is_closed()
    }

    pub(crate) fn answer(self, answer: Answer) {
        // A caller that stopped waiting has its own answer (the deadline) already.
        let _ = self.answer.send(answer);
    }
}

/// The queue and the number of calls in flight of one lane.
#[derive(Default)]
struct Lane {
    queue: Vec<Job>,
    in_flight: usize,
}

/// Which decisions go out together: those for one node (standalone: slot 0; a cluster: one
/// slot) that wait for the same number of replicas, as long. Decisions that wait for none never
/// share a call, nor a connection, with those that do, so they never wait for a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LaneKey {
    pub(crate) slot: u16,
    pub(crate) replicas: ReplicaWait,
}

/// Every lane's queue.
pub(crate) struct Lanes {
    lanes: Mutex<HashMap<LaneKey, Lane>>,
    calls_in_flight: usize,
}

impl Lanes {
    pub(crate) fn new(calls_in_flight: usize) -> Self {
        Lanes {
            lanes: Mutex::new(HashMap::new()),
            calls_in_flight: calls_in_flight.max(1),
        }
    }

    /// Queues `job` on `lane`. When the lane has a free place, the caller must start a sender
    /// for the returned jobs (this one, and any queued before it).
    pub(crate) fn push(&self, lane: LaneKey, job: Job) -> Option<Vec<Job>> {
        let mut lanes = self.lanes.lock();
        let state = lanes.entry(lane).or_default();
        state.queue.push(job);
        if state.in_flight < self.calls_in_flight {
            state.in_flight += 1;
            return Some(take(&mut state.queue));
        }
        None
    }

    /// A sender of `lane` finished a call: the jobs queued meanwhile for its next call, or
    /// `None` when there are none (and the sender stops).
    pub(crate) fn next(&self, lane: LaneKey) -> Option<Vec<Job>> {
        let mut lanes = self.lanes.lock();
        let state = lanes.get_mut(&lane)?;
        if !state.queue.is_empty() {
            return Some(take(&mut state.queue));
        }
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            // Idle lanes go, so a cluster's 16 384 slots cost nothing while unused.
            lanes.remove(&lane);
        }
        None
    }
}

/// Up to [`MAX_BATCH`] jobs from the front of the queue, in the order they were asked.
fn take(queue: &mut Vec<Job>) -> Vec<Job> {
    if queue.len() <= MAX_BATCH {
        return std::mem::take(queue);
    }
    queue.drain(..MAX_BATCH).collect()
}

/// KEYS and ARGV of the batch script for `jobs`, as `lua/batch.lua` says: the number of
/// requests, the distinct rule records (each written once: under load most requests of a batch
/// share their policy's record, and the script reads each record once), then the requests in
/// runs that share their head (its now, rule count, mode and record numbers), each run as its
/// length and that head once; and every request's keys in the same order. Redis turns every
/// argument into a Lua string before the script runs, so a head written once for a run of
/// requests (the common case under load: one policy, Redis time, commit) saves three or more
/// arguments per request. The keys are moved out of the jobs, which are left to be answered.
pub(crate) fn call(jobs: &mut [Job]) -> (Vec<Vec<u8>>, Vec<String>) {
    let mut keys = Vec::with_capacity(jobs.iter().map(|j| j.keys.len()).sum());
    let mut numbers: HashMap<&[String], usize> = HashMap::new();
    let mut records: Vec<&[String]> = vec![];
    // Each run: its length and its head (now, rule count, mode, record numbers).
    let mut runs: Vec<(usize, Vec<String>)> = vec![];
    for job in jobs.iter_mut() {
        keys.append(&mut job.keys);
    }
    for job in jobs.iter() {
        let (now_count_mode, rules) = job.args.split_at(job.args.len().min(3));
        let mut head = now_count_mode.to_vec();
        for record in rules.chunks(RULE_FIELDS) {
            let number = *numbers.entry(record).or_insert_with(|| {
                records.push(record);
                records.len()
            });
            head.push(number.to_string());
        }
        match runs.last_mut() {
            Some((length, last)) if *last == head => *length += 1,
            _ => runs.push((1, head)),
        }
    }
    let run_args: usize = runs.iter().map(|(_, head)| 1 + head.len()).sum();
    let mut args = Vec::with_capacity(2 + records.len() * RULE_FIELDS + run_args);
    args.push(jobs.len().to_string());
    args.push(records.len().to_string());
    for record in records {
        args.extend(record.iter().cloned());
    }
    for (length, head) in runs {
        args.push(length.to_string());
        args.extend(head);
    }
    (keys, args)
}

/// Gives each job its part of the batch script's reply (or the failure of the whole call): the
/// reply is every request's integers in turn, or in place of a failed request's, its error text.
/// Every job gets the call's count of acknowledging replicas.
pub(crate) fn answer(jobs: Vec<Job>, reply: Result<Replied<Value>, Failure>) {
    let (parts, replicas) = match reply {
        Ok(Replied {
            value: Value::Array(parts),
            replicas,
        }) => (parts, replicas),
        Ok(other) => return fail_all(jobs, &Failure::Redis(bad_reply(&other.value))),
        Err(failure) => return fail_all(jobs, &failure),
    };
    let mut parts = parts.into_iter();
    let mut jobs = jobs.into_iter();
    while let Some(job) = jobs.next() {
        let answer = match parts.next() {
            Some(Value::BulkString(text)) => Err(Failure::Redis(request_error(&text))),
            Some(first) => match integers(first, &mut parts, job.reply_len) {
                Some(value) => Ok(Replied { value, replicas }),
                None => {
                    // Out of step from here on: no later part can be trusted either.
                    let failure =
                        Failure::Redis(bad_reply_text("a request's answer is not its integers".into()));
                    job.answer(Err(failure.clone()));
                    return fail_all(jobs.collect(), &failure);
                }
            },
            None => {
                let failure = Failure::Redis(bad_reply_text("fewer answers than requests".into()));
                job.answer(Err(failure.clone()));
                return fail_all(jobs.collect(), &failure);
            }
        };
        job.answer(answer);
    }
}

/// `first` and the parts after it: `len` non-negative integers, or `None`.
fn integers(first: Value, rest: &mut impl Iterator<Item = Value>, len: usize) -> Option<Vec<u64>> {
    let answer = std::iter::once(first)
        .chain(rest.take(len - 1))
        .map(|part| match part {
            Value::Int(n) => u64::try_from(n).ok(),
            _ => None,
        })
        .collect::<Option<Vec<u64>>>()?;
    (answer.len() == len).then_some(answer)
}

fn fail_all(jobs: Vec<Job>, failure: &Failure) {
    for job in jobs {
        job.answer(Err(failure.clone()));
    }
}

/// The error of one request of a batch, from the text the batch script gives in its place (code
/// first), read as Redis would have answered it alone: so it keeps its class.
fn request_error(text: &[u8]) -> RedisError {
    let text = String::from_utf8_lossy(text).replace(['\r', '\n'], " ");
    match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
        Ok(Value::ServerError(err)) => err.into(),
        _ => bad_reply_text(text),
    }
}

fn bad_reply(reply: &Value) -> RedisError {
    bad_reply_text(format!("{reply:?}"))
}

fn bad_reply_text(detail: String) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected batch script reply",
        detail,
    ))
}

/// How long a call carrying decisions with these deadlines may take: until the latest of them.
pub(crate) fn time_left(jobs: &[Job], now: Instant) -> Duration {
    jobs.iter()
        .map(|j| j.deadline.saturating_duration_since(now))
        .max()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(slot: u16) -> LaneKey {
        LaneKey {
            slot,
            replicas: ReplicaWait::NONE,
        }
    }

    fn job(deadline: Instant) -> (Job, oneshot::Receiver<Answer>) {
        Job::new(
            vec![b"k".to_vec()],
            vec!["".into(), "1".into(), "commit".into()],
            deadline,
        )
    }

    #[test]
    fn a_free_lane_sends_at_once_and_a_busy_one_queues() {
        let lanes = Lanes::new(1);
        let later = Instant::now() + Duration::from_secs(60);
        let (first, _a) = job(later);
        let sent = lanes.push(lane(0), first).expect("a free lane sends at once");
        assert_eq!(sent.len(), 1);
        let (second, _b) = job(later);
        let (third, _c) = job(later);
        assert!(lanes.push(lane(0), second).is_none(), "the only place is taken");
        assert!(lanes.push(lane(0), third).is_none());
        // Another lane is not held up by this one, nor are decisions that wait for replicas.
        let (other, _d) = job(later);
        assert!(lanes.push(lane(7), other).is_some());
        let (waiting, _w) = job(later);
        let acknowledged = LaneKey {
            slot: 0,
            replicas: ReplicaWait {
                replicas: 1,
                wait: Duration::from_millis(250),
            },
        };
        assert!(lanes.push(acknowledged, waiting).is_some());
        let next = lanes.next(lane(0)).expect("what queued meanwhile");
        assert_eq!(next.len(), 2);
        assert!(lanes.next(lane(0)).is_none(), "nothing left: the sender stops");
        let (fourth, _e) = job(later);
        assert!(lanes.push(lane(0), fourth).is_some(), "the place is free again");
    }

    #[test]
    fn a_batch_holds_at_most_max_batch() {
        let lanes = Lanes::new(1);
        let later = Instant::now() + Duration::from_secs(60);
        let mut receivers = vec![];
        let (first, r) = job(later);
        receivers.push(r);
        assert!(lanes.push(lane(0), first).is_some());
        for _ in 0..MAX_BATCH + 5 {
            let (j, r) = job(later);
            receivers.push(r);
            assert!(lanes.push(lane(0), j).is_none());
        }
        assert_eq!(lanes.next(lane(0)).map(|b| b.len()), Some(MAX_BATCH));
        assert_eq!(lanes.next(lane(0)).map(|b| b.len()), Some(5));
        assert!(lanes.next(lane(0)).is_none());
    }

    #[test]
    fn a_job_whose_caller_left_or_deadline_passed_is_not_live() {
        let now = Instant::now();
        let (gone, receiver) = job(now + Duration::from_secs(60));
        drop(receiver);
        assert!(!gone.is_live(now));
        let (late, _r) = job(now);
        assert!(!late.is_live(now));
        let (waiting, _w) = job(now + Duration::from_secs(60));
        assert!(waiting.is_live(now));
    }

    #[test]
    fn the_batch_call_writes_each_record_once_and_each_request_in_turn() {
        let later = Instant::now() + Duration::from_secs(60);
        let record = |name: &str, limit: &str| -> Vec<String> {
            [
                name,
                "1",
                "0",
                "0",
                "0",
                limit,
                "1000000",
                "",
                "gcra/0",
                "0|keep|1000000 5 ",
            ]
            .map(String::from)
            .to_vec()
        };
        let request = |mode: &str, records: &[Vec<String>]| -> Vec<String> {
            let mut args = vec![String::new(), records.len().to_string(), mode.to_string()];
            args.extend(records.iter().flatten().cloned());
            args
        };
        // A request of one gcra rule, committed, on the key given.
        let gcra = |key: &str| {
            Job::new(
                vec![key.as_bytes().to_vec()],
                request("commit", &[record("gcra", "5")]),
                later,
            )
        };
        let (a, _a) = gcra("k");
        let (b, _b) = Job::new(
            vec![b"s".to_vec(), b"l".to_vec(), b"t".to_vec()],
            request("peek", &[record("sliding_log", "9"), record("gcra", "5")]),
            later,
        );
        // Two more requests with the first one's head, then one with the second's, then two
        // with the first's again: runs are of neighbours only, so the order of requests holds.
        let (c, _c) = gcra("m");
        let (d, _d) = gcra("n");
        let (e, _e) = gcra("o");
        let (f, _f) = gcra("p");
        let (keys, args) = call(&mut [a, c, d, b, e, f]);
        let expected_keys: Vec<Vec<u8>> = ["k", "m", "n", "s", "l", "t", "o", "p"]
            .map(|key| key.as_bytes().to_vec())
            .to_vec();
        assert_eq!(keys, expected_keys);
        let mut expected = vec!["6".to_string(), "2".to_string()];
        expected.extend(record("gcra", "5"));
        expected.extend(record("sliding_log", "9"));
        expected.extend(
            [
                "3", "", "1", "commit", "1", "1", "", "2", "peek", "2", "1", "2", "", "1", "commit", "1",
            ]
            .map(String::from),
        );
        assert_eq!(args, expected);
    }

    #[tokio::test]
    async fn each_request_gets_its_own_part_of_the_reply() {
        let later = Instant::now() + Duration::from_secs(60);
        let one_rule = || ["", "1", "commit"].map(String::from).to_vec();
        let (a, ra) = Job::new(vec![b"k".to_vec()], one_rule(), later);
        let (b, rb) = Job::new(vec![b"k".to_vec()], one_rule(), later);
        let (c, rc) = Job::new(vec![b"k".to_vec()], one_rule(), later);
        let failed = Value::BulkString(b"WRONGTYPE wrong kind".to_vec());
        let ints = |values: [i64; 5]| values.map(Value::Int);
        let mut flat = ints([1, 4, 10, 0, 5]).to_vec();
        flat.push(failed);
        flat.extend(ints([0, 0, 10, 3, 5]));
        let reply = Replied {
            value: Value::Array(flat),
            replicas: Some(1),
        };
        answer(vec![a, b, c], Ok(reply));
        let first = ra.await.expect("answered").expect("decided");
        assert_eq!((first.value, first.replicas), (vec![1, 4, 10, 0, 5], Some(1)));
        let err = rb.await.expect("answered").expect_err("its own error");
        assert_eq!(err.into_error().class(), Some("corrupt"));
        assert_eq!(
            rc.await.expect("answered").expect("decided").value,
            [0, 0, 10, 3, 5]
        );
    }

    #[tokio::test]
    async fn a_reply_out_of_step_fails_every_request_from_there() {
        let later = Instant::now() + Duration::from_secs(60);
        let one_rule = || ["", "1", "commit"].map(String::from).to_vec();
        let (a, ra) = Job::new(vec![b"k".to_vec()], one_rule(), later);
        let (b, rb) = Job::new(vec![b"k".to_vec()], one_rule(), later);
        let mut flat = [1, 4, 10, 0, 5].map(Value::Int).to_vec();
        flat.extend([Value::Int(1), Value::Nil]);
        let reply = Replied {
            value: Value::Array(flat),
            replicas: None,
        };
        answer(vec![a, b], Ok(reply));
        assert!(ra.await.expect("answered").is_ok());
        assert!(rb.await.expect("answered").is_err());
    }
}
