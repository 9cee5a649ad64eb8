//! What every request handler shares: the live limits (swapped whole on reload), the store and
//! the settings.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::store::AnyStore;
use tollgate_config::Limits;

/// Server settings that do not change on reload.
#[derive(Debug, Clone)]
pub struct Settings {
    /// When set, admin endpoints require `Authorization: Bearer <token>`.
    pub admin_token: Option<String>,
    /// The longest key the HTTP API accepts, in bytes (default 1 KiB).
    pub max_key_len: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            admin_token: None,
            max_key_len: 1024,
        }
    }
}

/// Shared by every handler.
pub struct AppState {
    /// The current limits; a reload swaps in a new value, in-flight requests keep the old one.
    pub limits: ArcSwap<Limits>,
    /// Where decisions are made.
    pub store: AnyStore,
    /// Fixed settings.
    pub settings: Settings,
    /// The policies of the gRPC limit overrides seen so far (bounded).
    pub(crate) overrides: crate::grpc::OverridePolicies,
}

/// The handle handlers receive.
pub type SharedState = Arc<AppState>;

impl AppState {
    /// State over `limits` and `store`.
    ///
    /// ```
    /// use tollgate_server::state::{AppState, Settings};
    /// use tollgate_server::store::AnyStore;
    ///
    /// let limits = tollgate_config::parse("demo.yaml", "policies: {}")?;
    /// let state = AppState::new(limits, AnyStore::memory(), Settings::default());
    /// assert!(state.limits.load().is_empty());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn new(limits: Limits, store: AnyStore, settings: Settings) -> SharedState {
        Arc::new(AppState {
            limits: ArcSwap::from_pointee(limits),
            store,
            settings,
            overrides: crate::grpc::OverridePolicies::default(),
        })
    }
}
