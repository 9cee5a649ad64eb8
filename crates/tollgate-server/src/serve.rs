//! Running the server: [`run`] serves the HTTP API (with envoyproxy/ratelimit's `/json` and
//! `/healthcheck`), the Envoy rate limit service with the gRPC health service, and the optional
//! debug endpoints on listeners the caller bound, until a shutdown future completes; [`serve`] is what `tollgate
//! serve` does around it: load the limits (and the gRPC port's TLS files, when asked for), open
//! the store, bind, reload the limits and the TLS files on SIGHUP and on file change (see
//! [`reload`]), and stop on ctrl-c or SIGTERM.
//!
//! Binding is the caller's job so that a test can bind port 0 and read the port before the
//! server starts, and stopping is a future so that a test can stop the server when it is done
//! instead of sending the process a signal. [`serve`] prints the addresses it bound
//! (`tollgate: http listening on 127.0.0.1:PORT`), so `--http 127.0.0.1:0` works for the binary
//! too.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::envoy::debug;
use crate::envoy::grpc;
use crate::envoy::health::{self, Health};
use crate::ops::decision_log::{DecisionLog, DecisionLogOptions};
use crate::ops::metrics;
use crate::runtime::listener;
use crate::runtime::problem::bare_errors;
use crate::runtime::state::keep_access_fresh;
use crate::runtime::{AnyStore, AppState, ServerTls, Settings, SharedState, StoreOptions, TlsFiles};
use crate::{api, reload};

/// The runtime `tollgate serve` and `tollgate proxy` run on: one thread when the process may
/// use one core (pinned to it, or a container's CPU limit of one), else tokio's multi-threaded
/// runtime, one worker per core (or `TOKIO_WORKER_THREADS`, which also keeps it on one core).
///
/// On one core, a multi-threaded runtime still drives the future it is given on the calling
/// thread and the tasks on a worker thread, which hand work to each other through queues and
/// wake-ups on the one core; one thread does the same work without them (BENCHMARKS.md, "one
/// core", measures the two). Its threads for blocking work (file reads) are named
/// `tollgate-blocking`.
///
/// ```
/// let runtime = tollgate_server::server_runtime().expect("a runtime");
/// assert_eq!(runtime.block_on(async { 1 + 1 }), 2);
/// ```
pub fn server_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let one_core = std::env::var_os("TOKIO_WORKER_THREADS").is_none()
        && std::thread::available_parallelism().is_ok_and(|cores| cores.get() == 1);
    if one_core {
        tokio::runtime::Builder::new_current_thread()
            .thread_name("tollgate-blocking")
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    }
}

/// What `tollgate serve` was asked to do.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// A config file or directory; `None` serves the built-in demo policies.
    pub config: Option<PathBuf>,
    /// `redis://...` or `redis+cluster://...`; `None` uses the embedded memory store.
    pub store: Option<String>,
    /// How to open the store: required or not, its deadline, TLS.
    pub store_options: StoreOptions,
    /// Where the HTTP API listens.
    pub http: SocketAddr,
    /// Where the Envoy rate limit service (gRPC) listens.
    pub grpc: SocketAddr,
    /// TLS on the gRPC listener (its health service included); `None` serves it in plaintext.
    /// The files are reloaded when they change, and on SIGHUP.
    pub grpc_tls: Option<TlsFiles>,
    /// Where the debug endpoints listen (`/rlconfig`, `/metrics`); `None` serves none.
    pub debug: Option<SocketAddr>,
    /// Fixed settings.
    pub settings: Settings,
    /// Log every decision (sampled, bounded) for `tollgate replay`; `None` logs nothing.
    pub decision_log: Option<DecisionLogOptions>,
    /// Take the limits from an xDS management server instead of `config`.
    pub xds: Option<XdsSource>,
    /// Send envoyproxy/ratelimit's statistics to a statsd server.
    pub statsd: Option<crate::statsd::StatsdOptions>,
    /// Also serve the Prometheus metrics on this address and path (upstream's
    /// `USE_PROMETHEUS`, `PROMETHEUS_ADDR`, `PROMETHEUS_PATH`).
    pub prometheus: Option<(SocketAddr, String)>,
}

