//! The dashboard in a real browser: the real binary serves it, real traffic goes through the
//! HTTP API, and headless Chromium (driven over WebDriver by `chromedriver`) opens the page,
//! gives it the admin token, and must show the same counts as `/metrics` and the denied keys in
//! order. A screenshot is saved as `target/dashboard.png`.
//!
//! Needs the Debian packages `chromium` and `chromium-driver` (`scripts/test.sh` installs them);
//! without them the browser test fails saying so, it never skips.

mod binary;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use binary::Server;
use fantoccini::{Client, ClientBuilder, Locator};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tollgate_testkit::ChildProcess;

const TOKEN: &str = "dashboard-test-token";

/// Two policies with small limits over an hour, so every denial in the test is known.
const CONFIG: &str = "\
policies:
  login:
    algorithm: sliding_log
    limit: 1
    window: 1h
  search:
    algorithm: fixed_window
    limit: 3
    window: 1h
";

/// (policy, key, requests): each key is allowed up to its policy's limit and denied after.
const TRAFFIC: &[(&str, &str, u64)] = &[
    ("login", "mallory", 6),
    ("login", "eve", 4),
    ("login", "trent", 2),
    ("login", "alice", 1),
    ("search", "crawler", 7),
    ("search", "bob", 2),
];

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// Writes the config and starts `tollgate serve` on it with `args` added.
fn start(args: &[&str]) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let config = config.to_str().expect("utf-8 path").to_owned();
    let mut all = vec!["--config", config.as_str()];
    all.extend_from_slice(args);
    (Server::start(&all), dir)
}

/// Sends the traffic; returns the status counts seen, as a check on the numbers asserted later.
async fn drive(server: &Server) -> (u64, u64) {
    let (mut allowed, mut denied) = (0, 0);
    for (policy, key, requests) in TRAFFIC {
        for _ in 0..*requests {
            let status = http()
                .post(server.url("/v1/check"))
                .json(&json!({"policy": policy, "key": key}))
                .send()
                .await
                .expect("check")
                .status();
            match status {
                StatusCode::OK => allowed += 1,
                StatusCode::TOO_MANY_REQUESTS => denied += 1,
                other => panic!("check answered {other}"),
            }
        }
    }
    (allowed, denied)
}

/// `tollgate_decisions_total{policy, outcome}` from the server's `/metrics` (0 when absent).
async fn metric(server: &Server, policy: &str, outcome: &str) -> u64 {
    let text = http()
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    let (policy, outcome) = (format!("policy=\"{policy}\""), format!("outcome=\"{outcome}\""));
    text.lines()
        .filter(|line| line.starts_with("tollgate_decisions_total{"))
        .filter(|line| line.contains(&policy) && line.contains(&outcome))
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .next()
        .unwrap_or(0)
}

