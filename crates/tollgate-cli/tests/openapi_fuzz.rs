//! schemathesis, an outside OpenAPI fuzzer, against the real binary: it reads the served
//! `/openapi.json`, generates requests for every operation (valid and invalid), and checks every
//! answer against the document: no 5xx, documented status codes, content types, headers and body
//! schemas (problem+json included), and that schema-violating requests are refused.
//!
//! `./scripts/test.sh` installs schemathesis (PyPI) into `target/schemathesis` and points
//! `TOLLGATE_SCHEMATHESIS` at it. Left out is schemathesis's "positive data acceptance" check:
//! whether a request is acceptable depends on the configured policies as well as on the document
//! (a cost above what the policy can ever admit is refused with a 400).

mod binary;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use binary::Server;

/// The statuses that count as refusing a schema-violating request.
const REFUSALS: [&str; 12] = [
    "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429",
];

/// How long one schemathesis run may take before the test gives up on it.
const RUN_LIMIT: Duration = Duration::from_secs(600);

fn schemathesis() -> PathBuf {
    if let Some(path) = std::env::var_os("TOLLGATE_SCHEMATHESIS") {
        return PathBuf::from(path);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/schemathesis/bin/schemathesis");
    if venv.exists() {
        return venv;
    }
    panic!(
        "schemathesis not found: run ./scripts/test.sh (it installs it into target/schemathesis), \
         or set TOLLGATE_SCHEMATHESIS to a schemathesis executable (pip install 'schemathesis>=4,<5')"
    );
}

#[test]
fn schemathesis_finds_no_answer_that_breaks_the_served_document() {
    let server = Server::start(&[]);
    let work = tempfile::tempdir().unwrap();
    // Path parameters that reach the demo policies instead of a 404: the rate policy `demo`,
    // and the concurrency policy `downloads` on the concurrency routes. A schema-violating
    // request counts as refused with schemathesis's usual 4xx list plus 413: a body over the
    // 64 KiB limit is refused before it is read, whatever else is wrong with it.
    std::fs::write(
        work.path().join("schemathesis.toml"),
        format!(
            "[parameters]\n\"path.policy\" = \"demo\"\n\n\
         [[operations]]\ninclude-path-regex = \"^/v1/concurrency/\"\n\
         parameters = {{ \"path.policy\" = \"downloads\" }}\n\n\
         [checks.negative_data_rejection]\nexpected-statuses = {REFUSALS:?}\n"
        ),
    )
    .unwrap();
    let log_path = work.path().join("schemathesis.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut command = Command::new(schemathesis());
    command.args(["run", &server.url("/openapi.json")]);
    // A failing run prints its seed; setting it here replays that run.
    if let Some(seed) = std::env::var_os("TOLLGATE_SCHEMATHESIS_SEED") {
        command.arg("--seed").arg(seed);
    }
    let mut child = command
        .current_dir(work.path())
        .env("NO_COLOR", "1")
        .args(["--max-examples", "40", "--workers", "1"])
        .args(["--exclude-checks", "positive_data_acceptance"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start schemathesis");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > RUN_LIMIT {
            child.kill().ok();
            child.wait().ok();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    println!("{output}");
    let status = status.unwrap_or_else(|| panic!("schemathesis ran longer than {RUN_LIMIT:?}:\n{output}"));
    assert!(
        status.success(),
        "schemathesis found failures ({status}):\n{output}"
    );
    assert!(
        output.contains("Operations:") && output.contains("29 selected"),
        "{output}"
    );
}
