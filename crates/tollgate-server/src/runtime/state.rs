//! What every request handler shares: the live limits (swapped whole on reload), the decision
//! engine over the store, and the settings.
//!
//! Every door (HTTP, gRPC) decides through the one [`Engine`]: all-or-nothing, shadow rules,
//! penalties, failure modes and outcome labels are the engine's, so the doors only translate.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use tollgate::Engine;

use super::access::{AccessAdmin, REFRESH_EVERY, Served};
use super::envoy_settings::EnvoySettings;
use super::listener::ListenerOptions;
use super::store::AnyStore;
use tollgate_config::Limits;

/// Server settings that do not change on reload.
#[derive(Debug, Clone)]
pub struct Settings {
    /// When set, admin endpoints (resets, overrides, access lists, top offenders, the
    /// dashboard's data) require `Authorization: Bearer <token>`, and app endpoints take it too.
    /// Without it, admin endpoints are open only while no app token is set either: with an app
    /// token alone they are closed. An empty token is refused by [`Settings::validate`].
    pub admin_token: Option<String>,
    /// When set, app endpoints (attempts try, count and clear, refunds, charges, lease release,
    /// and refunds and charges through `POST /json` and gRPC) require `Authorization: Bearer
    /// <token>` with this token or the admin token; admin endpoints refuse it. An empty token, or one equal to the admin token, is refused by
    /// [`Settings::validate`].
    pub app_token: Option<String>,
    /// The longest key the HTTP API accepts, in bytes (default 1 KiB, at most the core's
    /// [`MAX_KEY_LEN`](tollgate::bounds::MAX_KEY_LEN), 8 KiB, which [`Settings::validate`]
    /// checks). This is the one bound on a key at the HTTP door, checked once by
    /// [`Settings::check_key`]; the core's bound stays the store's own guard for every door.
    pub max_key_len: usize,
    /// Timeouts and limits of the HTTP and gRPC listeners.
    pub listeners: ListenerOptions,
    /// How the Envoy rate limit service answers: upstream's global settings.
    pub envoy: EnvoySettings,
    /// How config files are put together, at start and on every reload (upstream's
    /// `MERGE_DOMAIN_CONFIG` is `merge_domains`).
    pub load: tollgate_config::LoadOptions,
    /// How many keys the `local` failure mode's in-memory limiter holds (default
    /// [`DEFAULT_MAX_KEYS`](tollgate::memory::DEFAULT_MAX_KEYS)). When every key it holds is
    /// protecting a limit, a new key is let through and a charge of it is recorded nowhere
    /// (`recorded: false`).
    pub fallback_max_keys: usize,
    /// How long a shutdown keeps the listeners accepting and answering, with readiness already
    /// reporting the instance as stopping, before they drain: time for a load balancer (a
    /// Kubernetes Service, an Envoy health check) to stop sending new connections, so that none
    /// is refused. Zero (the default) drains at once. See [`run`](crate::run).
    pub shutdown_delay: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            admin_token: None,
            app_token: None,
            max_key_len: 1024,
            listeners: ListenerOptions::default(),
            envoy: EnvoySettings::default(),
            load: tollgate_config::LoadOptions::default(),
            fallback_max_keys: tollgate::memory::DEFAULT_MAX_KEYS,
            shutdown_delay: Duration::ZERO,
        }
    }
}

impl Settings {
    /// The configured tokens, for the one comparison every door makes.
    pub(crate) fn tokens(&self) -> super::tokens::Tokens<'_> {
        super::tokens::Tokens {
            admin: self.admin_token.as_deref(),
            app: self.app_token.as_deref(),
        }
    }

    /// Checks the settings before serving: an empty admin or app token (which would silently
    /// turn the check off), a token a client cannot send as it is in a header (spaces, which
    /// HTTP trims, control or non-ASCII characters), an app token equal to the admin token
    /// (which would make every application an admin) and zero timeouts or limits are errors.
    ///
    /// ```
    /// use tollgate_server::Settings;
    ///
    /// let empty = Settings { admin_token: Some(String::new()), ..Settings::default() };
    /// assert_eq!(
    ///     empty.validate().unwrap_err().to_string(),
    ///     "the admin token must not be empty (leave it unset to run without one)"
    /// );
    /// let same = Settings {
    ///     admin_token: Some("s3cret".into()),
    ///     app_token: Some("s3cret".into()),
    ///     ..Settings::default()
    /// };
    /// assert_eq!(
    ///     same.validate().unwrap_err().to_string(),
    ///     "the app token must differ from the admin token"
    /// );
    /// assert!(Settings::default().validate().is_ok());
    /// ```
    pub fn validate(&self) -> anyhow::Result<()> {
        for (name, token) in [("admin", &self.admin_token), ("app", &self.app_token)] {
            if let Some(token) = token {
                super::tokens::check_token(name, token).map_err(anyhow::Error::msg)?;
            }
        }
        if self.app_token.is_some() && self.app_token == self.admin_token {
            anyhow::bail!("the app token must differ from the admin token");
        }
        if self.max_key_len == 0 || self.max_key_len > tollgate::bounds::MAX_KEY_LEN {
            anyhow::bail!(
                "the longest key must be 1 to {} bytes, not {}",
                tollgate::bounds::MAX_KEY_LEN,
                self.max_key_len
            );
        }
        self.listeners.validate().map_err(anyhow::Error::msg)
    }

    /// Whether the HTTP API counts `key`: 1 to [`max_key_len`](Settings::max_key_len) bytes,
    /// any bytes. Every route that takes a key (check, peek, refund, reset, attempts, leases,
    /// overrides, explain) checks it here, once.
    ///
    /// ```
    /// use tollgate_server::Settings;
    ///
    /// let settings = Settings { max_key_len: 4, ..Settings::default() };
    /// assert!(settings.check_key(b"user").is_ok());
    /// assert_eq!(
    ///     settings.check_key(b"users").unwrap_err().to_string(),
    ///     "key is 5 bytes, above the maximum of 4"
    /// );
    /// assert_eq!(settings.check_key(b"").unwrap_err().to_string(), "key must not be empty");
    /// ```
    pub fn check_key(&self, key: &[u8]) -> Result<(), tollgate::Error> {
        if key.is_empty() {
            return Err(tollgate::Error::EmptyKey);
        }
        if key.len() > self.max_key_len {
            return Err(tollgate::Error::KeyTooLong {
                len: key.len(),
                max: self.max_key_len,
            });
        }
        Ok(())
    }
}

