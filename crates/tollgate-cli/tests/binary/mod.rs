//! The real `tollgate` binary as a child process, for tests that talk to it over sockets.
//!
//! It is started with `--http 127.0.0.1:0` (and `--grpc`, `--listen`) and the ports are read from
//! the addresses it prints, so tests never race for ports. The process itself is a
//! [`ChildProcess`]: killed and reaped on drop, signalled by its PID.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::process::{Command, ExitStatus};

use tollgate_testkit::ChildProcess;

pub struct Server {
    child: ChildProcess,
    /// `http://ADDR` of the HTTP API (or of the proxy).
    pub http: String,
    /// `http://ADDR` of the Envoy rate limit service; empty for the proxy.
    pub grpc: String,
}

fn tollgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
}

impl Server {
    /// `tollgate serve` with `args` added, once it listens.
    pub fn start(args: &[&str]) -> Self {
        let mut child = ChildProcess::start(
            tollgate()
                .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
                .args(args),
        );
        let http = format!("http://{}", child.wait_for_addr("http listening on "));
        let grpc = format!("http://{}", child.wait_for_addr("grpc listening on "));
        Server { child, http, grpc }
    }

    /// `tollgate proxy` with `args` added, once it listens; its address is in `http`.
    pub fn start_proxy(args: &[&str]) -> Self {
        let mut child = ChildProcess::start(tollgate().args(["proxy", "--listen", "127.0.0.1:0"]).args(args));
        let http = format!("http://{}", child.wait_for_addr("proxy listening on "));
        Server {
            child,
            http,
            grpc: String::new(),
        }
    }

    /// The next output line containing `text` (panics, showing what was printed, if none comes).
    pub fn wait_for(&mut self, text: &str) -> String {
        self.child.wait_for(text)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.http)
    }

    /// Sends a signal (`HUP`, `TERM`) to this child, by its PID.
    pub fn signal(&self, name: &str) {
        self.child.signal(name);
    }

    /// Waits for the child to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        self.child.wait_exit()
    }
}

/// `tollgate check-config path`: (success, stdout + stderr).
pub fn check_config(path: &Path) -> (bool, String) {
    let output = tollgate()
        .arg("check-config")
        .arg(path)
        .output()
        .expect("run tollgate check-config");
    let text = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}
