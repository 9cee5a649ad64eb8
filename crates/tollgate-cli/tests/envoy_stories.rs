//! docs/behind-envoy.md, run: its tollgate config, served by the real binary, answers the
//! descriptors its envoy.yaml makes Envoy send for the movies and login stories, as the page says.

mod binary;

use binary::Server;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};
use tonic::transport::Channel;

/// The page's tollgate config: its YAML block that starts with `domain: edge`.
fn config_from_the_page() -> String {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/behind-envoy.md"))
        .expect("read docs/behind-envoy.md");
    page.split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split_once("```").map(|(yaml, _)| yaml))
        .find(|yaml| yaml.starts_with("domain: edge"))
        .expect("the page has a config block for domain edge")
        .to_owned()
}

/// One descriptor per list of entries, as Envoy builds them from a route's `rate_limits`.
fn request(descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(key, value)| Entry {
                        key: (*key).to_owned(),
                        value: (*value).to_owned(),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

async fn code(client: &mut RateLimitServiceClient<Channel>, descriptors: &[&[(&str, &str)]]) -> Code {
    let answer = client
        .should_rate_limit(request(descriptors))
        .await
        .expect("call")
        .into_inner();
    Code::try_from(answer.overall_code).expect("a known code")
}

fn movies(ip: &str) -> [(&str, &str); 2] {
    [("generic_key", "movies"), ("remote_address", ip)]
}

fn login_by_address(ip: &str) -> [(&str, &str); 2] {
    [("generic_key", "login"), ("remote_address", ip)]
}

fn login_by_user(user: &str) -> [(&str, &str); 2] {
    [("generic_key", "login"), ("username", user)]
}

async fn start() -> (Server, RateLimitServiceClient<Channel>, tempfile::NamedTempFile) {
    let config = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(config.path(), config_from_the_page()).expect("write the config");
    let server = Server::start(&["--config", config.path().to_str().expect("utf-8 path")]);
    let client = RateLimitServiceClient::connect(server.grpc.clone())
        .await
        .expect("connect");
    (server, client, config)
}

#[tokio::test]
async fn movies_admit_twenty_a_minute_per_address_then_penalise() {
    let (_server, mut client, _config) = start().await;
    for _ in 0..20 {
        assert_eq!(code(&mut client, &[&movies("203.0.113.9")]).await, Code::Ok);
    }
    assert_eq!(
        code(&mut client, &[&movies("203.0.113.9")]).await,
        Code::OverLimit
    );
    assert_eq!(
        code(&mut client, &[&movies("203.0.113.9")]).await,
        Code::OverLimit
    );
    // Another address has its own budget.
    assert_eq!(code(&mut client, &[&movies("198.51.100.4")]).await, Code::Ok);
}

#[tokio::test]
async fn login_locks_an_address_after_five_tries_and_a_user_after_ten_from_anywhere() {
    let (_server, mut client, _config) = start().await;
    // Five tries from one address, each for a different user.
    let users: Vec<String> = (0..6).map(|i| format!("user{i}")).collect();
    for user in &users[..5] {
        let descriptors: [&[(&str, &str)]; 2] = [&login_by_address("203.0.113.9"), &login_by_user(user)];
        assert_eq!(code(&mut client, &descriptors).await, Code::Ok);
    }
    let descriptors: [&[(&str, &str)]; 2] = [&login_by_address("203.0.113.9"), &login_by_user(&users[5])];
    assert_eq!(code(&mut client, &descriptors).await, Code::OverLimit);

    // One user guessed from ten addresses: the eleventh try is refused wherever it comes from.
    let addresses: Vec<String> = (1..=11).map(|i| format!("198.51.100.{i}")).collect();
    for address in &addresses[..10] {
        let descriptors: [&[(&str, &str)]; 2] = [&login_by_address(address), &login_by_user("alice")];
        assert_eq!(code(&mut client, &descriptors).await, Code::Ok);
    }
    let descriptors: [&[(&str, &str)]; 2] = [&login_by_address(&addresses[10]), &login_by_user("alice")];
    assert_eq!(code(&mut client, &descriptors).await, Code::OverLimit);

    // The refused requests spent nothing: user5 was refused by the locked address only, so its
    // budget is whole, and the eleventh address still has all five tries.
    for _ in 0..5 {
        let descriptors: [&[(&str, &str)]; 2] =
            [&login_by_address(&addresses[10]), &login_by_user(&users[5])];
        assert_eq!(code(&mut client, &descriptors).await, Code::Ok);
    }
}
