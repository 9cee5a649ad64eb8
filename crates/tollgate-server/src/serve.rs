//! Running the server: [`run`] serves the HTTP API and the Envoy rate limit service on
//! listeners the caller bound, until a shutdown future completes; [`serve`] is what `tollgate
//! serve` does around it: load the limits, open the store, bind, reload the limits on SIGHUP and
//! on file change (see [`reload`]), and stop on ctrl-c or SIGTERM.
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

use crate::state::{AppState, Settings, SharedState};
use crate::store::AnyStore;
use crate::{grpc, http, listener, metrics, reload};

/// What `tollgate serve` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// A config file or directory; `None` serves the built-in demo policies.
    pub config: Option<PathBuf>,
    /// `redis://...` or `redis+cluster://...`; `None` uses the embedded memory store.
    pub store: Option<String>,
    /// Where the HTTP API listens.
    pub http: SocketAddr,
    /// Where the Envoy rate limit service (gRPC) listens.
    pub grpc: SocketAddr,
    /// Fixed settings.
    pub settings: Settings,
}

/// The bound sockets [`run`] serves on.
#[derive(Debug)]
pub struct Listeners {
    /// The HTTP/JSON API.
    pub http: TcpListener,
    /// The Envoy rate limit service (gRPC).
    pub grpc: TcpListener,
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
        Ok(Listeners { http, grpc })
    }
}

/// Serves the HTTP API and the Envoy rate limit service over `state` on `listeners` until
/// `shutdown` completes; then both stop accepting, let their open connections finish for up to
/// the drain timeout, close the rest, and this returns. Both listeners have the timeouts and
/// limits of `state.settings.listeners` (see [`listener`]). An error means the settings are
/// unusable or a server failed, not that a request did.
///
/// Swap `state.limits` to change the limits while serving (as [`reload`] does). See the
/// [crate docs](crate) for an example.
pub async fn run(
    state: SharedState,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    metrics::install();
    state.settings.validate()?;
    let options = state.settings.listeners.clone();
    // One shutdown stops both servers; each lets its in-flight requests finish. The tasks are
    // aborted if this future is dropped, so no server outlives a caller that gave up on it.
    let (stop, stopped) = watch::channel(false);
    let signal = AbortOnDrop(tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    }));
    let when_stopped = |mut stopped: watch::Receiver<bool>| async move {
        // An error means the sender is gone, which happens only once `signal` is: stop then too.
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let mut grpc_server = AbortOnDrop(tokio::spawn(grpc::serve_with(
        listeners.grpc,
        Arc::clone(&state),
        options.clone(),
        when_stopped(stopped.clone()),
    )));
    let app = listener::with_request_limits(http::router(state), "http", &options);
    let http_served = listener::serve_http("http", listeners.http, app, &options, when_stopped(stopped))
        .await
        .context("http server");
    if http_served.is_err() {
        // The http server failed on its own: do not leave the grpc server running.
        signal.0.abort();
    }
    let grpc_served = (&mut grpc_server.0).await.context("grpc server task");
    http_served?;
    grpc_served?.context("grpc server")?;
    Ok(())
}

/// A task that ends when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves until ctrl-c or SIGTERM, as `tollgate serve` does; in-flight requests finish first.
pub async fn serve(options: Options) -> anyhow::Result<()> {
    options.settings.validate()?;
    let limits = tollgate_config::load_or_demo(options.config.as_deref())?;
    let store = match &options.store {
        Some(url) => AnyStore::redis(url)
            .await
            .with_context(|| format!("store `{url}`"))?,
        None => AnyStore::memory(),
    };
    let state = AppState::new(limits, store, options.settings.clone());
    let listeners = Listeners::bind(options.http, options.grpc).await?;
    // Watching and the SIGHUP handler start before the addresses are printed: a change or a
    // signal sent once they are seen is never missed.
    // SIGHUP is handled in every mode (its default action would end the process).
    #[cfg(unix)]
    if let Some(hangups) = reload::on_sighup(Arc::clone(&state), options.config.clone()) {
        tokio::spawn(hangups);
    }
    if let Some(path) = options.config.clone()
        && let Some(watch) = reload::on_change(Arc::clone(&state), path)
    {
        tokio::spawn(watch);
    }
    warn_if_admin_open(&options);
    let shutdown = shutdown_signal();
    println!("tollgate: http listening on {}", listeners.http.local_addr()?);
    println!("tollgate: grpc listening on {}", listeners.grpc.local_addr()?);
    println!(
        "tollgate: {} store, {}",
        state.store.kind(),
        options
            .config
            .as_ref()
            .map_or("built-in demo policies".to_string(), |p| format!(
                "config {}",
                p.display()
            ))
    );
    run(state, listeners, shutdown).await
}

/// A loud warning when the admin endpoints (limits and attempts resets) answer anyone who can
/// reach a non-loopback address.
fn warn_if_admin_open(options: &Options) {
    if options.settings.admin_token.is_none() && !options.http.ip().is_loopback() {
        tracing::warn!(
            http = %options.http,
            "admin endpoints (DELETE /v1/limits/..., DELETE /v1/attempts/...) are reachable without \
             a token on a non-loopback address; set --admin-token or TOLLGATE_ADMIN_TOKEN"
        );
    }
}

/// Completes on ctrl-c or SIGTERM. The handlers are installed when this is called, not when the
/// future is first polled, so a signal sent once the addresses are printed is never missed (it
/// would otherwise end the process with the default action).
pub(crate) fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let (interrupt, terminate) = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let wait = |signal: Option<tokio::signal::unix::Signal>| async move {
                match signal {
                    Some(mut signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(interrupt) => {}
                () = wait(terminate) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        println!("tollgate: shutting down; finishing in-flight requests");
        tracing::info!("shutting down: draining open connections");
    }
}
