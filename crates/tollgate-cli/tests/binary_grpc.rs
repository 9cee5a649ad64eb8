//! The real binary's Envoy rate limit service, configured with an envoyproxy/ratelimit file and
//! called by a real tonic client, next to its HTTP API.

mod binary;

use binary::Server;
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
