//! `POST /json` answers exactly what the gRPC door answers: one sequence of requests is sent to
//! two servers with the same limits, over gRPC (a real socket and the tonic client) to one and
//! as JSON to the other, and every answer must be the same, status for status and field for
//! field (only `durationUntilReset` is left out, since the two calls may straddle a second).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use tollgate_server::AnyStore;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::{RlsService, json};
use tollgate_server::{AppState, Settings};
use tower::ServiceExt;

const LIMITS: &str = "\
domain: edge
descriptors:
  - key: path
    rate_limit: {name: paths, unit: hour, requests_per_unit: 3}
  - key: path
    value: /free
    rate_limit: {unlimited: true}
  - key: path
    value: /closed
    rate_limit: {unit: day, requests_per_unit: 0}
  - key: watched
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 2}
";

/// Each request in turn; some come back over the limit because earlier ones spent.
const REQUESTS: [&str; 16] = [
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/a"}]}]}"#,
    r#"{"domain": "edge", "hitsAddend": 2, "descriptors": [{"entries": [{"key": "path", "value": "/a"}]}]}"#,
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/a"}]}]}"#,
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/a"}], "hits_addend": "0"}]}"#,
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/free"}]}]}"#,
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/closed"}]}]}"#,
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "watched", "value": "x"}]}, {"entries": [{"key": "watched", "value": "x"}]}]}"#,
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}, {"key": "user", "value": "u1"}]}]}"#,
    r#"{"domain": "edge", "descriptors": [
        {"entries": [{"key": "tenant", "value": "acme"}, {"key": "user", "value": "u1"}]},
        {"entries": [{"key": "path", "value": "/closed"}]}]}"#,
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}, {"key": "user", "value": "u1"}]}]}"#,
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "k", "value": "v"}], "limit": {"requestsPerUnit": 1, "unit": "HOUR"}}]}"#,
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "k", "value": "v"}], "limit": {"requests_per_unit": 1, "unit": 3}}]}"#,
    r#"{"domain": "elsewhere", "descriptors": [{"entries": [{"key": "path", "value": "/a"}]}]}"#,
    r#"{"domain": "", "descriptors": [{"entries": [{"key": "path", "value": "/a"}]}]}"#,
    r#"{"domain": "edge", "descriptors": []}"#,
    r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/a"}], "isNegativeHits": true, "hitsAddend": 0}]}"#,
];

fn state() -> tollgate_server::SharedState {
    let limits = tollgate_config::parse("edge.yaml", LIMITS).expect("limits parse");
    AppState::new(limits, AnyStore::memory(), Settings::default())
}

/// The JSON without the fields that depend on the clock.
fn without_clock(mut value: Value) -> Value {
    if let Some(statuses) = value.get_mut("statuses").and_then(Value::as_array_mut) {
        for status in statuses {
            if let Some(status) = status.as_object_mut() {
                status.remove("durationUntilReset");
            }
        }
    }
    value
}

#[tokio::test]
async fn json_answers_what_grpc_answers() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let grpc_server = tokio::spawn(tollgate_server::grpc::serve(listener, state(), async {
        let _ = stopped.await;
    }));
    let mut grpc = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let json_door = json::router(RlsService::new(state()));

    let (mut over, mut refused) = (0, 0);
    for body in REQUESTS {
        let request = json::parse_request(body.as_bytes()).expect("a valid request");
        let over_grpc = grpc.should_rate_limit(request).await;
        let answer = json_door
            .clone()
            .oneshot(Request::post("/json").body(Body::from(body)).expect("request"))
            .await
            .expect("an answer");
        let status = answer.status();
        let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .expect("body");
        let got: Value = serde_json::from_slice(&bytes).expect("json");
        match over_grpc {
            Ok(expected) => {
                let expected = expected.into_inner();
                let wanted_status = if expected.overall_code == 2 {
                    over += 1;
                    StatusCode::TOO_MANY_REQUESTS
                } else {
                    StatusCode::OK
                };
                assert_eq!(status, wanted_status, "{body}: {got}");
                assert_eq!(
                    without_clock(got),
                    without_clock(json::response_json(&expected)),
                    "{body}"
                );
            }
            Err(err) => {
                refused += 1;
                assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {got}");
                assert_eq!(got["detail"], err.message(), "{body}");
            }
        }
    }
    // The sequence does reach every kind of answer.
    assert!(over >= 4, "{over} over the limit");
    assert_eq!(refused, 3);
    let _ = stop.send(());
    grpc_server.await.expect("join").expect("served");
}
