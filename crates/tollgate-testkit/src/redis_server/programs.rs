//! Which programs the spawners run (`redis-server` and `redis-cli`, or what [`SERVER_VAR`] and
//! [`CLI_VAR`] name), and running `redis-cli`.

use std::ffi::OsString;
use std::io;
use std::process::{Command, Stdio};

pub(super) const SERVER_NOT_FOUND: &str = "redis-server not found on PATH: install it with \
     `apt-get install -y redis-server` (./scripts/test.sh does this)";
const CLI_NOT_FOUND: &str = "redis-cli not found on PATH: install it with \
     `apt-get install -y redis-server` (./scripts/test.sh does this)";

/// The environment variable naming the server program the spawners run instead of
/// `redis-server`, such as Valkey's `valkey-server`: a path, or a name looked up on `PATH`.
pub const SERVER_VAR: &str = "TOLLGATE_REDIS_SERVER";
/// The environment variable naming the command-line client run instead of `redis-cli` (for
/// [`RedisServer::cli`](super::RedisServer::cli) and cluster creation). Debian's `redis-cli`
/// also builds Valkey clusters, so it can stay unset when only [`SERVER_VAR`] is.
pub const CLI_VAR: &str = "TOLLGATE_REDIS_CLI";

/// The server program the spawners run: [`SERVER_VAR`] when set and not empty, else
/// `redis-server`.
///
/// ```
/// let program = tollgate_testkit::redis_server::server_program();
/// assert!(!program.is_empty());
/// ```
pub fn server_program() -> OsString {
    program_from(SERVER_VAR, "redis-server")
}

/// The command-line client the test kit runs: [`CLI_VAR`] when set and not empty, else
/// `redis-cli`.
///
/// ```
/// let program = tollgate_testkit::redis_server::cli_program();
/// assert!(!program.is_empty());
/// ```
pub fn cli_program() -> OsString {
    program_from(CLI_VAR, "redis-cli")
}

fn program_from(var: &str, default: &str) -> OsString {
    std::env::var_os(var)
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.into())
}

/// What a program that could not be found is called in errors, with where its name came from.
pub(super) fn not_found(var: &str, program: &OsString, default_advice: &str) -> String {
    match std::env::var_os(var).filter(|value| !value.is_empty()) {
        Some(_) => format!("{} (from {var}) not found", program.to_string_lossy()),
        None => default_advice.to_owned(),
    }
}

/// Runs redis-cli with `args` and returns its standard output without the trailing newline.
///
/// # Panics
///
/// When redis-cli is missing or exits with a failure.
pub(crate) fn run_redis_cli(args: &[&str]) -> String {
    try_run_redis_cli(args).unwrap_or_else(|e| panic!("{e}"))
}

/// [`run_redis_cli`] that returns the error instead of panicking: `NotFound` when redis-cli is
/// missing, otherwise an error quoting the command and what it printed.
pub(crate) fn try_run_redis_cli(args: &[&str]) -> io::Result<String> {
    let program = cli_program();
    let output = Command::new(&program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => io::Error::new(
                io::ErrorKind::NotFound,
                not_found(CLI_VAR, &program, CLI_NOT_FOUND),
            ),
            _ => io::Error::new(
                e.kind(),
                format!("could not run {}: {e}", program.to_string_lossy()),
            ),
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "`{} {}` failed ({}):\n{}{}",
            program.to_string_lossy(),
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr),
            stdout
        )));
    }
    Ok(stdout.trim_end_matches('\n').to_owned())
}
