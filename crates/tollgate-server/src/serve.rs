//! Running the server: load the limits, open the store, bind the HTTP and gRPC listeners, serve
//! until told to stop, and reload the limits on SIGHUP and on file change (see [`reload`]).
//!
//! `main.rs` only turns arguments into [`Options`]. Listeners are bound here and their real
//! addresses printed (`tollgate: http listening on 127.0.0.1:PORT`), so `--http 127.0.0.1:0`
//! works and tests can find the port.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::state::{AppState, Settings};
use crate::store::AnyStore;
use crate::{Limits, config, grpc, http, metrics, reload};

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

/// The policies served when no config is given.
pub const DEMO_CONFIG: &str = include_str!("demo.yaml");

/// Loads the configured limits, or the demo policies.
///
/// ```
/// let limits = tollgate_server::serve::load_limits(None)?;
/// assert!(limits.policy("demo").is_some());
/// # Ok::<(), tollgate_server::ConfigError>(())
/// ```
pub fn load_limits(config: Option<&std::path::Path>) -> Result<Limits, config::ConfigError> {
    match config {
        Some(path) => config::load(path),
        None => config::parse("built-in demo config", DEMO_CONFIG),
    }
}

/// Serves until ctrl-c or SIGTERM; in-flight requests finish first.
pub async fn serve(options: Options) -> anyhow::Result<()> {
    let limits = load_limits(options.config.as_deref())?;
    let store = match &options.store {
        Some(url) => AnyStore::redis(url)
            .await
            .with_context(|| format!("store `{url}`"))?,
        None => AnyStore::memory(),
    };
    metrics::install();
    let state = AppState::new(limits, store, options.settings.clone());
    let listener = TcpListener::bind(options.http)
        .await
        .with_context(|| format!("cannot listen for http on {}", options.http))?;
    let grpc_listener = TcpListener::bind(options.grpc)
        .await
        .with_context(|| format!("cannot listen for grpc on {}", options.grpc))?;
    // Watching and the SIGHUP handler start before the addresses are printed: a change or a
    // signal sent once they are seen is never missed.
    if let Some(path) = options.config.clone() {
        #[cfg(unix)]
        if let Some(hangups) = reload::on_sighup(Arc::clone(&state), path.clone()) {
            tokio::spawn(hangups);
        }
        if let Some(watch) = reload::on_change(Arc::clone(&state), path) {
            tokio::spawn(watch);
        }
    }
    println!("tollgate: http listening on {}", listener.local_addr()?);
    println!("tollgate: grpc listening on {}", grpc_listener.local_addr()?);
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
    // One signal stops both servers; each lets its in-flight requests finish.
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    let when_stopped = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let grpc_server = tokio::spawn(grpc::serve(
        grpc_listener,
        Arc::clone(&state),
        when_stopped(stopped.clone()),
    ));
    axum::serve(listener, http::router(state))
        .with_graceful_shutdown(when_stopped(stopped))
        .await
        .context("http server")?;
    grpc_server
        .await
        .context("grpc server task")?
        .context("grpc server")?;
    Ok(())
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    println!("tollgate: shutting down; finishing in-flight requests");
}