/// Shared by every handler.
pub struct AppState {
    /// The current limits; a reload swaps in a new value, in-flight requests keep the old one.
    pub limits: ArcSwap<Limits>,
    /// The store decisions are made in (the engine's), for attempts counters and readiness.
    pub store: AnyStore,
    /// Decides every rate limit request, over `store`.
    pub engine: Engine<AnyStore>,
    /// Fixed settings.
    pub settings: Settings,
    /// The allow and deny list entries added through the admin API, and the compiling of the
    /// engine's lists (see [`access`](super::access)).
    pub(crate) access: AccessAdmin,
    /// What Envoy requests mean, for every door that takes them (gRPC, `/json`, explain).
    pub planner: tollgate_config::envoy_plan::Planner,
    /// Set once a shutdown has started (its delay or its drain): readiness answers no from then
    /// on, whatever the store says.
    stopping: AtomicBool,
}

/// The handle handlers receive.
pub type SharedState = Arc<AppState>;

impl AppState {
    /// State over `limits` and `store`, with an [`Engine`] over `store` whose `local` limiter
    /// holds [`Settings::fallback_max_keys`] keys.
    ///
    /// ```
    /// use tollgate_server::{AnyStore, AppState, Settings};
    ///
    /// let limits = tollgate_config::parse("demo.yaml", "policies: {}")?;
    /// let state = AppState::new(limits, AnyStore::memory(), Settings::default());
    /// assert!(state.limits.load().is_empty());
    /// assert_eq!(state.engine.store().kind(), "memory");
    ///
    /// let small = Settings { fallback_max_keys: 100, ..Settings::default() };
    /// let state = AppState::new(tollgate_config::parse("demo.yaml", "policies: {}")?, AnyStore::memory(), small);
    /// assert_eq!(state.engine.fallback_max_keys(), 100);
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn new(limits: Limits, store: AnyStore, settings: Settings) -> SharedState {
        let state = Arc::new(AppState {
            limits: ArcSwap::from_pointee(limits),
            // A clone shares the store's state (an `Arc` or a connection handle), so the engine
            // and the attempts endpoints see one store.
            // On the store's clock, so that answers are dated in the store's time (virtual time
            // under `tollgate test` and replay).
            engine: Engine::builder(store.clone())
                .clock(store.clock())
                .fallback_max_keys(settings.fallback_max_keys)
                .build(),
            store,
            settings,
            access: AccessAdmin::default(),
            planner: tollgate_config::envoy_plan::Planner::default(),
            stopping: AtomicBool::new(false),
        });
        state.access.apply(state.served());
        state
    }

    /// Reads the access list entries in the store again and recompiles the lists when they or
    /// the limits changed, as the server does every second while it runs: an entry another
    /// instance added applies here after this.
    pub async fn refresh_access(&self) {
        self.access.refresh(self.served()).await;
    }

    /// Whether a shutdown has started: `/readyz` answers `503` from then on.
    ///
    /// ```
    /// use tollgate_server::{AnyStore, AppState, Settings};
    ///
    /// let state = AppState::new(tollgate_config::demo()?, AnyStore::memory(), Settings::default());
    /// assert!(!state.is_stopping());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Marks the shutdown as started (see [`is_stopping`](Self::is_stopping)); for good.
    pub(crate) fn begin_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// What the access lists are compiled from and into.
    pub(crate) fn served(&self) -> Served<'_> {
        Served {
            limits: &self.limits,
            engine: &self.engine,
        }
    }
}

/// Refreshes the access lists every [`REFRESH_EVERY`] until `stop` completes, so an entry
/// another instance added applies here too.
pub(crate) async fn keep_access_fresh(state: SharedState, stop: impl std::future::Future<Output = ()>) {
    let mut stop = std::pin::pin!(stop);
    let mut every = tokio::time::interval(REFRESH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = every.tick() => state.refresh_access().await,
        }
    }
}
