//! A rolling restart as an orchestrator does it: SIGTERM while clients keep opening connections.
//! The load balancer takes a while to hear that the instance is going away, so with
//! `--shutdown-delay` the server keeps accepting and answering while `/readyz` and the health
//! checks say it is stopping, and drains only after the delay. Here no connection is refused and
//! no answer is lost before the drain starts, and a request already in flight when the drain
//! starts is still answered.
//!
//! The delay is long (ten minutes) and a second SIGTERM ends it, so nothing here depends on how
//! fast the machine is: the phases are told apart by what the test did, not by the clock.

mod binary;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use binary::{Server, addr_of, get};

/// The phases the client's attempts are counted in, in the order the test moves through them.
const BEFORE_SIGTERM: u8 = 0;
const SIGTERM_SENT: u8 = 1;
const NOT_READY_SEEN: u8 = 2;
/// After the second SIGTERM, which ends the delay: from here a refusal is expected.
const DRAINING: u8 = 3;

/// The most connections the client opens, and the longest any wait of the test lasts: both only
/// catch a server that never does what is waited for.
const MAX_ATTEMPTS: usize = 50_000;
const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// What one new connection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// A whole HTTP answer with this status.
    Answered(u16),
    /// The connection itself was refused.
    Refused,
    /// Connected, but the answer never came whole (reset or closed early).
    Broken,
}

const CHECK_BODY: &str = r#"{"policy": "demo", "key": "rolling"}"#;
/// The in-flight request's body: a key of its own, so its answer is an admission.
const IN_FLIGHT_BODY: &str = r#"{"policy": "demo", "key": "in-flight"}"#;

/// One `POST /v1/check` on a new connection, `Connection: close`.
fn attempt(addr: SocketAddr) -> Outcome {
    let Ok(mut socket) = TcpStream::connect(addr) else {
        return Outcome::Refused;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(30)));
    let request = format!(
        "POST /v1/check HTTP/1.1\r\nhost: tollgate\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{CHECK_BODY}",
        CHECK_BODY.len()
    );
    if socket.write_all(request.as_bytes()).is_err() {
        return Outcome::Broken;
    }
    let mut answer = Vec::new();
    if socket.read_to_end(&mut answer).is_err() {
        return Outcome::Broken;
    }
    status_of(&answer).map_or(Outcome::Broken, Outcome::Answered)
}

/// The status of a whole HTTP/1.1 answer with a body (`None` when cut short).
fn status_of(answer: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    (!body.is_empty()).then_some(status)
}

