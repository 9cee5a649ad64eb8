//! `run` on listeners bound to port 0, in the test's own runtime: both doors answer, a limits
//! swap takes effect at once, and the shutdown future stops both servers.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tollgate_server::AnyStore;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};
use tollgate_server::{AppState, Settings};
use tollgate_server::{Listeners, run};

const CONFIG: &str = "\
policies:
  api: {algorithm: fixed_window, limit: 2, window: 1h}
";

const ENVOY: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
";

async fn check(client: &reqwest::Client, base: &str, policy: &str) -> StatusCode {
    client
        .post(format!("{base}/v1/check"))
        .json(&json!({"policy": policy, "key": "alice"}))
        .send()
        .await
        .expect("check")
        .status()
}

fn user(name: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".to_owned(),
                value: name.to_owned(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

#[tokio::test]
async fn serves_both_doors_follows_a_limits_swap_and_stops_on_shutdown() {
    let limits = tollgate_config::parse("api.yaml", CONFIG).expect("config");
    let state = AppState::new(limits, AnyStore::memory(), Settings::default());
    let any = "127.0.0.1:0".parse().expect("address");
    let listeners = Listeners::bind(any, any).await.expect("bind");
    let http = format!("http://{}", listeners.http.local_addr().expect("http addr"));
    let grpc = format!("http://{}", listeners.grpc.local_addr().expect("grpc addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(run(Arc::clone(&state), listeners, async {
        let _ = stopped.await;
    }));

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    assert_eq!(check(&client, &http, "api").await, StatusCode::OK);
    assert_eq!(check(&client, &http, "api").await, StatusCode::OK);
    assert_eq!(check(&client, &http, "api").await, StatusCode::TOO_MANY_REQUESTS);

    // The gRPC door knows no domain yet; after a swap it does, without a restart.
    let mut rls = RateLimitServiceClient::connect(grpc.clone())
        .await
        .expect("connect");
    let answer = rls
        .should_rate_limit(user("bob"))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert!(
        answer.statuses[0].current_limit.is_none(),
        "no limit before the swap"
    );
    state.limits.store(Arc::new(
        tollgate_config::parse("edge.yaml", ENVOY).expect("envoy config"),
    ));
    let answer = rls
        .should_rate_limit(user("bob"))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    let answer = rls
        .should_rate_limit(user("bob"))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    drop(rls);

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("stops within 10 s")
        .expect("server task")
        .expect("run returns Ok");
    assert!(
        tokio::net::TcpStream::connect(http.trim_start_matches("http://"))
            .await
            .is_err(),
        "the http listener is closed once run returns"
    );
}

#[tokio::test]
async fn dropping_run_stops_both_servers() {
    let state = AppState::new(
        tollgate_config::demo().expect("demo"),
        AnyStore::memory(),
        Settings::default(),
    );
    let any = "127.0.0.1:0".parse().expect("address");
    let listeners = Listeners::bind(any, any).await.expect("bind");
    let addrs = [
        listeners.http.local_addr().expect("http addr"),
        listeners.grpc.local_addr().expect("grpc addr"),
    ];
    let server = tokio::spawn(run(state, listeners, std::future::pending()));
    for addr in addrs {
        tokio::net::TcpStream::connect(addr).await.expect("serving");
    }
    server.abort();
    let _ = server.await;
    // The servers' own tasks end on the runtime's next turns; a bounded wait for both ports.
    for addr in addrs {
        let mut refused = false;
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(refused, "{addr} still accepts connections after run was dropped");
    }
}
