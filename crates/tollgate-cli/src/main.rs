//! `tollgate`: the binary. It only parses arguments; the work is in the libraries:
//! `tollgate-server` serves and proxies, `tollgate-config` checks configs and
//! `tollgate-scenarios` runs the benchmarks.
//!
//! # Layout
//!
//! - `listener_args`: the timeout and limit flags every listener has (`serve` and `proxy`).
//! - `main.rs` (this file): the subcommands (`serve`, `proxy`, `check-config`,
//!   `bench`), each turned into the options of the library call that does the work, and the
//!   runtime the server calls run on, and the log set-up: `tracing` events (a failing store, a
//!   rejected reload) go to stderr as text, filtered by `RUST_LOG` (default `warn`, and reload
//!   results at `info`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

mod listener_args;

use clap::{Parser, Subcommand};
use listener_args::{ListenerArgs, UpstreamArgs};
use tollgate_server::serve::{self, Options};
use tollgate_server::state::Settings;

/// Rate limit decisions over HTTP/JSON, for every service in a fleet.
#[derive(Parser)]
#[command(name = "tollgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API and the Envoy rate limit service (demo policies when no --config).
    Serve {
        /// A config file or a directory of them (tollgate policies or envoyproxy/ratelimit).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Store: redis://host:port or redis+cluster://host:port,host:port (default: in memory).
        #[arg(long, env = "TOLLGATE_STORE")]
        store: Option<String>,
        /// HTTP listen address.
        #[arg(long, env = "TOLLGATE_HTTP_ADDR", default_value = "127.0.0.1:8080")]
        http: SocketAddr,
        /// gRPC (Envoy rate limit service) listen address.
        #[arg(long, env = "TOLLGATE_GRPC_ADDR", default_value = "127.0.0.1:8081")]
        grpc: SocketAddr,
        /// Token required by admin endpoints (`Authorization: Bearer <token>`).
        #[arg(long, env = "TOLLGATE_ADMIN_TOKEN")]
        admin_token: Option<String>,
        /// Longest key accepted, in bytes.
        #[arg(long, default_value_t = 1024)]
        max_key_len: usize,
        #[command(flatten)]
        listener: ListenerArgs,
    },
    /// Forward requests to an upstream, applying the config's route policies first.
    Proxy {
        /// Where admitted requests go: http://host:port, optionally with a base path.
        #[arg(long, env = "TOLLGATE_UPSTREAM")]
        upstream: String,
        /// A config file or directory with `policies` and `routes` (default: the demo ones).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Store: redis://host:port or redis+cluster://host:port,host:port (default: in memory).
        #[arg(long, env = "TOLLGATE_STORE")]
        store: Option<String>,
        /// Listen address.
        #[arg(long, env = "TOLLGATE_PROXY_ADDR", default_value = "127.0.0.1:8090")]
        listen: SocketAddr,
        /// A proxy in front of tollgate whose X-Forwarded-For is believed, as a CIDR block
        /// (198.51.100.0/24, ::1/128); repeat for several.
        #[arg(long = "trusted-proxy", value_name = "CIDR")]
        trusted_proxies: Vec<tollgate_tower::Cidr>,
        /// Serve /healthz, /readyz and /metrics on this address (default: no admin listener).
        #[arg(long, env = "TOLLGATE_PROXY_ADMIN_ADDR")]
        admin: Option<SocketAddr>,
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        upstream_deadlines: UpstreamArgs,
    },
    /// Validate a config file or directory without serving; exits non-zero on the first error.
    CheckConfig {
        /// The file or directory.
        path: PathBuf,
    },
    /// Run a scenario (bot, boundary, throughput): Markdown on stdout, optional PNG chart.
    Bench(tollgate_scenarios::BenchArgs),
}

fn main() -> ExitCode {
    init_logs();
    match Cli::parse().command {
        Command::Bench(args) => match tollgate_scenarios::run(&args) {
            Ok(output) => {
                print!("{}", output.markdown);
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("tollgate bench: {err}");
                ExitCode::FAILURE
            }
        },
        Command::Proxy {
            upstream,
            config,
            store,
            listen,
            trusted_proxies,
            admin,
            listener,
            upstream_deadlines,
        } => run(tollgate_server::proxy::run(tollgate_server::proxy::Options {
            upstream,
            config,
            store,
            listen,
            trusted_proxies,
            admin,
            listeners: listener.options(tollgate_server::listener::ListenerOptions::PROXY_MAX_BODY_BYTES),
            forward: upstream_deadlines.options(),
        })),
        Command::CheckConfig { path } => match tollgate_config::load(&path) {
            Ok(limits) => {
                let policies = limits.policies().count();
                let domains = limits.domains().len();
                println!(
                    "{}: ok ({policies} policies, {domains} envoy domains)",
                    path.display()
                );
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("{err}");
                ExitCode::FAILURE
            }
        },
        Command::Serve {
            config,
            store,
            http,
            grpc,
            admin_token,
            max_key_len,
            listener,
        } => {
            let options = Options {
                config,
                store,
                http,
                grpc,
                settings: Settings {
                    admin_token,
                    max_key_len,
                    listeners: listener.options(tollgate_server::http::MAX_BODY),
                },
            };
            run(serve::serve(options))
        }
    }
}

/// Runs `job` on a multi-threaded runtime; an error is printed with its causes.
fn run(job: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("tollgate: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(job) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tollgate: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Sends the libraries' `tracing` events to stderr, filtered by `RUST_LOG` (default `warn`, so a
/// failing store or a rejected config is seen without a flood of per-request lines, plus the
/// reload results at `info`: rare, and what an operator checks after changing a config).
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,tollgate_server::reload=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, never into a log file or collector.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
