//! Serves the movies example: `--listen ADDR` (default 127.0.0.1:3000), `--store redis://host:port`
//! (or `TOLLGATE_STORE`; default the embedded memory store) and `--trusted-proxy CIDR` for each
//! proxy whose `X-Forwarded-For` names the client. Prints `listening on ADDR` once bound and
//! stops gracefully on ctrl-c or SIGTERM.

use std::net::SocketAddr;

use anyhow::Context;
use axum::Router;
use clap::Parser;
use tollgate::MemoryStore;
use tollgate_redis::{RedisStore, Target};
use tollgate_tower::{Cidr, ClientIp};

/// A movies API limited to 20 requests per minute per client IP.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// Where the limits live: `memory` (this process) or `redis://host:port`.
    #[arg(long, env = "TOLLGATE_STORE", default_value = "memory")]
    store: String,
    /// A proxy block (e.g. `198.51.100.0/24`) whose `X-Forwarded-For` is trusted; repeatable.
    #[arg(long = "trusted-proxy", value_name = "CIDR")]
    trusted_proxy: Vec<Cidr>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client_ip = ClientIp::peer().trust_proxies(args.trusted_proxy);
    let app: Router = if args.store == "memory" {
        tollgate_example_movies::app(MemoryStore::new(), client_ip)
    } else {
        let target = Target::parse(&args.store).context("--store")?;
        let store = RedisStore::builder(target)
            .connect()
            .await
            .with_context(|| format!("connecting to {}", args.store))?;
        tollgate_example_movies::app(store, client_ip)
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
