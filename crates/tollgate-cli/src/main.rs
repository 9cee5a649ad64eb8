//! `tollgate`: the binary. It only parses arguments; the work is in the libraries:
//! `tollgate-server` serves and proxies, `tollgate-config` checks configs and
//! `tollgate-scenarios` runs the benchmarks.
//!
//! # Layout
//!
//! - `decision_log_args`: the decision log flags of `serve` and `proxy`.
//! - `listener_args`: the timeout and limit flags every listener has (`serve` and `proxy`).
//! - `envoy_args`: the flags of the Envoy service's settings (`serve`, `explain`,
//!   `check-config`).
//! - `grpc_tls_args`: the gRPC port's TLS flags of `serve`, put together with envoyproxy/ratelimit's
//!   TLS variables.
//! - `main.rs` (this file): the subcommands (`serve`, `proxy`, `explain`, `check-config`,
//!   `test`, `replay`, `bench`, `completions`, `man`), each turned into the options of the library call that does the work, and the
//!   runtime the server calls run on (with envoyproxy/ratelimit's environment variables, read by
//!   `envoy_env`, filling in what no flag gives), and the log set-up: `tracing` events (a failing store, a
//!   rejected reload) go to stderr as text or JSON, filtered by `RUST_LOG` (default: warnings and
//!   reload results).
//!
//! The process allocates with mimalloc: a request through hyper, h2 and tonic allocates and frees
//! dozens of small buffers, and the C library's allocator spent about a tenth of a call's
//! instructions on them (`scripts/grpc-instructions.sh` counts the difference).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

mod decision_log_args;
mod env_var;
mod envoy_args;
mod envoy_env;
mod grpc_tls_args;
mod listener_args;
mod stats_args;
mod xds_args;

use clap::{CommandFactory, Parser, Subcommand};
use decision_log_args::DecisionLogArgs;
use envoy_args::{LoadArgs, ModeArgs, ReplyArgs};
use envoy_env::EnvoyEnv;
use grpc_tls_args::GrpcTlsArgs;
use listener_args::{ListenerArgs, UpstreamArgs};
use tollgate_server::{ServeOptions, Settings};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Where `serve` listens when nothing says otherwise: loopback, so a first try exposes nothing.
const DEFAULT_HTTP: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
const DEFAULT_GRPC: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8081);

