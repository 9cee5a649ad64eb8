//! What every request handler shares: the live limits (swapped whole on reload), the decision
//! engine over the store, and the settings.
//!
//! Every door (HTTP, gRPC) decides through the one [`Engine`]: all-or-nothing, shadow rules,
//! penalties, failure modes and outcome labels are the engine's, so the doors only translate.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tollgate::Engine;

use crate::store::AnyStore;
use tollgate_config::Limits;

/// Server settings that do not change on reload.
#[derive(Debug, Clone)]
pub struct Settings {
    /// When set, admin endpoints require `Authorization: Bearer <token>`.
    pub admin_token: Option<String>,
    /// The longest key the HTTP API accepts, in bytes (default 1 KiB).
    pub max_key_len: usize,
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
            envoy: crate::grpc::EnvoySettings::default(),
            load: tollgate_config::LoadOptions::default(),
        }
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
        Arc::new(AppState {
            limits: ArcSwap::from_pointee(limits),
            // A clone shares the store's state (an `Arc` or a connection handle), so the engine
            // and the attempts endpoints see one store.
            engine: Engine::new(store.clone()),
            store,
            settings,
        })
    }
}