/// Waits until `done` holds, polling; panics with `what` after [`WAIT_LIMIT`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_LIMIT;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sigterm_with_a_shutdown_delay_refuses_nothing_and_finishes_what_is_in_flight() {
    let mut server = Server::start(&[
        "--shutdown-delay",
        "10m",
        "--drain-timeout",
        "1m",
        "--body-read-timeout",
        "5m",
    ]);
    let addr = addr_of(&server.http);

    // The client: a new connection per request, as clients behind a Service open them, each
    // counted under the phase in force once it ended (so one that ended before the second
    // SIGTERM was sent is counted before the drain, whatever the scheduling).
    let phase = Arc::new(AtomicU8::new(BEFORE_SIGTERM));
    let stop = Arc::new(AtomicBool::new(false));
    let answered_in = Arc::new([(); 4].map(|()| AtomicUsize::new(0)));
    let refused_while_draining = Arc::new(AtomicBool::new(false));
    let client = {
        let (phase, stop) = (Arc::clone(&phase), Arc::clone(&stop));
        let (answered_in, refused_while_draining) =
            (Arc::clone(&answered_in), Arc::clone(&refused_while_draining));
        thread::spawn(move || {
            let mut outcomes: Vec<(u8, Outcome)> = Vec::new();
            while outcomes.len() < MAX_ATTEMPTS && !stop.load(Ordering::Acquire) {
                let outcome = attempt(addr);
                let phase = phase.load(Ordering::Acquire);
                match outcome {
                    Outcome::Answered(_) => {
                        answered_in[usize::from(phase)].fetch_add(1, Ordering::AcqRel);
                    }
                    _ if phase == DRAINING => refused_while_draining.store(true, Ordering::Release),
                    _ => {}
                }
                outcomes.push((phase, outcome));
                thread::sleep(Duration::from_millis(1));
            }
            outcomes
        })
    };
    let answered = |phase: u8| answered_in[usize::from(phase)].load(Ordering::Acquire);
    wait_until("answers before SIGTERM", || answered(BEFORE_SIGTERM) >= 20);

    // A request in flight: its head and half its body sent, the rest only once the drain has
    // started and refuses new connections.
    let mut in_flight = TcpStream::connect(addr).expect("connect the in-flight request");
    in_flight
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let (first_half, second_half) = IN_FLIGHT_BODY.split_at(IN_FLIGHT_BODY.len() / 2);
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nhost: tollgate\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{first_half}",
        IN_FLIGHT_BODY.len()
    );
    in_flight.write_all(head.as_bytes()).expect("send the head");

    phase.store(SIGTERM_SENT, Ordering::Release);
    server.signal("TERM");
    server.wait_for("still accepting for");
    // Readiness turns at once; every probe is itself a new connection the server must accept.
    let mut readiness = (0, serde_json::Value::Null);
    wait_until("/readyz to say the server is stopping", || {
        let accepted = TcpStream::connect(addr).is_ok();
        assert!(accepted, "a connection was refused during the shutdown delay");
        let (status, body, _) = get(addr, "/readyz");
        readiness = (status, body);
        readiness.0 == 503
    });
    assert_eq!(readiness.1["stopping"], true, "{}", readiness.1);
    assert_eq!(readiness.1["ready"], false, "{}", readiness.1);
    phase.store(NOT_READY_SEEN, Ordering::Release);
    assert_eq!(get(addr, "/healthz").0, 200, "liveness stays up during the delay");
    assert_eq!(
        get(addr, "/healthcheck").0,
        500,
        "envoyproxy/ratelimit's health check reports the shutdown too"
    );
    wait_until("answers while not ready", || answered(NOT_READY_SEEN) >= 100);

    // The second SIGTERM ends the delay: the listeners close and drain.
    phase.store(DRAINING, Ordering::Release);
    server.signal("TERM");
    server.wait_for("draining open connections");
    wait_until("a refused connection once draining", || {
        refused_while_draining.load(Ordering::Acquire)
    });

    // The request in flight is still answered, whole.
    in_flight
        .write_all(second_half.as_bytes())
        .expect("send the rest of the body");
    let mut answer = Vec::new();
    in_flight.read_to_end(&mut answer).expect("the in-flight answer");
    assert_eq!(
        status_of(&answer),
        Some(200),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    stop.store(true, Ordering::Release);
    let outcomes = client.join().expect("the client thread");
    assert!(outcomes.len() < MAX_ATTEMPTS, "the client ran out of attempts");
    let before_drain: Vec<_> = outcomes
        .iter()
        .filter(|(phase, outcome)| *phase < DRAINING && !matches!(outcome, Outcome::Answered(_)))
        .collect();
    assert!(
        before_drain.is_empty(),
        "{} of {} connections before the drain were not answered: {:?}",
        before_drain.len(),
        outcomes.len(),
        &before_drain[..before_drain.len().min(10)]
    );
    let statuses: Vec<u16> = outcomes
        .iter()
        .filter_map(|(_, outcome)| match outcome {
            Outcome::Answered(status) => Some(*status),
            _ => None,
        })
        .collect();
    assert!(
        statuses.iter().all(|status| *status == 200 || *status == 429),
        "every answer is a decision: {statuses:?}"
    );
    assert!(server.wait_exit().success(), "the drain ends with exit 0");
}
