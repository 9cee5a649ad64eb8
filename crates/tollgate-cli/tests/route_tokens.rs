//! Which token each route needs, three ways that must agree: what the real binary answers (no
//! token, the app token, the admin token), the security requirements of its OpenAPI document,
//! and the `token` column of the README's route table and of the table in
//! `docs/operations.md`. A route whose protection changes in one place and not the others fails
//! here.

mod binary;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use binary::Server;
use reqwest::{Client, Method, StatusCode};
use serde_json::Value;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest, UInt64Value};

const ADMIN: &str = "admin-s3cret";
const APP: &str = "app-s3cret";

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// Nothing: open to every caller.
    None,
    /// The app token or the admin token.
    App,
    /// The admin token.
    Admin,
}

impl Token {
    fn parse(cell: &str) -> Option<Token> {
        match cell.trim() {
            "none" => Some(Token::None),
            "app" => Some(Token::App),
            "admin" => Some(Token::Admin),
            _ => None,
        }
    }
}

/// (`GET`, `/v1/limits/{policy}/{key}`).
type Operation = (String, String);

fn repo_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// The rows of the first table under `heading` whose first cell names routes: each code span
/// of the form `METHOD[, METHOD...] /path[?query]` is an operation, with the token in the cell
/// of the column headed `token`.
fn table(page: &str, heading: &str, file: &str) -> BTreeMap<Operation, Token> {
    let mut lines = page.lines().skip_while(|line| *line != heading);
    assert!(lines.next().is_some(), "{file} has no `{heading}`");
    let mut rows = lines
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'));
    let header: Vec<&str> = cells(rows.next().expect("a table"));
    let column = header
        .iter()
        .position(|c| *c == "token")
        .unwrap_or_else(|| panic!("{file}: the table under `{heading}` has no `token` column"));
    let mut operations = BTreeMap::new();
    for row in rows.skip(1) {
        let cells = cells(row);
        let token = Token::parse(cells[column])
            .unwrap_or_else(|| panic!("{file}: `{}` is not none, app or admin in {row}", cells[column]));
        for span in cells[0].split('`').skip(1).step_by(2) {
            let Some((methods, path)) = span.rsplit_once(' ') else {
                continue;
            };
            if !path.starts_with('/') {
                continue;
            }
            let path = path.split('?').next().unwrap_or(path);
            for method in methods.split(", ") {
                assert!(
                    ["GET", "POST", "PUT", "DELETE"].contains(&method),
                    "{file}: `{span}` in {row}"
                );
                let previous = operations.insert((method.to_owned(), path.to_owned()), token);
                assert!(previous.is_none(), "{file}: {method} {path} is listed twice");
            }
        }
    }
    assert!(!operations.is_empty(), "{file}: no routes under `{heading}`");
    operations
}

fn cells(row: &str) -> Vec<&str> {
    row.trim().trim_matches('|').split(" | ").map(str::trim).collect()
}

