//! Every test that opens a Redis store gives it the test kit's deadline
//! ([`tollgate_testkit::STORE_TIMEOUT`]) or one of its own, never the stores' 50 ms default,
//! which a loaded CI machine overruns now and then and turns into a degraded answer.
//!
//! The workspace's integration tests are read as text: a store built without `.timeout(..)`, the
//! shortcuts that take the default (`RedisStore::connect`, `AnyStore::redis`), and a binary
//! given `--store` without `--store-timeout` in the same statement are named with their file and
//! line. A statement that does not need the deadline says why with a `// no store deadline:`
//! comment.

use std::path::{Path, PathBuf};

/// The workspace's `crates/*/tests` files, recursively.
fn test_files() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("the crates directory")
        .map(|entry| entry.expect("a crate").path().join("tests"))
        .filter(|dir| dir.is_dir())
        .collect();
    let mut files = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a tests directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !path.ends_with("tollgate-testkit/tests/store_timeouts.rs")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The statement around byte `at`: from the previous `;`, `{` or `}` to the next `;`.
fn statement(text: &str, at: usize) -> &str {
    let start = text[..at].rfind([';', '{', '}']).map_or(0, |i| i + 1);
    let end = text[at..].find(';').map_or(text.len(), |i| at + i + 1);
    &text[start..end]
}

/// What is wrong in one file's text, as `line: problem`.
fn problems(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let line = |at: usize| text[..at].lines().count().max(1);
    for shortcut in ["RedisStore::connect(", "AnyStore::redis("] {
        for (at, _) in text.match_indices(shortcut) {
            found.push(format!("{}: {shortcut}..) takes the default deadline", line(at)));
        }
    }
    for (at, _) in text.match_indices("RedisStore::builder(") {
        let chain = statement(text, at);
        let chain = &chain[..chain.find(".connect").unwrap_or(chain.len())];
        if !chain.contains(".timeout(") {
            found.push(format!("{}: a store built without .timeout(..)", line(at)));
        }
    }
    for (at, _) in text.match_indices("\"--store\"") {
        let call = statement(text, at);
        if !call.contains("\"--store-timeout\"") && !call.contains("// no store deadline:") {
            found.push(format!("{}: --store without --store-timeout", line(at)));
        }
    }
    found
}

#[test]
fn every_test_store_has_a_deadline_chosen_for_tests() {
    let files = test_files();
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("tollgate-redis/tests/faults.rs")),
        "the scan must see the Redis tests: {files:?}"
    );
    let mut all = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a readable test file");
        for problem in problems(&text) {
            all.push(format!("{}:{problem}", file.display()));
        }
    }
    assert!(
        all.is_empty(),
        "give these STORE_TIMEOUT (or a deadline of their own, with a comment):\n{}",
        all.join("\n")
    );
}

#[test]
fn the_scan_names_each_way_to_miss_the_deadline() {
    let text = r#"
        let a = RedisStore::connect(&url).await;
        let b = AnyStore::redis(&url).await;
        let c = RedisStore::builder(target).prefix("p").connect().await;
        let d = RedisStore::builder(target).timeout(STORE_TIMEOUT).connect().await;
        let e = RedisStore::builder(target).connect().await.map(|s| s.timeout(x));
        Server::start(&["--store", &url]);
        Server::start(&["--store", &url, "--store-timeout", &timeout]);
        // no store deadline: refused before any call
        tollgate(&["bench", "--store", "redis://192.0.2.7:6379"]);
    "#;
    let found: Vec<String> = problems(text)
        .iter()
        .map(|p| p.split(':').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(found, ["2", "3", "4", "6", "7"], "{:?}", problems(text));
}
