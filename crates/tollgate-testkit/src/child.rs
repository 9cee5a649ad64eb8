//! [`ChildProcess`]: a program run by a test as its child (our own binaries, the examples),
//! whose output the test reads line by line and which is killed and reaped when the value drops.
//!
//! Choices, and why:
//!
//! - **Both pipes are read, always, on their own threads.** A pipe nobody reads fills up and
//!   stalls the child; a closed one makes its next write fail. The threads read until the child
//!   closes them, whether or not the test still looks, and hand the lines over a channel.
//! - **Addresses come from the child.** A server started on port 0 prints where it listens
//!   (`tollgate: http listening on 127.0.0.1:PORT`); [`ChildProcess::wait_for_addr`] reads it, so
//!   tests never pick ports and never race for them.
//! - **Waits are bounded and say what happened.** A child that exits or goes quiet fails the test
//!   with everything it printed, instead of hanging it.
//! - **Signals and kills go to this child's PID only**, never to a process found by name, and the
//!   child is waited for after it is killed, which reaps it (a zombie still passes `kill -0`).

use std::io::{self, BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// How long [`ChildProcess::wait_for`] and [`ChildProcess::wait_exit`] wait before failing the
/// test. Generous: it only has to catch a child that will never answer.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A child process with its stdout and stderr read line by line; killed and reaped on drop.
///
/// ```
/// use std::process::Command;
/// use tollgate_testkit::ChildProcess;
///
/// let mut child = ChildProcess::start(
///     Command::new("sh").args(["-c", "echo 'listening on 127.0.0.1:4000'; exec sleep 60"]),
/// );
/// assert_eq!(child.wait_for_addr("listening on ").port(), 4000);
/// drop(child); // killed and reaped: nothing is left running
/// ```
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    program: String,
    lines: mpsc::Receiver<String>,
    /// Every line read so far, quoted when a wait fails.
    seen: Vec<String>,
}

impl ChildProcess {
    /// Starts `command` with stdout and stderr piped (stdin empty); panics, naming the program,
    /// when it cannot be started.
    pub fn start(command: &mut Command) -> ChildProcess {
        let program = command.get_program().to_string_lossy().into_owned();
        Self::try_start(command).unwrap_or_else(|err| panic!("cannot start {program}: {err}"))
    }

    /// [`start`](Self::start), with the error returned.
    pub fn try_start(command: &mut Command) -> io::Result<ChildProcess> {
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (sender, lines) = mpsc::channel();
        let streams = [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
            child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
        ];
        for stream in streams.into_iter().flatten() {
            let sender = sender.clone();
            thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    // Keep reading after the test stops looking, so the child never blocks.
                    let _ = sender.send(line);
                }
            });
        }
        Ok(ChildProcess {
            child,
            program,
            lines,
            seen: Vec::new(),
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line of output (stdout or stderr) containing `text`. Panics, quoting everything
    /// the child printed, if it closes its output or prints no such line within 30 s.
    pub fn wait_for(&mut self, text: &str) -> String {
        let deadline = Instant::now() + WAIT_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(text) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.wait_exit();
                    panic!(
                        "{} exited ({status}) without printing {text:?}; it printed: {:#?}",
                        self.program, self.seen
                    );
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{} did not print {text:?} within {WAIT_TIMEOUT:?}; it printed: {:#?}",
                    self.program, self.seen
                ),
            }
        }
    }

    /// A line containing `text` printed at any time: one an earlier wait already read (a child
    /// may print lines in an order the test does not control, such as a background task's log
    /// line before the listening addresses), or else the next one, as [`wait_for`](Self::wait_for).
    pub fn printed(&mut self, text: &str) -> String {
        match self.seen.iter().find(|line| line.contains(text)) {
            Some(line) => line.clone(),
            None => self.wait_for(text),
        }
    }

    /// The address printed after `marker` on the next line containing it: for
    /// `tollgate: http listening on 127.0.0.1:PORT`, `wait_for_addr("http listening on ")`.
    pub fn wait_for_addr(&mut self, marker: &str) -> SocketAddr {
        let line = self.wait_for(marker);
        let after = line.split_once(marker).map_or("", |(_, after)| after.trim());
        let addr = after.split_whitespace().next().unwrap_or_default();
        addr.parse()
            .unwrap_or_else(|err| panic!("{}: no address after {marker:?} in {line:?}: {err}", self.program))
    }

    /// Every line printed so far that a wait has read.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// Sends signal `name` (`HUP`, `TERM`, ...) to this child, by its PID.
    pub fn signal(&self, name: &str) {
        let pid = self.pid().to_string();
        let status = Command::new("kill")
            .args([format!("-{name}").as_str(), pid.as_str()])
            .status()
            .unwrap_or_else(|err| panic!("cannot run kill: {err}"));
        assert!(status.success(), "kill -{name} {pid} failed: {status}");
    }

    /// Waits for the child to exit (panics after 30 s) and returns its status.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => thread::sleep(POLL_INTERVAL),
                Ok(None) => panic!("{} did not exit within {WAIT_TIMEOUT:?}", self.program),
                Err(err) => panic!("cannot wait for {}: {err}", self.program),
            }
        }
    }

    /// Kills the child (SIGKILL) if it still runs, and reaps it.
    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> ChildProcess {
        ChildProcess::start(Command::new("sh").args(["-c", script]))
    }

    #[test]
    fn reads_the_address_from_stdout_or_stderr() {
        let mut child = sh("echo starting; echo 'x: http listening on 127.0.0.1:4001' >&2; exec sleep 60");
        assert_eq!(
            child.wait_for_addr("http listening on "),
            "127.0.0.1:4001".parse().unwrap()
        );
        // The two pipes are read on their own threads, so only the line waited for is sure to
        // have been read.
        assert!(child.seen().iter().any(|line| line.starts_with("x: http")));
    }

    #[test]
    fn drop_kills_and_reaps_the_child() {
        let child = sh("echo up; exec sleep 60");
        let pid = child.pid().to_string();
        drop(child);
        // A zombie would still answer `kill -0`; a reaped child does not.
        let alive = Command::new("kill").args(["-0", &pid]).status().unwrap();
        assert!(!alive.success(), "process {pid} outlived its ChildProcess");
    }

    #[test]
    fn a_signal_reaches_the_child() {
        // USR1, not HUP: a shell cannot trap a signal that was ignored when it started, and HUP
        // is ignored under `nohup`.
        let mut child = sh("trap 'echo got usr1; exit 7' USR1; echo ready; while :; do sleep 0.05; done");
        child.wait_for("ready");
        child.signal("USR1");
        child.wait_for("got usr1");
        assert_eq!(child.wait_exit().code(), Some(7));
    }

    #[test]
    #[should_panic(expected = "without printing \"listening\"")]
    fn a_child_that_exits_early_fails_with_what_it_printed() {
        let mut child = sh("echo 'bad config' >&2; exit 3");
        child.wait_for("listening");
    }
}