/// Each operation of the OpenAPI document and the token its security requirements name.
fn openapi(document: &Value) -> BTreeMap<Operation, Token> {
    let mut operations = BTreeMap::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            let names: Vec<String> = operation["security"]
                .as_array()
                .map(|requirements| {
                    requirements
                        .iter()
                        .flat_map(|r| r.as_object().expect("requirement").keys().cloned())
                        .collect()
                })
                .unwrap_or_default();
            let token = match names.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                [] => Token::None,
                ["admin_token"] => Token::Admin,
                ["app_token", "admin_token"] => Token::App,
                ref other => panic!("{method} {path}: unexpected security {other:?}"),
            };
            let optional = operation["security"]
                .as_array()
                .is_none_or(|r| r.iter().any(|r| r.as_object().is_some_and(|o| o.is_empty())));
            assert!(
                optional,
                "{method} {path}: a server without tokens asks for none (`{{}}`)"
            );
            operations.insert((method.to_uppercase(), path.clone()), token);
        }
    }
    operations
}

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// The status of `method path` with `token` (a JSON `{}` body for POST and PUT).
async fn status(server: &Server, (method, path): &Operation, token: Option<&str>) -> StatusCode {
    let concrete = path
        .replace("{policy}", "demo")
        .replace("{purpose}", "login")
        .replace("{key}", "k")
        .replace("{prefix}", "p");
    let method = Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = client().request(method.clone(), server.url(&concrete));
    if method == Method::POST || method == Method::PUT {
        request = request.header("content-type", "application/json").body("{}");
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("request").status()
}

/// What the server does: the least token that is not answered 401.
async fn behaviour(server: &Server, operation: &Operation) -> Token {
    let none = status(server, operation, None).await;
    let app = status(server, operation, Some(APP)).await;
    let admin = status(server, operation, Some(ADMIN)).await;
    let refused = StatusCode::UNAUTHORIZED;
    assert_ne!(admin, refused, "{operation:?}: the admin token opens every route");
    match (none == refused, app == refused) {
        (false, false) => Token::None,
        (true, false) => Token::App,
        (true, true) => Token::Admin,
        (false, true) => panic!("{operation:?}: open without a token but refused with the app token"),
    }
}

#[tokio::test]
async fn every_route_needs_the_same_token_in_the_server_the_openapi_document_and_the_docs() {
    let server = Server::start(&["--admin-token", ADMIN, "--app-token", APP]);
    let document: Value = client()
        .get(server.url("/openapi.json"))
        .send()
        .await
        .expect("openapi")
        .json()
        .await
        .expect("json");
    let documented = openapi(&document);
    let readme = table(&repo_file("README.md"), "## The HTTP API", "README.md");
    let operations = table(
        &repo_file("docs/operations.md"),
        "## Routes by token",
        "docs/operations.md",
    );
    assert_eq!(
        readme, operations,
        "README.md and docs/operations.md list the same routes alike"
    );
    // Routes outside the OpenAPI document (the dashboard's) are in the tables only.
    for (operation, token) in &documented {
        assert_eq!(
            readme.get(operation),
            Some(token),
            "{operation:?}: the OpenAPI document says {token:?}, README.md says otherwise"
        );
    }
    for (operation, token) in &readme {
        if let Some(in_document) = documented.get(operation) {
            assert_eq!(in_document, token, "{operation:?}");
        }
        assert_eq!(
            behaviour(&server, operation).await,
            *token,
            "{operation:?}: the server's answers differ from the tables"
        );
    }
    // Each kind of route is present, so the walk cannot pass by checking nothing.
    for kind in [Token::None, Token::App, Token::Admin] {
        assert!(
            readme.values().any(|t| *t == kind),
            "no {kind:?} route in the tables"
        );
    }
}

/// The token setups a server can start with: which tokens it has.
const SETUPS: [(Option<&str>, Option<&str>); 4] = [
    (None, None),
    (None, Some(APP)),
    (Some(ADMIN), None),
    (Some(ADMIN), Some(APP)),
];

/// Whether a server with `admin` and `app` tokens lets a caller presenting `given` through a
/// route that needs `token`: least privilege in every setup. With any token set, admin routes
/// take the admin token only, so a server with only an app token has them closed to everyone.
fn admitted(admin: Option<&str>, app: Option<&str>, token: Token, given: Option<&str>) -> bool {
    if admin.is_none() && app.is_none() {
        return true;
    }
    match token {
        Token::None => true,
        Token::App => given.is_some() && (given == admin || given == app),
        Token::Admin => given.is_some() && given == admin,
    }
}

/// The server's command-line arguments for a setup.
fn setup_args(admin: Option<&'static str>, app: Option<&'static str>) -> Vec<&'static str> {
    let mut args = Vec::new();
    if let Some(admin) = admin {
        args.extend(["--admin-token", admin]);
    }
    if let Some(app) = app {
        args.extend(["--app-token", app]);
    }
    args
}

#[tokio::test]
async fn every_route_takes_the_least_token_in_every_setup_of_tokens() {
    let readme = table(&repo_file("README.md"), "## The HTTP API", "README.md");
    for (admin, app) in SETUPS {
        let server = Server::start(&setup_args(admin, app));
        for (operation, token) in &readme {
            for given in [None, Some(APP), Some(ADMIN)] {
                let answer = status(&server, operation, given).await;
                let refused = matches!(answer, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
                assert_eq!(
                    !refused,
                    admitted(admin, app, *token, given),
                    "{operation:?} ({token:?}) on a server with admin {admin:?} and app {app:?}, \
                     called with {given:?}: {answer}"
                );
                // Closed is told apart from a missing token: no token could open it.
                if refused {
                    let closed = *token == Token::Admin && admin.is_none();
                    let expected = if closed {
                        StatusCode::FORBIDDEN
                    } else {
                        StatusCode::UNAUTHORIZED
                    };
                    assert_eq!(answer, expected, "{operation:?} with {given:?}");
                }
            }
        }
    }
}

/// An Envoy domain whose `ip` descriptor allows 2 a minute.
const EDGE: &str = "\
domain: edge
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 2}
";

/// The Envoy request of the `ip` descriptor: a check, a charge (its own `hits_addend`) or a
/// refund (`is_negative_hits`).
fn envoy_request(ip: &str, act: &str) -> RateLimitRequest {
    let (own, negative) = match act {
        "check" => (None, false),
        "charge" => (Some(1), false),
        "refund" => (Some(1), true),
        other => panic!("{other}"),
    };
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "ip".into(),
                value: ip.into(),
            }],
            hits_addend: own.map(|value| UInt64Value { value }),
            is_negative_hits: negative,
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// The JSON form of [`envoy_request`], for `POST /json`.
fn envoy_json(ip: &str, act: &str) -> String {
    let extra = match act {
        "check" => "",
        "charge" => r#", "hits_addend": 1"#,
        "refund" => r#", "hits_addend": 1, "is_negative_hits": true"#,
        other => panic!("{other}"),
    };
    format!(
        r#"{{"domain": "edge", "descriptors": [{{"entries": [{{"key": "ip", "value": "{ip}"}}]{extra}}}]}}"#
    )
}

