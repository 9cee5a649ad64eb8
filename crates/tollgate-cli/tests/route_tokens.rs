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

#[tokio::test]
async fn without_tokens_every_route_is_open_and_with_only_the_admin_token_app_routes_take_it() {
    let readme = table(&repo_file("README.md"), "## The HTTP API", "README.md");
    let open = Server::start(&[]);
    for operation in readme.keys() {
        assert_ne!(
            status(&open, operation, None).await,
            StatusCode::UNAUTHORIZED,
            "{operation:?} without any token configured"
        );
    }
    let admin_only = Server::start(&["--admin-token", ADMIN]);
    for (operation, token) in &readme {
        let without = status(&admin_only, operation, None).await;
        assert_eq!(
            without == StatusCode::UNAUTHORIZED,
            *token != Token::None,
            "{operation:?}"
        );
        assert_ne!(
            status(&admin_only, operation, Some(ADMIN)).await,
            StatusCode::UNAUTHORIZED
        );
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
fn the_app_token_is_read_from_tollgate_app_token_as_the_admin_token_from_its_variable() {
    let (ok, line) = startup_error(
        &[],
        &[("TOLLGATE_APP_TOKEN", "same"), ("TOLLGATE_ADMIN_TOKEN", "same")],
        "app token",
    );
    assert!(!ok);
    assert!(line.contains("must differ"), "{line}");
}
