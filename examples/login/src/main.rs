//! Serves the login example: `--listen ADDR` (default 127.0.0.1:3001), `--store redis://host:port`
//! (or `TOLLGATE_STORE`; default the embedded memory store). Prints `listening on ADDR` once
//! bound and stops gracefully on ctrl-c or SIGTERM.

use std::net::SocketAddr;

use anyhow::Context;
use axum::Router;
use clap::Parser;
use tollgate::MemoryStore;
use tollgate_example_login::Users;
use tollgate_redis::{RedisStore, Target};

/// A login endpoint that locks an account for the rest of the hour after 5 failed logins.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:3001")]
    listen: SocketAddr,
    /// Where the failure counts live: `memory` (this process) or `redis://host:port`.
    #[arg(long, env = "TOLLGATE_STORE", default_value = "memory")]
    store: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let app: Router = if args.store == "memory" {
        tollgate_example_login::app(MemoryStore::new(), Users::demo())
    } else {
        let target = Target::parse(&args.store).context("--store")?;
        let store = RedisStore::builder(target)
            .connect()
            .await
            .with_context(|| format!("connecting to {}", args.store))?;
        tollgate_example_login::app(store, Users::demo())
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("serving")?;
    Ok(())
}

/// Resolves on ctrl-c or SIGTERM; the server then finishes the requests in flight.
async fn shutdown_signal() {
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
}
