//! Login protection through the real binary: `POST /v1/attempts/{purpose}/{key}/try` counts
//! exactly `max` of many parallel tries on every store (memory, Redis, Redis Cluster), answers a
//! refused try with 429 and `Retry-After`, refuses bad input with a problem naming it; and the
//! older check-then-count recipe is documented with its race.

mod binary;

use std::time::Duration;

use binary::Server;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tollgate_testkit::{RedisCluster, RedisServer, store_timeout_arg};

const TRIES: usize = 50;
const MAX: u64 = 5;

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// One try: the status, the headers and the JSON body.
async fn try_once(
    client: &Client,
    url: &str,
    body: &Value,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let response = client.post(url).json(body).send().await.expect("try");
    let (status, headers) = (response.status(), response.headers().clone());
    (status, headers, response.json().await.expect("json body"))
}

/// 50 tries of one account sent at once over separate connections; the answers.
async fn race(server: &Server, account: &str) -> Vec<(StatusCode, reqwest::header::HeaderMap, Value)> {
    let url = server.url(&format!("/v1/attempts/login/{account}/try"));
    let body = json!({"max": MAX, "ttl_seconds": 3600});
    let tasks: Vec<_> = (0..TRIES)
        .map(|_| {
            let (url, body) = (url.clone(), body.clone());
            // A client each, so no two tries share a connection and they all race.
            tokio::spawn(async move { try_once(&client(), &url, &body).await })
        })
        .collect();
    let mut answers = Vec::with_capacity(TRIES);
    for task in tasks {
        answers.push(task.await.expect("task"));
    }
    answers
}

async fn assert_exactly_max(server: &Server) {
    let answers = race(server, "victim").await;
    let allowed: Vec<_> = answers.iter().filter(|(s, _, _)| *s == StatusCode::OK).collect();
    let refused: Vec<_> = answers
        .iter()
        .filter(|(s, _, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(
        (allowed.len(), refused.len()),
        (MAX as usize, TRIES - MAX as usize),
        "{answers:?}"
    );
    let mut counts: Vec<u64> = allowed
        .iter()
        .map(|(_, _, b)| b["attempts"].as_u64().unwrap())
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 2, 3, 4, 5], "each counted try saw its own count");
    for (_, _, body) in &allowed {
        assert_eq!(body["allowed"], true);
        assert_eq!(body["remaining"], MAX - body["attempts"].as_u64().unwrap());
    }
    for (_, headers, body) in &refused {
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(
            (body["allowed"].clone(), body["attempts"].clone()),
            (json!(false), json!(MAX))
        );
        let ttl = body["ttl_seconds"].as_u64().expect("ttl_seconds");
        assert!((1..=3600).contains(&ttl), "{ttl}");
        assert_eq!(headers["retry-after"], ttl.to_string().as_str());
    }
    let counter: Value = client()
        .get(server.url("/v1/attempts/login/victim"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(counter["attempts"], MAX, "refused tries count nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tries_count_exactly_max_on_memory() {
    let server = Server::start(&[]);
    assert_exactly_max(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tries_count_exactly_max_on_redis() {
    let redis = RedisServer::start();
    let server = Server::start(&["--store", &redis.url(), "--store-timeout", &store_timeout_arg()]);
    assert_exactly_max(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tries_count_exactly_max_on_a_cluster() {
    let cluster = RedisCluster::start();
    let server = Server::start(&[
        "--store",
        &cluster.store_url(),
        "--store-timeout",
        &store_timeout_arg(),
    ]);
    assert_exactly_max(&server).await;
}

#[tokio::test]
async fn a_good_password_clears_the_counter_with_the_app_token() {
    let server = Server::start(&["--app-token", "app-s3cret", "--admin-token", "admin-s3cret"]);
    let url = server.url("/v1/attempts/login/alice");
    let body = json!({"max": 1, "ttl_seconds": 60});
    let client = client();
    let tried = client
        .post(format!("{url}/try"))
        .bearer_auth("app-s3cret")
        .json(&body)
        .send()
        .await
        .expect("try");
    assert_eq!(tried.status(), StatusCode::OK);
    let cleared = client
        .delete(&url)
        .bearer_auth("app-s3cret")
        .send()
        .await
        .expect("clear");
    assert_eq!(cleared.status(), StatusCode::NO_CONTENT);
    let again = client
        .post(format!("{url}/try"))
        .bearer_auth("app-s3cret")
        .json(&body)
        .send()
        .await
        .expect("try");
    assert_eq!(again.status(), StatusCode::OK, "the account starts afresh");
}

#[tokio::test]
async fn bad_tries_get_a_400_problem_naming_the_field() {
    let server = Server::start(&[]);
    let url = server.url("/v1/attempts/login/mallory/try");
    let client = client();
    for (body, message) in [
        (r#"{"max": 0, "ttl_seconds": 60}"#, "max"),
        (r#"{"max": 1000000001, "ttl_seconds": 60}"#, "max is 1000000001"),
        (r#"{"max": 5, "ttl_seconds": 0}"#, "ttl"),
        (r#"{"max": 5, "ttl_seconds": 86400001}"#, "ttl"),
        (r#"{"max": 5}"#, "missing field `ttl_seconds`"),
        (r#"{"ttl_seconds": 60}"#, "missing field `max`"),
        (r#"{"max": -1, "ttl_seconds": 60}"#, "invalid value"),
        (
            r#"{"max": 5, "ttl_seconds": 60, "cost": 2}"#,
            "unknown field `cost`",
        ),
        ("not json", "invalid JSON body"),
    ] {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("post");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{body}"
        );
        let problem: Value = response.json().await.expect("problem");
        let detail = problem["detail"].as_str().expect("detail");
        assert!(detail.contains(message), "{body}: {detail}");
    }
    let empty_purpose = client
        .post(server.url("/v1/attempts//mallory/try"))
        .json(&json!({"max": 5, "ttl_seconds": 60}))
        .send()
        .await
        .expect("post");
    assert!(
        empty_purpose.status().is_client_error(),
        "{}",
        empty_purpose.status()
    );
}

/// The check-then-count recipe stays available, but the login page says why it leaks and what
/// to use instead, and the check route's own documentation says so too.
#[test]
fn the_check_then_count_recipe_is_documented_with_its_race() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let login = std::fs::read_to_string(root.join("docs/login.md")).expect("docs/login.md");
    let section = login
        .split("\n## ")
        .find(|s| s.starts_with("Check, then count"))
        .expect("docs/login.md has a section `## Check, then count`");
    for needed in ["/check?max=", "parallel", "/try"] {
        assert!(section.contains(needed), "the section names {needed:?}");
    }
    let http_api = std::fs::read_to_string(root.join("docs/http-api.md")).expect("docs/http-api.md");
    let check = http_api
        .split("\n### ")
        .find(|s| s.starts_with("`GET /v1/attempts/{purpose}/{key}/check`"))
        .expect("docs/http-api.md documents the check");
    assert!(
        check.contains("login.md"),
        "the check's reference links the login page"
    );
    assert!(
        check.contains("parallel"),
        "the check's reference states the race"
    );
}