#[tokio::test]
async fn envoy_refunds_and_charges_take_the_app_token_on_json_and_grpc_in_every_setup() {
    let config = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(config.path(), EDGE).expect("write the config");
    let path = config.path().to_str().expect("utf-8 path");
    for (admin, app) in SETUPS {
        let mut args = setup_args(admin, app);
        args.extend(["--config", path]);
        let server = Server::start(&args);
        let mut rls = RateLimitServiceClient::connect(server.grpc.clone())
            .await
            .expect("connect");
        for (a, act) in ["check", "charge", "refund"].into_iter().enumerate() {
            let token = if act == "check" { Token::None } else { Token::App };
            for (n, given) in [None, Some(APP), Some(ADMIN)].into_iter().enumerate() {
                let expected = admitted(admin, app, token, given);
                let context =
                    format!("{act} with {given:?} on a server with admin {admin:?} and app {app:?}");
                // A key of its own for each call, so no answer depends on an earlier one.
                let ip = format!("192.0.2.{}", a * 10 + n);
                let mut request = client()
                    .post(server.url("/json"))
                    .header("content-type", "application/json")
                    .body(envoy_json(&ip, act));
                if let Some(given) = given {
                    request = request.bearer_auth(given);
                }
                let answer = request.send().await.expect("json");
                let status = answer.status();
                let body = answer.text().await.expect("body");
                if expected {
                    assert_eq!(status, StatusCode::OK, "POST /json {context}: {body}");
                } else {
                    assert_eq!(status, StatusCode::UNAUTHORIZED, "POST /json {context}");
                    assert!(body.contains("app token"), "{body}");
                }
                let mut call = tonic::Request::new(envoy_request(&format!("{ip}0"), act));
                if let Some(given) = given {
                    let value = format!("Bearer {given}").parse().expect("metadata");
                    call.metadata_mut().insert("authorization", value);
                }
                match rls.should_rate_limit(call).await {
                    Ok(answer) => {
                        assert!(expected, "gRPC {context} was answered");
                        assert_eq!(
                            answer.into_inner().overall_code,
                            Code::Ok as i32,
                            "gRPC {context}"
                        );
                    }
                    Err(refused) => {
                        assert!(!expected, "gRPC {context}: {refused:?}");
                        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "gRPC {context}");
                    }
                }
            }
        }
    }
}

#[tokio::test]
async fn a_trusted_grpc_port_takes_envoy_refunds_and_charges_without_a_token_and_json_still_needs_it() {
    let config = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(config.path(), EDGE).expect("write the config");
    let path = config.path().to_str().expect("utf-8 path");
    let server = Server::start(&["--app-token", APP, "--trusted-grpc", "--config", path]);
    let mut rls = RateLimitServiceClient::connect(server.grpc.clone())
        .await
        .expect("connect");
    for act in ["charge", "refund"] {
        let answer = rls.should_rate_limit(envoy_request("192.0.2.9", act)).await;
        assert!(answer.is_ok(), "{act}: {answer:?}");
        let json = client()
            .post(server.url("/json"))
            .header("content-type", "application/json")
            .body(envoy_json("192.0.2.9", act))
            .send()
            .await
            .expect("json");
        assert_eq!(json.status(), StatusCode::UNAUTHORIZED, "{act} through /json");
    }
}

/// `tollgate serve` with `args` and `env`, which must stop at start: its exit status and the
/// line naming `expect` (bounded by the child process's own deadlines).
fn startup_error(args: &[&str], env: &[(&str, &str)], expect: &str) -> (bool, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .args(args)
        .envs(env.iter().copied());
    let mut child = tollgate_testkit::ChildProcess::start(&mut command);
    let line = child.wait_for(expect);
    (child.wait_exit().success(), line)
}

#[test]
fn an_app_token_equal_to_the_admin_token_or_empty_is_a_startup_error() {
    let (ok, line) = startup_error(
        &["--admin-token", "same", "--app-token", "same"],
        &[],
        "app token",
    );
    assert!(!ok);
    assert!(
        line.contains("the app token must differ from the admin token"),
        "{line}"
    );
    let (ok, line) = startup_error(&["--app-token", ""], &[], "app token");
    assert!(!ok);
    assert!(line.contains("must not be empty"), "{line}");
}

#[test]
fn tokens_a_client_cannot_send_as_they_are_are_startup_errors() {
    // HTTP trims a header's value, so an app token of the admin token plus a space would open
    // the admin routes; a newline cannot be sent at all.
    let (ok, line) = startup_error(
        &["--admin-token", "same", "--app-token", "same "],
        &[],
        "app token",
    );
    assert!(!ok);
    assert!(line.contains("printable ASCII without spaces"), "{line}");
    let (ok, line) = startup_error(&["--admin-token", "a\nb"], &[], "admin token");
    assert!(!ok);
    assert!(line.contains("printable ASCII"), "{line}");
}

#[test]
fn the_app_token_is_read_from_tollgate_app_token_as_the_admin_token_from_its_variable() {
    let (ok, line) = startup_error(
        &[],
        &[("TOLLGATE_APP_TOKEN", "same"), ("TOLLGATE_ADMIN_TOKEN", "same")],
        "app token",
    );
    assert!(!ok);
    assert!(line.contains("must differ"), "{line}");
}