/// The limits from an xDS management server (see [`xds`](crate::xds)).
#[derive(Debug, Clone, PartialEq)]
pub struct XdsSource {
    /// Where and how to connect.
    pub options: crate::XdsOptions,
    /// Start serving before the first push, with no limits (upstream's
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`); otherwise the listeners open once the first push
    /// has been answered.
    pub start_without_config: bool,
}

/// The bound sockets [`run`] serves on.
#[derive(Debug)]
pub struct Listeners {
    /// The HTTP/JSON API.
    pub http: TcpListener,
    /// The Envoy rate limit service (gRPC) and the gRPC health service.
    pub grpc: TcpListener,
    /// The debug endpoints (`/rlconfig`, `/metrics`, the dashboard), when asked for.
    pub debug: Option<TcpListener>,
    /// TLS on the gRPC listener, when asked for.
    pub grpc_tls: Option<ServerTls>,
}

impl Listeners {
    /// Binds both; port 0 picks a free port, which `local_addr` then tells.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// let any = "127.0.0.1:0".parse()?;
    /// let listeners = tollgate_server::Listeners::bind(any, any).await?;
    /// assert_ne!(listeners.http.local_addr()?, listeners.grpc.local_addr()?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn bind(http: SocketAddr, grpc: SocketAddr) -> anyhow::Result<Listeners> {
        let http = TcpListener::bind(http)
            .await
            .with_context(|| format!("cannot listen for http on {http}"))?;
        let grpc = TcpListener::bind(grpc)
            .await
            .with_context(|| format!("cannot listen for grpc on {grpc}"))?;
        Ok(Listeners {
            http,
            grpc,
            debug: None,
            grpc_tls: None,
        })
    }

    /// Serves the gRPC listener (the rate limit and health services) over `tls` only.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// use tollgate_server::{Listeners, ServerTls, TlsFiles};
    ///
    /// let tls = ServerTls::load(TlsFiles::new("/certs/tls.crt", "/certs/tls.key"))?;
    /// let any = "127.0.0.1:0".parse()?;
    /// let listeners = Listeners::bind(any, any).await?.with_grpc_tls(tls);
    /// assert!(listeners.grpc_tls.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_grpc_tls(mut self, tls: ServerTls) -> Listeners {
        self.grpc_tls = Some(tls);
        self
    }

    /// Also binds the debug listener (`/rlconfig`, `/metrics`, the dashboard).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// let any = "127.0.0.1:0".parse()?;
    /// let listeners = tollgate_server::Listeners::bind(any, any).await?.with_debug(any).await?;
    /// assert!(listeners.debug.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_debug(mut self, debug: SocketAddr) -> anyhow::Result<Listeners> {
        let listener = TcpListener::bind(debug)
            .await
            .with_context(|| format!("cannot listen for debug on {debug}"))?;
        self.debug = Some(listener);
        Ok(self)
    }
}

/// Serves the HTTP API and the Envoy rate limit service over `state` on `listeners` until
/// `shutdown` completes; then readiness reports the instance as stopping, the listeners keep
/// accepting for the [shutdown delay](crate::Settings::shutdown_delay) (none by default), and
/// then both stop accepting, let their open connections finish for up to the drain timeout,
/// close the rest, and this returns. Both listeners have the timeouts and
/// limits of `state.settings.listeners` (see [`ListenerOptions`](crate::ListenerOptions)). An error means the settings are
/// unusable or a server failed, not that a request did.
///
/// Swap `state.limits` to change the limits while serving (as [`reload`] does). See the
/// [crate docs](crate) for an example.
pub async fn run(
    state: SharedState,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_until(state, listeners, shutdown, std::future::pending()).await
}

/// [`run`], where `hurry` completing during the shutdown delay ends the delay: `tollgate serve`
/// gives it the second SIGTERM or ctrl-c, so an operator at a terminal need not wait it out.
pub(crate) async fn run_until(
    state: SharedState,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
    hurry: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    metrics::install();
    state.settings.validate()?;
    let options = state.settings.listeners.clone();
    // Health turns NOT_SERVING as soon as the shutdown starts, before the listeners drain.
    let health = Health::new(state.store.is_memory()).await;
    // One shutdown stops both servers; each lets its in-flight requests finish. The tasks are
    // aborted if this future is dropped, so no server outlives a caller that gave up on it.
    let (stop, stopped) = watch::channel(false);
    let signal = AbortOnDrop(tokio::spawn(stop_after_delay(
        Arc::clone(&state),
        health.clone(),
        shutdown,
        hurry,
        stop,
    )));
    let when_stopped = |mut stopped: watch::Receiver<bool>| async move {
        // An error means the sender is gone, which happens only once `signal` is: stop then too.
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let _probe = AbortOnDrop(tokio::spawn(health::watch_store(
        health.clone(),
        state.store.clone(),
        when_stopped(stopped.clone()),
    )));
    let _access = AbortOnDrop(tokio::spawn(keep_access_fresh(
        Arc::clone(&state),
        when_stopped(stopped.clone()),
    )));
    let stopped_health = health.clone();
    let stopping = when_stopped(stopped.clone());
    let _on_stop = AbortOnDrop(tokio::spawn(async move {
        stopping.await;
        stopped_health.shut_down().await;
    }));
    // One handler for the gRPC service and `/json`, so both doors decide the same way.
    let rls = grpc::RlsService::new(Arc::clone(&state));
    let grpc_stopped = when_stopped(stopped.clone());
    let grpc_health = health.clone();
    let grpc_rls = rls.clone();
    let grpc_options = options.clone();
    let grpc_tls = listeners.grpc_tls;
    let mut grpc_server = AbortOnDrop(tokio::spawn(async move {
        grpc::serve_with(
            listeners.grpc,
            grpc_rls,
            Some(&grpc_health),
            grpc_tls,
            grpc_options,
            grpc_stopped,
        )
        .await
    }));
    let debug_server = listeners.debug.map(|listener| {
        let app = debug::router(Arc::clone(&state)).layer(axum::middleware::from_fn(bare_errors));
        let app = listener::with_request_limits(app, "debug", &options);
        let stopping = when_stopped(stopped.clone());
        let options = options.clone();
        AbortOnDrop(tokio::spawn(async move {
            listener::serve_http("debug", listener, app, &options, stopping).await
        }))
    });
    let router = api::router(Arc::clone(&state))
        .merge(grpc::json::router(rls))
        .merge(health::router(health))
        .merge(api::dashboard::router(state))
        // Over every route merged here, not only the API's: `/json`'s 405 and the health
        // routes' errors are problems too.
        .layer(axum::middleware::from_fn(bare_errors));
    let app = listener::with_request_limits(router, "http", &options);
    let http_served = listener::serve_http("http", listeners.http, app, &options, when_stopped(stopped))
        .await
        .context("http server");
    if http_served.is_err() {
        // The http server failed on its own: do not leave the grpc server running.
        signal.0.abort();
    }
    let grpc_served = (&mut grpc_server.0).await.context("grpc server task");
    let debug_served = match debug_server {
        Some(mut server) => Some((&mut server.0).await.context("debug server task")),
        None => None,
    };
    http_served?;
    grpc_served?.context("grpc server")?;
    if let Some(served) = debug_served {
        served?.context("debug server")?;
    }
    Ok(())
}

/// Waits for `shutdown`, then reports the instance as stopping (`/readyz` answers `503`, health
/// turns `NOT_SERVING`) while the listeners still accept and answer, for the shutdown delay (or
/// until `hurry`), and only then tells the listeners to drain through `stop`.
///
/// A load balancer learns that an instance is going away some time after the orchestrator
/// decided it (a Kubernetes Service's endpoints reach every node's proxy asynchronously); a
/// listener that closed at once would refuse the connections sent in between. Accepting through
/// the delay lets them be answered.
async fn stop_after_delay(
    state: SharedState,
    health: Health,
    shutdown: impl Future<Output = ()>,
    hurry: impl Future<Output = ()>,
    stop: watch::Sender<bool>,
) {
    shutdown.await;
    state.begin_stopping();
    health.stop_serving().await;
    let delay = state.settings.shutdown_delay;
    if !delay.is_zero() {
        println!("tollgate: not ready; still accepting for {delay:?} before draining (--shutdown-delay)");
        tracing::info!(delay = ?delay, "shutting down: reporting not ready, still accepting");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = hurry => println!("tollgate: second signal; ending the shutdown delay"),
        }
        println!("tollgate: draining open connections");
    }
    let _ = stop.send(true);
}

/// A task that ends when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves until ctrl-c or SIGTERM, as `tollgate serve` does; in-flight requests finish first.
pub async fn serve(options: ServeOptions) -> anyhow::Result<()> {
    let settings = options.settings.clone();
    settings.validate()?;
    if options.xds.is_some() && options.config.is_some() {
        anyhow::bail!("the limits come either from a config file or over xDS, not both");
    }
    // Before anything slower: a TLS file that cannot be served stops the start at once.
    let grpc_tls = options.grpc_tls.clone().map(ServerTls::load).transpose()?;
    let limits = match (options.config.as_deref(), &options.xds) {
        (Some(path), _) => tollgate_config::load_with(path, &settings.load)?,
        // No limits until the first push.
        (None, Some(_)) => tollgate_config::parse_files(&[], &settings.load)?,
        (None, None) => tollgate_config::demo()?,
    };
    if let Some(xds) = &options.xds {
        xds.options.validate()?;
    }
    let decision_log = match &options.decision_log {
        Some(log) => Some(DecisionLog::start(log.clone())?),
        None => None,
    };
    let store = AnyStore::open(options.store.as_deref(), &options.store_options).await?;
    let state = AppState::new(limits, store, settings);
    if let Some(xds) = &options.xds {
        let (first, pushed) = tokio::sync::oneshot::channel();
        tokio::spawn(crate::xds::follow(
            Arc::clone(&state),
            xds.options.clone(),
            Some(first),
        ));
        if !xds.start_without_config {
            println!(
                "tollgate: waiting for the first push from the xDS server {}",
                xds.options.server
            );
            let _ = pushed.await;
        }
    }
    let mut listeners = Listeners::bind(options.http, options.grpc).await?;
    if let Some(debug) = options.debug {
        listeners = listeners.with_debug(debug).await?;
    }
    if let Some(tls) = grpc_tls {
        watch_tls(&tls);
        listeners = listeners.with_grpc_tls(tls);
    }
    let prometheus = match &options.prometheus {
        Some((addr, path)) => Some((
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for prometheus on {addr}"))?,
            path.clone(),
        )),
        None => None,
    };
    // Statistics are sent until the server has stopped, then flushed once more.
    let (stats_stop, stats_stopped) = tokio::sync::oneshot::channel::<()>();
    let stats = options.statsd.clone().map(|statsd| {
        tokio::spawn(crate::ops::statsd::start(statsd, async {
            let _ = stats_stopped.await;
        }))
    });
    // Watching and the SIGHUP handler start before the addresses are printed: a change or a
    // signal sent once they are seen is never missed.
    // SIGHUP is handled in every mode (its default action would end the process).
    #[cfg(unix)]
    if options.xds.is_some() {
        if let Some(hangups) = reload::on_hangup(|| {
            tracing::info!("SIGHUP: the limits come over xDS; there is no file to reload")
        }) {
            tokio::spawn(hangups);
        }
    } else if let Some(hangups) = reload::on_sighup(Arc::clone(&state), options.config.clone()) {
        tokio::spawn(hangups);
    }
    if let Some(path) = options.config.clone()
        && let Some(watch) = reload::on_change(Arc::clone(&state), path)
    {
        tokio::spawn(watch);
    }
    warn_if_open(&options);
    let (shutdown, hurry) = shutdown_signals();
    println!("tollgate: http listening on {}", listeners.http.local_addr()?);
    println!("tollgate: grpc listening on {}", listeners.grpc.local_addr()?);
    if let Some(tls) = &listeners.grpc_tls {
        println!("tollgate: grpc {}", describe_tls(tls.files()));
    }
    if let Some(debug) = &listeners.debug {
        println!("tollgate: debug listening on {}", debug.local_addr()?);
    }
    if let Some((listener, path)) = prometheus {
        println!("tollgate: prometheus listening on {}", listener.local_addr()?);
        let app = axum::Router::new()
            .route(&path, axum::routing::get(api::operations::render_metrics))
            .with_state(Arc::clone(&state))
            .layer(axum::middleware::from_fn(bare_errors));
        let limits = state.settings.listeners.clone();
        let app = listener::with_request_limits(app, "prometheus", &limits);
        // Ends with the process: a scrape in flight at shutdown is of no consequence.
        tokio::spawn(async move {
            let never = std::future::pending::<()>();
            let _ = listener::serve_http("prometheus", listener, app, &limits, never).await;
        });
    }
    let (policies, domains) = {
        let limits = state.limits.load();
        (
            limits.policies().count() + limits.concurrency_policies().count(),
            limits.domains().len(),
        )
    };
    println!(
        "tollgate: {} store, {} ({policies} policies, {domains} envoy domains)",
        state.store.kind(),
        match (&options.config, &options.xds) {
            (Some(path), _) => format!("config {}", path.display()),
            (None, Some(xds)) => format!(
                "limits over xDS from {} as node {}",
                xds.options.server, xds.options.node_id
            ),
            (None, None) => "built-in demo policies".to_owned(),
        }
    );
    if let Some(log) = &decision_log {
        log.install();
    }
    let served = run_until(state, listeners, shutdown, hurry).await;
    if let Some(stats) = stats {
        let _ = stats_stop.send(());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(3), stats).await;
    }
    // Every answered request's line is written before the process ends, unless the writer
    // is held up past the drain timeout: then its lines are counted as lost, not waited for.
    if let Some(log) = decision_log {
        let deadline = options.settings.listeners.drain_timeout;
        let _ = tokio::task::spawn_blocking(move || log.finish_within(Some(deadline))).await;
    }
    served
}

/// Reloads the gRPC listener's TLS files when they change and on SIGHUP, for as long as the
/// server runs; the handlers are in place when this returns.
fn watch_tls(tls: &ServerTls) {
    metrics::start_at_zero("tollgate_tls_reloads_total", "outcome", &["ok", "failed"]);
    if let Some(watch) = reload::on_tls_change(tls.clone()) {
        tokio::spawn(watch);
    }
    #[cfg(unix)]
    if let Some(hangups) = reload::on_hangup({
        let tls = tls.clone();
        move || {
            reload::reload_tls(&tls);
        }
    }) {
        tokio::spawn(hangups);
    }
}

/// The start-up line about the gRPC listener's TLS: what a client must present.
fn describe_tls(files: &TlsFiles) -> String {
    let mut line = format!("TLS with certificate {}", files.cert.display());
    if let Some(ca) = &files.client_ca {
        line += &format!("; client certificates required, issued by {}", ca.display());
        if let Some(name) = &files.client_name {
            line += &format!(" for {name}");
        }
    }
    line
}

/// Loud warnings at start for what answers anyone who can reach a non-loopback address: the
/// debug listener (it prints the configuration, whatever the token; upstream's `DEBUG_PORT`
/// binds `0.0.0.0`), and every guarded route without any token; and, at info, admin routes closed by an app token alone.
/// The debug one comes first, so a test that sees the other knows it was not logged.
fn warn_if_open(options: &ServeOptions) {
    if let Some(addr) = options.debug
        && beyond_loopback(addr)
    {
        tracing::warn!(
            listener = "debug",
            debug = %addr,
            "the debug listener (/rlconfig, /metrics, /dashboard) is reachable on a non-loopback \
             address and prints the loaded configuration to anyone; bind it to 127.0.0.1 \
             (--debug-addr, or DEBUG_HOST)"
        );
    }
    let settings = &options.settings;
    if settings.admin_token.is_none() && settings.app_token.is_some() {
        tracing::info!(
            listener = "http",
            "admin routes are closed: an app token is set and no admin token (--admin-token \
             opens them to its holder)"
        );
    }
    if settings.admin_token.is_none() && settings.app_token.is_none() && beyond_loopback(options.http) {
        tracing::warn!(
            listener = "http",
            http = %options.http,
            "every admin route (resets, overrides, access lists, top offenders, dashboard data, \
             clearing leases) and every application route (refunds, charges, attempts, lease \
             release) is reachable without a token on a non-loopback address; set --admin-token \
             (and --app-token for applications); docs/operations.md lists the routes by token"
        );
    }
}

/// Whether a listener on `addr` answers beyond this host: any address but a loopback one
/// (the unspecified `0.0.0.0` and `::` included: they listen on every interface).
fn beyond_loopback(addr: SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

/// Completes on ctrl-c or SIGTERM. The handlers are installed when this is called, not when the
/// future is first polled, so a signal sent once the addresses are printed is never missed (it
/// would otherwise end the process with the default action).
pub(crate) fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    let mut signals = Signals::install();
    async move {
        signals.next().await;
        announce_shutdown();
    }
}

/// [`shutdown_signal`], and a second future that completes on the signal after it (the
/// second SIGTERM or ctrl-c), which `serve` gives [`run_until`] to end the shutdown delay.
fn shutdown_signals() -> (
    impl Future<Output = ()> + Send + 'static,
    impl Future<Output = ()> + Send + 'static,
) {
    let mut signals = Signals::install();
    let (second, seen_second) = tokio::sync::oneshot::channel::<()>();
    let first = async move {
        signals.next().await;
        announce_shutdown();
        // The handlers stay installed: a second signal must not end the process by default.
        tokio::spawn(async move {
            signals.next().await;
            let _ = second.send(());
        });
    };
    let second = async move {
        // Dropped unsent (the first never came, or the runtime is ending): never complete.
        if seen_second.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    (first, second)
}

fn announce_shutdown() {
    println!("tollgate: shutting down; finishing in-flight requests");
    tracing::info!("shutting down: draining open connections");
}

/// The process's SIGTERM and ctrl-c (SIGINT) handlers, installed at creation.
struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                interrupt: signal(SignalKind::interrupt()).ok(),
                terminate: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next SIGTERM or ctrl-c; never, for a signal whose handler could not be installed.
    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            () = recv(self.interrupt.as_mut()) => {}
            () = recv(self.terminate.as_mut()) => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The next delivery of `signal`; never, when it has no handler.
#[cfg(unix)]
async fn recv(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}