/// Rate limit decisions over HTTP/JSON, for every service in a fleet.
#[derive(Parser)]
#[command(name = "tollgate", version, about)]
struct Cli {
    /// Log format on stderr: `text` for people, `json` (one object per line) for collectors
    /// [default: LOG_FORMAT (envoyproxy/ratelimit's `text` or `json`) when set, else text].
    /// Levels come from `RUST_LOG` (default: warnings and reload results).
    #[arg(long, global = true, env = "TOLLGATE_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

/// How log events are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per event.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API and the Envoy rate limit service (demo policies when no --config).
    ///
    /// envoyproxy/ratelimit's environment variables (RUNTIME_ROOT, REDIS_URL, PORT, GRPC_PORT,
    /// GRPC_SERVER_USE_TLS, DEBUG_PORT, ...) are read too; a flag or TOLLGATE_* variable wins over
    /// them.
    Serve {
        /// A config file or a directory of them (tollgate policies or envoyproxy/ratelimit)
        /// [default: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY when set, else the
        /// built-in demo policies].
        #[arg(long)]
        config: Option<PathBuf>,
        /// Store: redis://host:port, redis+cluster://host:port,host:port or
        /// redis+sentinel://host:port,host:port/<master-name> [default: from REDIS_URL when set,
        /// else in memory].
        #[arg(long, env = "TOLLGATE_STORE")]
        store: Option<String>,
        #[command(flatten)]
        store_options: StoreArgs,
        /// HTTP listen address [default: from HOST/PORT when set, else 127.0.0.1:8080].
        #[arg(long, env = "TOLLGATE_HTTP_ADDR")]
        http: Option<SocketAddr>,
        /// gRPC (Envoy rate limit service) listen address [default: from GRPC_HOST/GRPC_PORT
        /// when set, else 127.0.0.1:8081].
        #[arg(long, env = "TOLLGATE_GRPC_ADDR")]
        grpc: Option<SocketAddr>,
        // Boxed: rarely given, and `Serve` would otherwise outgrow the other commands.
        #[command(flatten)]
        grpc_tls: Box<GrpcTlsArgs>,
        /// Debug listen address (/rlconfig, /metrics, /dashboard) [default: from DEBUG_HOST/DEBUG_PORT when
        /// DEBUG_PORT is set, else off].
        #[arg(long, env = "TOLLGATE_DEBUG_ADDR")]
        debug_addr: Option<SocketAddr>,
        /// Token required by admin endpoints (`Authorization: Bearer <token>`); app endpoints
        /// take it too.
        #[arg(long, env = "TOLLGATE_ADMIN_TOKEN")]
        admin_token: Option<String>,
        /// Token for applications: it opens only the app endpoints (attempts try, count and
        /// clear, refunds, charges, lease release, Envoy refunds and charges), never an admin
        /// one. Set alone, admin endpoints are closed to everyone.
        #[arg(long, env = "TOLLGATE_APP_TOKEN")]
        app_token: Option<String>,
        /// The gRPC port is reachable only by trusted Envoys (a private network, or verified
        /// client certificates): Envoy refunds and charges through it need no token. Without
        /// it, once a token is set they need `authorization: Bearer <token>` metadata.
        #[arg(long, env = "TOLLGATE_TRUSTED_GRPC")]
        trusted_grpc: bool,
        /// Longest key accepted, in bytes.
        #[arg(long, default_value_t = 1024)]
        max_key_len: usize,
        /// On SIGTERM or ctrl-c, keep accepting and answering this long while /readyz and the
        /// health checks report the shutdown, then drain (a second signal ends it early); set it
        /// to the time load balancers take to stop sending [default: none, drain at once].
        #[arg(long, env = "TOLLGATE_SHUTDOWN_DELAY", value_parser = listener_args::duration)]
        shutdown_delay: Option<std::time::Duration>,
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        load: LoadArgs,
        #[command(flatten)]
        modes: ModeArgs,
        #[command(flatten)]
        reply: ReplyArgs,
        #[command(flatten)]
        decision_log: DecisionLogArgs,
        #[command(flatten)]
        xds: Box<xds_args::XdsArgs>,
        #[command(flatten)]
        stats: Box<stats_args::StatsArgs>,
    },
    /// Forward requests to an upstream, applying the config's route policies first.
    Proxy {
        /// Where admitted requests go: http://host:port, optionally with a base path.
        #[arg(long, env = "TOLLGATE_UPSTREAM")]
        upstream: String,
        /// A config file or directory with `policies` and `routes` (default: the demo ones).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Store: redis://host:port, redis+cluster://host:port,host:port or
        /// redis+sentinel://host:port,host:port/<master-name> (default: in memory).
        #[arg(long, env = "TOLLGATE_STORE")]
        store: Option<String>,
        #[command(flatten)]
        store_options: StoreArgs,
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
        #[command(flatten)]
        decision_log: DecisionLogArgs,
    },
    /// Explain what a check would decide and why, against a config, spending nothing: the
    /// limit each rule or descriptor reaches and how it matched, the runtime override in force,
    /// the parameters, the budget as it stands (on --store; an empty memory store otherwise).
    ///
    /// Give --policy and --key (and --cost), or --domain and one --descriptor per descriptor,
    /// written `key=value,key=value`. Prints JSON, as `GET /v1/explain` answers.
    Explain {
        /// The config file or directory.
        #[arg(long)]
        config: PathBuf,
        /// A Redis store to read the state and overrides from (`redis://host:port`,
        /// `redis+cluster://host:port,...`).
        #[arg(long)]
        store: Option<String>,
        #[command(flatten)]
        store_options: StoreArgs,
        /// A tollgate policy.
        #[arg(long, requires = "key", conflicts_with_all = ["domain", "descriptors"])]
        policy: Option<String>,
        /// The key, with --policy.
        #[arg(long, requires = "policy")]
        key: Option<String>,
        /// What the request costs.
        #[arg(long, default_value_t = 1)]
        cost: u64,
        /// An envoyproxy/ratelimit domain.
        #[arg(long, requires = "descriptors")]
        domain: Option<String>,
        /// A descriptor of --domain: `key=value,key=value`; repeat for several.
        #[arg(long = "descriptor", requires = "domain")]
        descriptors: Vec<String>,
        #[command(flatten)]
        load: LoadArgs,
        #[command(flatten)]
        modes: ModeArgs,
    },
    /// Validate a config file or directory without serving; exits non-zero on the first error.
    ///
    /// Reads envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG as `serve` does.
    ///
    /// With --against OLD, also lists each policy that differs from OLD's and what happens to
    /// its keys, as a reload from OLD to this config would log it.
    CheckConfig {
        /// The file or directory.
        path: PathBuf,
        /// The config now served: list what changes from it.
        #[arg(long, value_name = "OLD")]
        against: Option<PathBuf>,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Test a config against scenario files: timed requests and the answers they must get, run
    /// through the server's own doors on a virtual clock. Exits 0 when every answer is the
    /// expected one, 1 with each difference printed, 2 when the config, a scenario file or the
    /// store is unusable.
    ///
    /// A step asks one door: `check: {policy, key, cost}` (as POST /v1/check),
    /// `envoy: {domain, descriptors, hits_addend}` (as ShouldRateLimit and POST /json) or
    /// `request: {method, path, from, headers}` (as `tollgate proxy` over the config's routes),
    /// at a virtual time `at`, sent `repeat` times `every` apart, and `expect`s any of
    /// `allowed`, `status`, `code`, `retry_after`, `remaining`. See docs/changing-limits.md.
    Test {
        /// The config file or directory under test.
        config: PathBuf,
        /// Scenario files, or directories of them (`*.yaml`, `*.yml`).
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Run on Redis (`redis://host:port`, `redis+cluster://host:port,...`) instead of the
        /// memory store; each scenario uses keys of its own under `tollgate-test:`.
        #[arg(long)]
        store: Option<String>,
    },
    /// Replay a decision log (`serve --decision-log`) under a new config on a virtual clock
    /// (the logged times), through the memory store, and print per policy what would change:
    /// admitted and denied under each config, the requests whose outcome flips, and the keys
    /// most affected. Exits 0 whatever changed, 2 when a file is unusable.
    ///
    /// Without --baseline the logged outcomes are the baseline: what the server answered.
    /// See docs/changing-limits.md.
    Replay {
        /// The config to try.
        #[arg(long)]
        config: PathBuf,
        /// The config to compare with, replayed the same way [default: the logged outcomes].
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// How many flipped requests to print.
        #[arg(long, default_value_t = 20)]
        show: usize,
        /// Print the report as JSON instead of Markdown.
        #[arg(long)]
        json: bool,
        /// Log files, oldest first (`decisions.jsonl.2 decisions.jsonl.1 decisions.jsonl`).
        #[arg(required = true)]
        logs: Vec<PathBuf>,
    },
    /// Run a scenario (bot, boundary, throughput, compare): Markdown on stdout, optional PNG chart.
    Bench(tollgate_scenarios::BenchArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    ///
    /// For bash: `tollgate completions bash > /etc/bash_completion.d/tollgate`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff) on stdout: `tollgate man | man -l -`, or
    /// `tollgate man serve` for the page of one subcommand (tollgate-serve(1)).
    Man {
        /// The subcommand whose page to print (default: the overview page).
        subcommand: Option<String>,
    },
}

/// How to open the store (`serve` and `proxy`).
#[derive(clap::Args)]
struct StoreArgs {
    /// Refuse to start when the store is unreachable or misconfigured (wrong password, wrong
    /// cluster mode) instead of starting and letting the failure modes decide.
    #[arg(long, env = "TOLLGATE_REQUIRE_STORE")]
    require_store: bool,
    /// Deadline of each store call.
    #[arg(long, env = "TOLLGATE_STORE_TIMEOUT", default_value = "50ms", value_parser = store_timeout)]
    store_timeout: std::time::Duration,
    /// PEM file of certificate authorities to trust for rediss:// (default: the system's).
    #[arg(long, env = "TOLLGATE_STORE_CA_FILE")]
    store_ca_file: Option<PathBuf>,
}

impl From<StoreArgs> for tollgate_server::StoreOptions {
    fn from(args: StoreArgs) -> Self {
        tollgate_server::StoreOptions {
            require: args.require_store,
            timeout: args.store_timeout,
            ca_file: args.store_ca_file,
        }
    }
}

/// A duration as the configs write them (`50ms`, `1s`); zero is refused there.
fn store_timeout(text: &str) -> Result<std::time::Duration, String> {
    tollgate_config::duration::parse_duration(text).map_err(|e| e.to_string())
}

/// The command a manual page describes: the whole CLI, or one subcommand named
/// `tollgate-<name>` as the overview page's SUBCOMMANDS section refers to it.
fn man_page_of(subcommand: Option<&str>) -> Option<clap::Command> {
    let mut cli = Cli::command();
    cli.build();
    let Some(name) = subcommand else {
        return Some(cli);
    };
    let command = cli.find_subcommand(name)?.clone();
    Some(
        command
            .name(format!("tollgate-{name}"))
            .version(env!("CARGO_PKG_VERSION")),
    )
}

/// Writes generated text to stdout; a closed pipe (`| head`) is a quiet failure, not a panic.
fn print_all(command: &str, bytes: &[u8]) -> ExitCode {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("tollgate {command}: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The program name envoyproxy/ratelimit's image runs (`/bin/ratelimit`, with no arguments,
/// as Envoy Gateway's Deployment starts it): called by that name, `tollgate` serves.
const UPSTREAM_PROGRAM: &str = "ratelimit";

/// The command line, with `serve` put first when the binary is called as [`UPSTREAM_PROGRAM`]
/// (a link named `ratelimit`), so upstream's manifests start it unchanged.
fn command_line() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let called = args
        .first()
        .and_then(|program| std::path::Path::new(program).file_name())
        .is_some_and(|name| name == UPSTREAM_PROGRAM);
    if called {
        args.insert(1, "serve".into());
    }
    args
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(command_line());
    let format = match cli.log_format {
        Some(format) => format,
        // envoyproxy/ratelimit's variable, as its manifests set it.
        None => match std::env::var("LOG_FORMAT").ok().filter(|v| !v.is_empty()) {
            None => LogFormat::Text,
            Some(value) => match value.trim().to_ascii_lowercase().as_str() {
                "json" => LogFormat::Json,
                "text" => LogFormat::Text,
                _ => {
                    eprintln!("tollgate: LOG_FORMAT={value}: expected text or json");
                    return ExitCode::FAILURE;
                }
            },
        },
    };
    init_logs(format);
    match cli.command {
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tollgate", &mut script);
            print_all("completions", &script)
        }
        Command::Man { subcommand } => {
            let Some(command) = man_page_of(subcommand.as_deref()) else {
                eprintln!(
                    "tollgate man: no subcommand {:?}; try one of: {}",
                    subcommand.unwrap_or_default(),
                    Cli::command()
                        .get_subcommands()
                        .map(|c| c.get_name().to_owned())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                return ExitCode::from(2);
            };
            let mut page = Vec::new();
            match clap_mangen::Man::new(command).render(&mut page) {
                Ok(()) => print_all("man", &page),
                Err(err) => {
                    eprintln!("tollgate man: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Bench(args) => match tollgate_scenarios::run(&args) {
            Ok(output) => print_all("bench", output.markdown.as_bytes()),
            Err(err) => {
                eprintln!("tollgate bench: {err}");
                ExitCode::FAILURE
            }
        },
        Command::Proxy {
            upstream,
            config,
            store,
            store_options,
            listen,
            trusted_proxies,
            admin,
            listener,
            upstream_deadlines,
            decision_log,
        } => run(tollgate_server::serve_proxy(tollgate_server::ProxyOptions {
            upstream,
            config,
            store,
            store_options: store_options.into(),
            listen,
            trusted_proxies,
            admin,
            listeners: listener.options(tollgate_server::ListenerOptions::PROXY_MAX_BODY_BYTES),
            forward: upstream_deadlines.options(),
            decision_log: decision_log.options(),
        })),
        Command::Explain {
            config,
            store,
            store_options,
            policy,
            key,
            cost,
            domain,
            descriptors,
            load,
            modes,
        } => {
            use tollgate_server::explain::{self, AskedRule, ExplainRequest};
            let request = match (policy, key, domain) {
                (Some(policy), Some(key), None) => {
                    ExplainRequest::Rules(vec![AskedRule { policy, key, cost }])
                }
                (None, None, Some(domain)) => {
                    let parsed: Result<Vec<_>, String> =
                        descriptors.iter().map(|d| explain::parse_descriptor(d)).collect();
                    match parsed {
                        Ok(descriptors) => ExplainRequest::Envoy {
                            domain,
                            descriptors: descriptors
                                .into_iter()
                                .map(|entries| tollgate_config::envoy_plan::Asked {
                                    entries,
                                    cost,
                                    ..Default::default()
                                })
                                .collect(),
                        },
                        Err(err) => {
                            eprintln!("tollgate: --descriptor: {err}");
                            return ExitCode::FAILURE;
                        }
                    }
                }
                _ => {
                    eprintln!("tollgate: explain needs --policy and --key, or --domain and --descriptor");
                    return ExitCode::FAILURE;
                }
            };
            // The modes and the way files are read change the answer, as they do the server's.
            let Some(settings) = settings_from_env(|settings| {
                load.apply(settings);
                modes.apply(settings);
            }) else {
                return ExitCode::FAILURE;
            };
            let answer = run_for(async move {
                let options = store_options.into();
                let answer =
                    explain::run_cli(&config, store.as_deref(), &options, &settings, &request).await?;
                Ok(answer.to_pretty_json())
            });
            match answer {
                Ok(json) => print_all("explain", format!("{json}\n").as_bytes()),
                Err(code) => code,
            }
        }
        Command::Test {
            config,
            scenarios,
            store,
        } => policy_test(tollgate_server::policy_test::TestOptions {
            config,
            tests: scenarios,
            store,
        }),
        Command::Replay {
            config,
            baseline,
            show,
            json,
            logs,
        } => replay(
            &tollgate_server::replay::ReplayOptions {
                config,
                baseline,
                logs,
                shown: show,
            },
            json,
        ),
        Command::CheckConfig { path, against, load } => {
            let Some(settings) = settings_from_env(|settings| load.apply(settings)) else {
                return ExitCode::FAILURE;
            };
            check_config(&path, against.as_deref(), &settings.load)
        }
        Command::Serve {
            config,
            store,
            store_options,
            http,
            grpc,
            grpc_tls,
            debug_addr,
            admin_token,
            app_token,
            trusted_grpc,
            max_key_len,
            shutdown_delay,
            listener,
            load,
            modes,
            reply,
            decision_log,
            xds,
            stats,
        } => {
            // Upstream's variables fill in what neither a flag nor a TOLLGATE_* variable says.
            let upstream = match EnvoyEnv::from_env() {
                Ok(upstream) => upstream,
                Err(err) => {
                    eprintln!("tollgate: {err}");
                    return ExitCode::FAILURE;
                }
            };
            let grpc_tls = match grpc_tls.merge(upstream.grpc_tls.clone()) {
                Ok(grpc_tls) => grpc_tls,
                Err(err) => {
                    eprintln!("tollgate: {err}");
                    return ExitCode::FAILURE;
                }
            };
            let mut settings = Settings {
                admin_token,
                app_token,
                max_key_len,
                listeners: listener.options(tollgate_server::ListenerOptions::default().max_body_bytes),
                shutdown_delay: shutdown_delay.unwrap_or_default(),
                ..Settings::default()
            };
            settings.envoy.trusted_grpc = trusted_grpc;
            upstream.compat.apply(&mut settings);
            load.apply(&mut settings);
            modes.apply(&mut settings);
            reply.apply(&mut settings);
            let xds = match xds.source(upstream.xds) {
                Ok(xds) => xds,
                Err(err) => {
                    eprintln!("tollgate: {err}");
                    return ExitCode::FAILURE;
                }
            };
            let stats = match stats.resolve(upstream.stats) {
                Ok(stats) => stats,
                Err(err) => {
                    eprintln!("tollgate: {err}");
                    return ExitCode::FAILURE;
                }
            };
            let options = ServeOptions {
                config: config.or(upstream.config),
                store: store.or(upstream.store),
                store_options: store_options.into(),
                http: http.or(upstream.http).unwrap_or(DEFAULT_HTTP),
                grpc: grpc.or(upstream.grpc).unwrap_or(DEFAULT_GRPC),
                grpc_tls: grpc_tls.as_ref().map(|tls| tls.files.clone()),
                debug: debug_addr.or(upstream.debug),
                settings,
                decision_log: decision_log.options(),
                xds,
                statsd: stats.statsd,
                prometheus: stats.prometheus,
            };
            // A TLS file's fault is named by the flag or variable that gave the file.
            run(async move {
                let served = tollgate_server::serve(options).await;
                match &grpc_tls {
                    Some(tls) => served.map_err(|err| tls.name_error(err)),
                    None => served,
                }
            })
        }
    }
}

/// `tollgate check-config`: a summary on stdout, and with `against` each policy that changes
/// from it; or the first error on stderr.
fn check_config(
    path: &std::path::Path,
    against: Option<&std::path::Path>,
    options: &tollgate_config::LoadOptions,
) -> ExitCode {
    let load =
        |path: &std::path::Path| tollgate_config::load_with(path, options).map_err(|err| eprintln!("{err}"));
    let Ok(limits) = load(path) else {
        return ExitCode::FAILURE;
    };
    let policies = limits.policies().count() + limits.concurrency_policies().count();
    let domains = limits.domains().len();
    let mut out = format!(
        "{}: ok ({policies} policies, {domains} envoy domains)\n",
        path.display()
    );
    if let Some(against) = against {
        let Ok(before) = load(against) else {
            return ExitCode::FAILURE;
        };
        let changes = limits.changes_from(&before);
        if changes.is_empty() {
            out += &format!("against {}: no policy changes\n", against.display());
        } else {
            out += &format!(
                "against {}: {} policies change\n",
                against.display(),
                changes.len()
            );
            for change in changes {
                out += &format!("  {change}\n");
            }
        }
    }
    print_all("check-config", out.as_bytes())
}

/// [`Settings`] from envoyproxy/ratelimit's variables, then `flags`; `None` (the error printed)
/// when a variable cannot be read.
fn settings_from_env(flags: impl FnOnce(&mut Settings)) -> Option<Settings> {
    let mut settings = Settings::default();
    match EnvoyEnv::from_env() {
        Ok(upstream) => upstream.compat.apply(&mut settings),
        Err(err) => {
            eprintln!("tollgate: {err}");
            return None;
        }
    }
    flags(&mut settings);
    Some(settings)
}

/// `tollgate test`: the report on stdout; exit 1 on a difference, 2 when it could not run.
fn policy_test(options: tollgate_server::policy_test::TestOptions) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("tollgate: cannot start the runtime: {err}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(tollgate_server::policy_test::run(&options)) {
        Ok(report) => {
            let printed = print_all("test", report.to_string().as_bytes());
            if report.passed() {
                printed
            } else {
                ExitCode::FAILURE
            }
        }
        Err(err) => {
            eprintln!("tollgate test: {err}");
            ExitCode::from(2)
        }
    }
}

/// `tollgate replay`: the report on stdout; exit 2 when a file is unusable.
fn replay(options: &tollgate_server::replay::ReplayOptions, json: bool) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("tollgate: cannot start the runtime: {err}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(tollgate_server::replay::run(options)) {
        Ok(report) if json => print_all("replay", format!("{}\n", report.to_json()).as_bytes()),
        Ok(report) => print_all("replay", report.to_string().as_bytes()),
        Err(err) => {
            eprintln!("tollgate replay: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs `job` on the server's runtime (see [`tollgate_server::server_runtime`]); an error is
/// printed with its causes.
fn run(job: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    run_for(job).err().unwrap_or(ExitCode::SUCCESS)
}

/// [`run`], for a job with an answer to print: the answer, or the exit code once the error is
/// printed.
fn run_for<T>(job: impl std::future::Future<Output = anyhow::Result<T>>) -> Result<T, ExitCode> {
    let runtime = match tollgate_server::server_runtime() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("tollgate: cannot start the runtime: {err}");
            return Err(ExitCode::FAILURE);
        }
    };
    runtime.block_on(job).map_err(|err| {
        eprintln!("tollgate: {err:#}");
        ExitCode::FAILURE
    })
}

/// The log filter when neither `RUST_LOG` nor upstream's `LOG_LEVEL` says: warnings, and reload
/// results (rare, and what an operator checks after changing a config).
const DEFAULT_LOG_FILTER: &str = "warn,tollgate_server::reload=info";

/// Sends the libraries' `tracing` events to stderr, filtered by `RUST_LOG`, else upstream's
/// `LOG_LEVEL`, else [`DEFAULT_LOG_FILTER`]: a failing store or a rejected config is seen without
/// a flood of per-request lines.
fn init_logs(format: LogFormat) {
    // RUST_LOG, else envoyproxy/ratelimit's LOG_LEVEL (a bad one is reported by `serve`).
    let upstream_level = std::env::var("LOG_LEVEL")
        .ok()
        .and_then(|level| envoy_env::log_level(&level));
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(upstream_level.unwrap_or(DEFAULT_LOG_FILTER)));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().init(),
        // Colours only for a person at a terminal, never into a log file or collector.
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
}
