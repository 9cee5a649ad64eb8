//! A load generator for any Envoy rate limit service: `ShouldRateLimit` calls over a few HTTP/2
//! connections with many concurrent streams each, as Envoy sends them, spread over a number of
//! descriptor values. `scripts/versus-limitador.sh` drives tollgate, Kuadrant's limitador and a
//! bare tonic server (`bare_rls`) with it, so all three are measured by the same client;
//! `scripts/redis-instructions.sh` sends limitador one call per value with it, to count what its
//! Redis storage costs Redis per decision.
//!
//! h2load, the C generator `scripts/h2load-check-vs-grpc.sh` uses, repeats one request body,
//! so it can only ever ask about one key; this generator asks about `KEYS` values
//! (`user-0` … ), each call the next value of its stream, the streams starting apart. With
//! `REQUESTS` = `KEYS`, a multiple of `CONNECTIONS` × `STREAMS`, every value is asked about
//! exactly once.
//!
//! ```text
//! rls_load ADDR REQUESTS CONNECTIONS STREAMS KEYS [DOMAIN] [DESCRIPTOR_KEY]
//! ```
//!
//! sends `REQUESTS` calls (rounded down to a multiple of `CONNECTIONS` × `STREAMS`) to
//! `ADDR`, each with one descriptor of one entry `DESCRIPTOR_KEY` (default `user`) in domain
//! `DOMAIN` (default `bench`), and prints one line:
//! `requests=… ok=… seconds=… requests_per_second=… p50_us=… p99_us=…`, where `ok` counts the
//! answers with overall code `OK` (every call must succeed with `OK` or `OVER_LIMIT`, or the
//! generator panics). It runs on one thread: pin it apart from the server.

use std::time::Instant;

use bytes::Bytes;
use hdrhistogram::Histogram;

mod rls_client;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench` to every bench target: run nothing then.
    if args.is_empty() || args.iter().any(|a| a == "--bench") {
        eprintln!("usage: rls_load ADDR REQUESTS CONNECTIONS STREAMS KEYS [DOMAIN] [DESCRIPTOR_KEY]");
        return;
    }
    let number = |i: usize, name: &str| -> usize {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("{name}: expected a positive number, got {:?}", args.get(i)))
    };
    let addr = args[0].clone();
    let (requests, connections, streams, keys) = (
        number(1, "REQUESTS"),
        number(2, "CONNECTIONS"),
        number(3, "STREAMS"),
        number(4, "KEYS"),
    );
    let domain = args.get(5).map_or("bench", String::as_str);
    let descriptor_key = args.get(6).map_or("user", String::as_str);
    let each = requests / (connections * streams);
    assert!(each > 0, "REQUESTS must be at least CONNECTIONS x STREAMS");

    // Every message encoded before the clock starts; a call clones a reference-counted buffer.
    let messages: Vec<Bytes> = (0..keys)
        .map(|k| rls_client::message(domain, descriptor_key, format!("user-{k}")))
        .collect();
    let messages = std::sync::Arc::new(messages);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let started = Instant::now();
    let (latencies, ok) = runtime.block_on(async {
        let tasks: Vec<_> = (0..connections)
            .map(|c| {
                let messages = messages.clone();
                let addr = addr.clone();
                let body = move |stream: usize, i: usize| {
                    // Streams start far apart and step by one, so with many keys every value is
                    // asked about about equally often, and a value comes back only after the
                    // others have been asked.
                    let first = (c * streams + stream) * keys / (connections * streams);
                    messages[(first + i) % messages.len()].clone()
                };
                tokio::spawn(async move { rls_client::connection(&addr, streams, each, body).await })
            })
            .collect();
        let mut all = Histogram::<u64>::new(3).expect("histogram");
        let mut ok = 0;
        for task in tasks {
            let (latencies, some) = task.await.expect("connection task");
            all.add(latencies).expect("merge");
            ok += some;
        }
        (all, ok)
    });
    let seconds = started.elapsed().as_secs_f64();
    let sent = each * connections * streams;
    println!(
        "requests={sent} ok={ok} seconds={seconds:.3} requests_per_second={:.0} p50_us={} p99_us={}",
        sent as f64 / seconds,
        latencies.value_at_quantile(0.5),
        latencies.value_at_quantile(0.99),
    );
}
