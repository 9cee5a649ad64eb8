//! What every request handler shares: the live limits (swapped whole on reload), the decision
//! engine over the store, and the settings.
//!
//! Every door (HTTP, gRPC) decides through the one [`Engine`]: all-or-nothing, shadow rules,
//! penalties, failure modes and outcome labels are the engine's, so the doors only translate.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate::Engine;

use crate::listener::ListenerOptions;
use crate::store::AnyStore;
use tollgate_config::Limits;

/// Server settings that do not change on reload.
#[derive(Debug, Clone)]
pub struct Settings {
    /// When set, admin endpoints (limits reset, attempts reset) require
    /// `Authorization: Bearer <token>`. An empty token is refused by [`Settings::validate`].
    pub admin_token: Option<String>,
    /// The longest key the HTTP API accepts, in bytes (default 1 KiB).
    pub max_key_len: usize,
    /// Timeouts and limits of the HTTP and gRPC listeners.
    pub listeners: ListenerOptions,
    /// How the Envoy rate limit service answers: upstream's global settings.
    pub envoy: crate::grpc::EnvoySettings,
    /// How config files are put together, at start and on every reload (upstream's
    /// `MERGE_DOMAIN_CONFIG` is `merge_domains`).
    pub load: tollgate_config::LoadOptions,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            admin_token: None,
            max_key_len: 1024,
            listeners: ListenerOptions::default(),
            envoy: crate::grpc::EnvoySettings::default(),
            load: tollgate_config::LoadOptions::default(),
        }
    }
}

impl Settings {
    /// Checks the settings before serving: an empty admin token (which would silently turn the
    /// check off) and zero timeouts or limits are errors.
    ///
    /// ```
    /// use tollgate_server::state::Settings;
    ///
    /// let empty = Settings { admin_token: Some(String::new()), ..Settings::default() };
    /// assert_eq!(
    ///     empty.validate().unwrap_err().to_string(),
    ///     "the admin token must not be empty (leave it unset to run without one)"
    /// );
    /// assert!(Settings::default().validate().is_ok());
    /// ```
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.admin_token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            anyhow::bail!("the admin token must not be empty (leave it unset to run without one)");
        }
        self.listeners.validate().map_err(anyhow::Error::msg)
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
    /// engine's lists (see [`crate::access`]).
    pub access: crate::access::AccessAdmin,
    /// What Envoy requests mean, for every door that takes them (gRPC, `/json`, explain).
    pub planner: tollgate_config::envoy_plan::Planner,
}

/// The handle handlers receive.
pub type SharedState = Arc<AppState>;

impl AppState {
    /// State over `limits` and `store`, with an [`Engine`] over `store`.
    ///
    /// ```
    /// use tollgate_server::state::{AppState, Settings};
    /// use tollgate_server::store::AnyStore;
    ///
    /// let limits = tollgate_config::parse("demo.yaml", "policies: {}")?;
    /// let state = AppState::new(limits, AnyStore::memory(), Settings::default());
    /// assert!(state.limits.load().is_empty());
    /// assert_eq!(state.engine.store().kind(), "memory");
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn new(limits: Limits, store: AnyStore, settings: Settings) -> SharedState {
        let state = Arc::new(AppState {
            limits: ArcSwap::from_pointee(limits),
            // A clone shares the store's state (an `Arc` or a connection handle), so the engine
            // and the attempts endpoints see one store.
            engine: Engine::new(store.clone()),
            store,
            settings,
            access: crate::access::AccessAdmin::default(),
            planner: tollgate_config::envoy_plan::Planner::default(),
        });
        state.access.apply(&state);
        state
    }
}
