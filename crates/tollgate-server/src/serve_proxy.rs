//! The proxy's entry point, `tollgate proxy`: [`serve_proxy`] opens the store, binds, serves the
//! [proxy](crate::proxy) until ctrl-c or SIGTERM, and reloads its routes and policies on SIGHUP and on
//! file change. It sits with the server's other entry points (`serve`, `reload`) above the doors,
//! which is why it is apart from the proxy's router.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tollgate_config::load_or_demo;
use tollgate_tower::Cidr;

use crate::proxy::{Forward, ForwardOptions, Gates, LiveGates, admin_router, build_app};
use crate::runtime::listener::ListenerOptions;
use crate::runtime::store::AnyStore;

/// What `tollgate proxy` was asked to do.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// Where admitted requests go: `http://host:port[/base]`.
    pub upstream: String,
    /// A config file or directory with `policies` and `routes`; `None` uses the demo ones.
    pub config: Option<PathBuf>,
    /// `redis://...` or `redis+cluster://...`; `None` uses the embedded memory store.
    pub store: Option<String>,
    /// How to open the store: required or not, its deadline, TLS.
    pub store_options: crate::runtime::store::StoreOptions,
    /// Where the proxy listens.
    pub listen: SocketAddr,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<Cidr>,
    /// Where `/healthz`, `/readyz` and `/metrics` are served; `None` (the default) serves none.
    pub admin: Option<SocketAddr>,
    /// Timeouts and limits of the proxy's listener (and the admin listener).
    pub listeners: ListenerOptions,
    /// Deadlines of upstream calls.
    pub forward: ForwardOptions,
    /// Log every decision of the routes (sampled, bounded) for `tollgate replay`; `None` logs
    /// nothing.
    pub decision_log: Option<crate::ops::decision_log::DecisionLogOptions>,
}

impl ProxyOptions {
    /// Options with the defaults for everything but where to forward and listen.
    ///
    /// ```
    /// let options = tollgate_server::ProxyOptions::new("http://127.0.0.1:3000", "127.0.0.1:8090".parse()?);
    /// assert!(options.admin.is_none());
    /// assert_eq!(options.listeners.max_body_bytes, 16 * 1024 * 1024);
    /// # Ok::<(), std::net::AddrParseError>(())
    /// ```
    pub fn new(upstream: impl Into<String>, listen: SocketAddr) -> Self {
        ProxyOptions {
            upstream: upstream.into(),
            config: None,
            store: None,
            store_options: crate::runtime::store::StoreOptions::default(),
            listen,
            trusted_proxies: Vec::new(),
            admin: None,
            listeners: ListenerOptions {
                max_body_bytes: ListenerOptions::PROXY_MAX_BODY_BYTES,
                ..ListenerOptions::default()
            },
            forward: ForwardOptions::default(),
            decision_log: None,
        }
    }
}

/// Runs the proxy until ctrl-c or SIGTERM: open connections get the drain timeout to finish,
/// then are closed. Reloads the routes and policies on SIGHUP and on file change.
pub async fn serve_proxy(options: ProxyOptions) -> anyhow::Result<()> {
    options.listeners.validate().map_err(anyhow::Error::msg)?;
    // A client waiting for the upstream's answer sends nothing and receives nothing: the idle
    // timeout would close it before the upstream deadline could answer 504.
    if options.listeners.idle_timeout <= options.forward.response_timeout {
        anyhow::bail!(
            "the idle timeout ({:?}) must be longer than the upstream timeout ({:?})",
            options.listeners.idle_timeout,
            options.forward.response_timeout
        );
    }
    crate::ops::metrics::install();
    let limits = load_or_demo(options.config.as_deref())?;
    let decision_log = match &options.decision_log {
        Some(log) => Some(crate::ops::decision_log::DecisionLog::start(log.clone())?),
        None => None,
    };
    let forward = Forward::with_options(&options.upstream, options.forward)?;
    let store = AnyStore::open(options.store.as_deref(), &options.store_options).await?;
    if limits.routes().is_empty() {
        tracing::warn!("the config has no `routes`; every request is forwarded unchecked");
    }
    let store_kind = store.kind();
    let (app, gates, live) = build_app(&limits, store.clone(), forward, &options.trusted_proxies)?;
    let app = crate::runtime::listener::with_request_limits(app, "proxy", &options.listeners);
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    let admin = match options.admin {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for admin on {addr}"))?,
        ),
        None => None,
    };
    let stats = gates.stats.clone();
    let reload = reloader(options.config.clone(), gates, live);
    #[cfg(unix)]
    if let Some(hangups) = crate::reload::on_hangup({
        let reload = Arc::clone(&reload);
        move || reload()
    }) {
        tokio::spawn(hangups);
    }
    if let Some(path) = options.config.clone()
        && let Some(watch) = crate::reload::watch(path, {
            let reload = Arc::clone(&reload);
            move || reload()
        })
    {
        tokio::spawn(watch);
    }
    let shutdown = crate::serve::shutdown_signal();
    println!("tollgate: proxy listening on {}", listener.local_addr()?);
    if let Some(admin) = &admin {
        println!("tollgate: admin listening on {}", admin.local_addr()?);
    }
    println!(
        "tollgate: forwarding to {}, {store_kind} store, {} routes",
        options.upstream,
        limits.routes().len()
    );
    if let Some(log) = &decision_log {
        log.install();
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let when_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let admin_task = admin.map(|admin| {
        let options = options.listeners.clone();
        let stopped = when_stopped(stopped.clone());
        tokio::spawn(async move {
            crate::runtime::listener::serve_http(
                "admin",
                admin,
                crate::runtime::listener::with_request_limits(admin_router(store, stats), "admin", &options),
                &options,
                stopped,
            )
            .await
        })
    });
    let served = crate::runtime::listener::serve_http(
        "proxy",
        listener,
        app,
        &options.listeners,
        when_stopped(stopped),
    )
    .await
    .context("proxy server");
    if let Some(task) = admin_task {
        task.await.context("admin server task")?.context("admin server")?;
    }
    // Every answered request's line is written before the process ends, unless the writer
    // is held up past the drain timeout: then its lines are counted as lost, not waited for.
    if let Some(log) = decision_log {
        let deadline = options.listeners.drain_timeout;
        let _ = tokio::task::spawn_blocking(move || log.finish_within(Some(deadline))).await;
    }
    served
}

/// What SIGHUP and a file change call: reload the config, rebuild the gates and swap them in, or
/// keep the running ones when the new config is broken.
fn reloader(config: Option<PathBuf>, gates: Gates, live: LiveGates) -> Arc<dyn Fn() + Send + Sync> {
    Arc::new(move || {
        let Some(path) = &config else {
            tracing::info!(target: "tollgate_server::reload", "SIGHUP: proxying with the built-in demo routes; there is no config to reload");
            return;
        };
        match tollgate_config::load(path)
            .map_err(anyhow::Error::from)
            .and_then(|limits| {
                let built = gates.build(&limits)?;
                Ok((built, limits.routes().len()))
            }) {
            Ok((built, routes)) => {
                live.store(Arc::new(built));
                crate::ops::metrics::config_reload(true);
                tracing::info!(target: "tollgate_server::reload", config = %path.display(), routes, "proxy config reloaded");
            }
            Err(err) => {
                crate::ops::metrics::config_reload(false);
                tracing::warn!(
                    target: "tollgate_server::reload",
                    config = %path.display(),
                    error = format!("{err:#}"),
                    "proxy config reload rejected; still serving the previous routes"
                );
            }
        }
    })
}