/// A program on the `PATH`, or a failure naming the Debian package that provides it.
fn require(program: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{program}` is not installed: the dashboard browser test needs the Debian packages \
                 chromium and chromium-driver (apt-get install -y chromium chromium-driver; \
                 scripts/test.sh installs them); missing: {package}"
            )
        })
}

/// `chromedriver` on a free loopback port, once it says it started; its URL. (A port found
/// free could be taken before chromedriver binds it; then the wait fails, naming what it printed.)
fn start_chromedriver(program: &Path) -> (ChildProcess, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut child = ChildProcess::start(
        Command::new(program).args([format!("--port={port}").as_str(), "--allowed-ips=127.0.0.1"]),
    );
    child.wait_for("started successfully");
    (child, format!("http://127.0.0.1:{port}"))
}

async fn browser(webdriver: &str, chromium: &Path) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-dev-shm-usage",
                "--window-size=1280,1400",
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(webdriver)
        .await
        .expect("start a chromium session through chromedriver")
}

/// Runs `script` in the page and returns its value.
async fn eval(client: &Client, script: &str) -> Value {
    client
        .execute(script, vec![])
        .await
        .unwrap_or_else(|err| panic!("script failed: {err}: {script}"))
}

/// What the page shows of `policy`: totals by outcome, the chart's sum, and the top keys.
async fn shown(client: &Client, policy: &str) -> Value {
    let script = format!(
        r#"
        const card = document.querySelector('[data-testid=policy][data-policy="{policy}"]');
        if (!card) return null;
        const totals = {{}};
        for (const el of card.querySelectorAll('[data-testid^="total-"]')) {{
            totals[el.dataset.testid.slice(6)] = Number(el.textContent);
        }}
        const canvas = card.querySelector('[data-testid=chart]');
        const keys = [...card.querySelectorAll('[data-testid=top-key]')].map(li => [
            li.querySelector('[data-testid=key]').textContent, Number(li.dataset.count)]);
        return {{ totals, sum: Number(canvas.dataset.sum || 0), keys }};
        "#
    );
    eval(client, &script).await
}

#[tokio::test]
async fn the_dashboard_shows_the_traffic_in_headless_chromium() {
    let chromium = require("chromium", "chromium");
    let chromedriver = require("chromedriver", "chromium-driver");
    let (server, _dir) = start(&["--admin-token", TOKEN]);
    let (allowed, denied) = drive(&server).await;
    assert_eq!((allowed, denied), (4 + 5, 9 + 4));

    let mut expected = serde_json::Map::new();
    for policy in ["login", "search"] {
        let mut totals = serde_json::Map::new();
        for outcome in [
            "allowed",
            "denied",
            "shadow_denied",
            "degraded",
            "error",
            "blocked",
        ] {
            totals.insert(outcome.into(), metric(&server, policy, outcome).await.into());
        }
        expected.insert(policy.into(), Value::Object(totals));
    }
    assert_eq!(expected["login"]["allowed"], 4);
    assert_eq!(expected["login"]["denied"], 9);
    assert_eq!(expected["search"]["allowed"], 3 + 2);
    assert_eq!(expected["search"]["denied"], 4);

    let (mut driver, webdriver) = start_chromedriver(&chromedriver);
    let client = browser(&webdriver, &chromium).await;
    client
        .goto(&server.url("/dashboard"))
        .await
        .expect("open the dashboard");
    // The data needs the token: the page asks for it.
    let input = client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(
            "#token-form:not([hidden]) [data-testid=token-input]",
        ))
        .await
        .expect("token input");
    let form_shown = eval(&client, "return !document.querySelector('#token-form').hidden;").await;
    assert_eq!(form_shown, true, "the page did not ask for the token");
    input.send_keys(TOKEN).await.expect("type the token");
    client
        .find(Locator::Css("[data-testid=token-submit]"))
        .await
        .expect("submit button")
        .click()
        .await
        .expect("submit the token");

    // Bounded wait until both charts hold all the traffic (a snapshot is taken every second).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (login, search) = loop {
        let seen = (shown(&client, "login").await, shown(&client, "search").await);
        let complete = |view: &Value, policy: &str| {
            let want = expected[policy]["allowed"].as_u64().unwrap_or(0)
                + expected[policy]["denied"].as_u64().unwrap_or(0);
            view["sum"].as_u64() == Some(want) && view["totals"] == expected[policy]
        };
        if complete(&seen.0, "login") && complete(&seen.1, "search") {
            break seen;
        }
        assert!(
            Instant::now() < deadline,
            "the page did not show the traffic within 30 s: login {} search {}; /metrics says {}",
            seen.0,
            seen.1,
            Value::Object(expected.clone())
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(login["keys"], json!([["mallory", 5], ["eve", 3], ["trent", 1]]));
    assert_eq!(search["keys"], json!([["crawler", 4]]));
    // The rest of the picture: store, reload, config.
    let text = |id: &str| format!("return document.querySelector('[data-testid={id}]').textContent;");
    assert_eq!(eval(&client, &text("store-ready")).await, "ready");
    assert_eq!(eval(&client, &text("store-kind")).await, "memory");
    assert_eq!(eval(&client, &text("reload")).await, "none since start");
    let rows = eval(
        &client,
        "return [...document.querySelectorAll('[data-testid=config-policies] tbody tr')].map(r => r.dataset.policy);",
    )
    .await;
    assert_eq!(rows, json!(["login", "search"]));
    // The token is kept for the tab only.
    let kept = eval(&client, "return sessionStorage.getItem('tollgate-admin-token');").await;
    assert_eq!(kept, TOKEN);

    let png = client.screenshot().await.expect("screenshot");
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .expect("target directory");
    std::fs::write(target.join("dashboard.png"), &png).expect("save target/dashboard.png");
    assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");

    client.close().await.expect("end the browser session");
    driver.signal("TERM");
    driver.wait_exit();
}

#[tokio::test]
async fn the_data_needs_the_token_only_when_one_is_set() {
    let (server, _dir) = start(&["--admin-token", TOKEN]);
    let get = |path: &str, token: Option<&str>| {
        let mut request = http().get(server.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    // The page and its assets hold no data: public, with their types and a strict policy.
    for (path, kind) in [
        ("/dashboard", "text/html"),
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/style.css", "text/css"),
    ] {
        let answer = get(path, None).await.expect("asset");
        assert_eq!(answer.status(), StatusCode::OK, "{path}");
        let header = |name: &str| answer.headers()[name].to_str().unwrap_or_default().to_owned();
        assert!(
            header("content-type").starts_with(kind),
            "{path}: {}",
            header("content-type")
        );
        assert!(header("content-security-policy").starts_with("default-src 'self'"));
        assert_eq!(header("x-content-type-options"), "nosniff");
    }
    let refused = get("/dashboard/data", None).await.expect("data");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let wrong = get("/dashboard/data", Some("guess")).await.expect("data");
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let data: Value = get("/dashboard/data", Some(TOKEN))
        .await
        .expect("data")
        .json()
        .await
        .expect("json");
    let names: Vec<&str> = data["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["login", "search"]);
    assert_eq!(data["store"]["ready"], true);

    // Without a token, on the HTTP listener and on the debug listener.
    let (mut open, dir) = start(&["--debug-addr", "127.0.0.1:0"]);
    let line = open.wait_for("debug listening on ");
    let debug = line.rsplit(' ').next().expect("debug address").to_owned();
    drive(&open).await;
    for base in [open.http.clone(), format!("http://{debug}")] {
        let data: Value = http()
            .get(format!("{base}/dashboard/data"))
            .send()
            .await
            .expect("data")
            .json()
            .await
            .expect("json");
        let login = &data["policies"][0];
        assert_eq!(login["name"], "login", "{base}");
        assert_eq!(login["totals"]["denied"], 9, "{base}");
        assert_eq!(login["top_keys"][0]["key"], "mallory", "{base}");
        let page = http()
            .get(format!("{base}/dashboard"))
            .send()
            .await
            .expect("page");
        assert_eq!(page.status(), StatusCode::OK, "{base}");
    }

    // A rejected reload is reported with its message (bounded wait for the reload to happen).
    std::fs::write(dir.path().join("tollgate.yaml"), "policies: [").expect("break the config");
    open.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(15);
    let reload = loop {
        let data: Value = http()
            .get(open.url("/dashboard/data"))
            .send()
            .await
            .expect("data")
            .json()
            .await
            .expect("json");
        if !data["reload"].is_null() {
            break data["reload"].clone();
        }
        assert!(Instant::now() < deadline, "no reload reported within 15 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(reload["ok"], false, "{reload}");
    let error = reload["error"].as_str().unwrap_or_default();
    assert!(error.contains("tollgate.yaml"), "{error}");
}
