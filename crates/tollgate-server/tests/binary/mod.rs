//! The real `tollgate` binary as a child process, for tests that talk to it over sockets.
//!
//! It is started with `--http 127.0.0.1:0` and the port is read from the address it prints, so
//! tests never race for ports. Drop kills and reaps the child, by its own handle.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub struct Server {
    child: Child,
    pub http: String,
    pub grpc: String,
    lines: mpsc::Receiver<String>,
}

impl Server {
    /// `tollgate serve` with `args` added, once it listens.
    pub fn start(args: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the tollgate binary");
        let mut server = Self::reading(child);
        let line = server.wait_for("http listening on ");
        server.http = format!("http://{}", line.rsplit(' ').next().unwrap_or_default());
        let line = server.wait_for("grpc listening on ");
        server.grpc = format!("http://{}", line.rsplit(' ').next().unwrap_or_default());
        server
    }

    /// `tollgate proxy` with `args` added, once it listens; its address is in `http`.
    pub fn start_proxy(args: &[&str]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["proxy", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the tollgate binary");
        let mut server = Self::reading(child);
        let line = server.wait_for("proxy listening on ");
        server.http = format!("http://{}", line.rsplit(' ').next().unwrap_or_default());
        server
    }

    /// Collects the child's stdout and stderr lines.
    fn reading(mut child: Child) -> Self {
        let (sender, lines) = mpsc::channel();
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let sender = sender.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = sender.send(line);
                }
            });
        }
        Server {
            child,
            http: String::new(),
            grpc: String::new(),
            lines,
        }
    }

    /// The next output line containing `text` (panics after 10 s, showing what was printed).
    pub fn wait_for(&mut self, text: &str) -> String {
        let mut seen = vec![];
        loop {
            match self.lines.recv_timeout(Duration::from_secs(10)) {
                Ok(line) if line.contains(text) => return line,
                Ok(line) => seen.push(line),
                Err(_) => panic!("tollgate never printed {text:?}; it printed: {seen:#?}"),
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.http)
    }

    /// Sends a signal (`HUP`, `TERM`) to this child, by its PID.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    /// Waits for the child to exit (up to 10 s).
    pub fn wait_exit(&mut self) -> ExitStatus {
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("tollgate did not exit");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tollgate check-config path`: (success, stdout + stderr).
pub fn check_config(path: &Path) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("check-config")
        .arg(path)
        .output()
        .expect("run tollgate check-config");
    let text = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}
