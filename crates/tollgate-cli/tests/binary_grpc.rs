//! The real binary's Envoy rate limit service, configured with an envoyproxy/ratelimit file and
//! called by a real tonic client, next to its HTTP API.

mod binary;

use std::process::Command;

use binary::{Server, TOLLGATE};
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};

fn marketing_to(number: &str) -> RateLimitRequest {
    let entries = [("message_type", "marketing"), ("to_number", number)]
        .into_iter()
        .map(|(key, value)| Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        })
        .collect();
    RateLimitRequest {
        domain: "messaging".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries,
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// envoyproxy/ratelimit's format, as upstream's README writes it: three marketing messages a day
/// to each number (a day long, so the test never straddles a window boundary in practice).
const MESSAGING: &str = "\
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 3}
";

#[tokio::test]
async fn should_rate_limit_answers_from_an_envoy_config_file() {
    let config = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(config.path(), MESSAGING).expect("write the config");
    let server = Server::start(&["--config", config.path().to_str().expect("utf-8 path")]);
    let mut client = RateLimitServiceClient::connect(server.grpc.clone())
        .await
        .expect("connect to the grpc listener");
    for remaining in (0..3).rev() {
        let answer = client
            .should_rate_limit(marketing_to("2061111111"))
            .await
            .expect("call")
            .into_inner();
        assert_eq!(answer.overall_code, Code::Ok as i32);
        assert_eq!(answer.statuses[0].limit_remaining, remaining);
    }
    let answer = client
        .should_rate_limit(marketing_to("2061111111"))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    assert!(answer.statuses[0].duration_until_reset.is_some());
    // Another number has its own budget.
    let answer = client
        .should_rate_limit(marketing_to("2062222222"))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
}

/// The first CPU this process may run on, from `Cpus_allowed_list` ("0-1", "2,5", ...).
fn first_allowed_cpu() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list");
    list.trim().split([',', '-']).next().expect("a CPU").to_owned()
}

/// How many threads of process `pid` carry tokio's default worker name.
fn tokio_workers(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "tokio-rt-worker")
        .count()
}

/// The config file and a server started by `command` with it: three messages a day per number.
fn messaging_server(command: &mut Command) -> (tempfile::NamedTempFile, Server) {
    let config = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(config.path(), MESSAGING).expect("write the config");
    let server = Server::start_command(
        command,
        &["--config", config.path().to_str().expect("utf-8 path")],
    );
    (config, server)
}

#[tokio::test]
async fn pinned_to_one_core_the_server_runs_on_one_thread_and_answers_alike() {
    let cpu = first_allowed_cpu();
    let mut pinned = Command::new("taskset");
    pinned
        .args(["-c", &cpu, TOLLGATE])
        .env_remove("TOKIO_WORKER_THREADS");
    let (_config, mut server) = messaging_server(&mut pinned);
    assert_eq!(
        tokio_workers(server.pid()),
        0,
        "a server that may use one core runs no worker threads"
    );
    let mut client = RateLimitServiceClient::connect(server.grpc.clone())
        .await
        .expect("connect to the grpc listener");
    let mut codes = Vec::new();
    for _ in 0..4 {
        let answer = client
            .should_rate_limit(marketing_to("2061111111"))
            .await
            .expect("call")
            .into_inner();
        codes.push(answer.overall_code);
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, [ok, ok, ok, over]);
    let (status, _, _) = binary::get(binary::addr_of(&server.http), "/healthcheck");
    assert_eq!(status, 200);
    server.signal("TERM");
    assert!(server.wait_exit().success(), "stops cleanly on SIGTERM");

    // TOKIO_WORKER_THREADS asks for tokio's workers, pinned or not.
    let mut asked = Command::new("taskset");
    asked
        .args(["-c", &cpu, TOLLGATE])
        .env("TOKIO_WORKER_THREADS", "2");
    let (_config, server) = messaging_server(&mut asked);
    assert_eq!(tokio_workers(server.pid()), 2);

    // Free to use several cores, it runs one worker per core.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores > 1 {
        let mut free = Command::new(TOLLGATE);
        free.env_remove("TOKIO_WORKER_THREADS");
        let (_config, server) = messaging_server(&mut free);
        assert_eq!(tokio_workers(server.pid()), cores);
    }
}
