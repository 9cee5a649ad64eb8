//! Resets reach every instance's deny cache and leases: a reset publishes the state key's name on
//! a Redis pub/sub channel (`<prefix>resets`), and every store listens on it and drops the key's
//! cached denial and lease. A message whose first byte is [`DROP_LEASE`] (never the first byte
//! of a key name, which starts with a text prefix) drops only the lease: a penalty started on
//! another instance. One whose first byte is [`DROP_DENIAL`] drops only the cached denial: a
//! refund gave the key budget back, and the leases of it are still good.
//!
//! Without this, an instance that cached "denied until T" keeps denying after an operator reset
//! the key on another instance, until T (a `block_for` penalty can make that hours).
//!
//! What it guarantees: once the reset's `PUBLISH` has been answered, each listening instance
//! drops the entry as soon as the message arrives (one network hop later). While an instance's
//! subscription is down it cannot hear resets, so when it (re)subscribes it empties its whole
//! deny cache: a reset missed meanwhile costs at most one Redis call per cached key, never a
//! denial that should not be. On a cluster, classic pub/sub reaches every node, so the listener
//! subscribes on one node (the first that answers) and the publisher publishes on any. Behind
//! Sentinel it subscribes on the master the sentinels name, and again after a failover ends
//! its subscription.

use std::sync::Weak;
use std::time::Duration;

use futures_util::StreamExt;

use crate::connection::{ConnectOptions, Target};
use crate::deny_cache::DenyCache;
use crate::lease::{DROP_LEASE, Leases};

/// The first byte of a reset-channel message that asks every instance to drop its cached denial
/// of a key (a refund gave budget back); not a text byte, like [`DROP_LEASE`].
pub(crate) const DROP_DENIAL: u8 = 0xfe;

/// What a reset message makes this instance forget. The listener ends once the store that owns
/// them is gone.
pub(crate) struct Forgets {
    pub(crate) deny_cache: Option<Weak<DenyCache>>,
    pub(crate) leases: Weak<Leases>,
}

impl Forgets {
    /// Applies one message; false once the store is gone.
    fn message(&self, payload: &[u8]) -> bool {
        let Some(leases) = self.leases.upgrade() else {
            return false;
        };
        match payload.split_first() {
            Some((&DROP_LEASE, state)) => leases.forget(state),
            Some((&DROP_DENIAL, state)) => {
                if let Some(cache) = self.deny_cache.as_ref().and_then(Weak::upgrade) {
                    cache.remove(state);
                }
            }
            _ => {
                leases.forget(payload);
                if let Some(cache) = self.deny_cache.as_ref().and_then(Weak::upgrade) {
                    cache.remove(payload);
                }
            }
        }
        true
    }

    /// Forgets everything (a reset may have been missed); false once the store is gone.
    fn everything(&self) -> bool {
        let Some(leases) = self.leases.upgrade() else {
            return false;
        };
        leases.forget_all();
        if let Some(cache) = self.deny_cache.as_ref().and_then(Weak::upgrade) {
            cache.clear();
        }
        true
    }
}

/// The channel's name for key prefix `prefix`.
pub(crate) fn channel(prefix: &str) -> String {
    format!("{prefix}resets")
}

/// Listens on `channel` and forgets each published name in `forgets`, until the store is
/// dropped. Reconnects after a second when the subscription drops or cannot be made. With
/// `subscribe_now`, the first subscription is made before this returns (an eagerly connected
/// store hears every reset from its first call on).
pub(crate) async fn start_listener(
    target: &Target,
    options: &ConnectOptions,
    channel: String,
    forgets: Forgets,
    timeout: Duration,
    subscribe_now: bool,
) -> Option<Listener> {
    let mut source = match target {
        Target::Standalone(url) => Source::Nodes(clients(std::slice::from_ref(url), options)),
        Target::Cluster(nodes) => Source::Nodes(clients(nodes, options)),
        Target::Sentinel(sentinel) => {
            Source::Sentinel(Box::new(sentinel.client(options.ca_pem.as_deref()).ok()?))
        }
    };
    if let Source::Nodes(clients) = &source
        && clients.is_empty()
    {
        return None;
    }
    let connect_timeout = timeout.max(Duration::from_millis(500));
    let mut first = match subscribe_now {
        true => match source.client(0, connect_timeout).await {
            Some(client) => subscribe(&client, &channel, connect_timeout).await,
            None => None,
        },
        false => None,
    };
    Some(Listener(tokio::spawn(async move {
        // Ends once the store is gone (checked after every subscription ends or fails).
        for attempt in 0usize.. {
            let pubsub = match first.take() {
                Some(pubsub) => Some(pubsub),
                None => {
                    let pubsub = match source.client(attempt, connect_timeout).await {
                        Some(client) => subscribe(&client, &channel, connect_timeout).await,
                        None => None,
                    };
                    // Resets published while we were not listening are lost: forget everything.
                    if pubsub.is_some() && !forgets.everything() {
                        return;
                    }
                    pubsub
                }
            };
            if let Some(mut pubsub) = pubsub {
                let mut messages = pubsub.on_message();
                while let Some(message) = messages.next().await {
                    if !forgets.message(message.get_payload_bytes()) {
                        return;
                    }
                }
            }
            if forgets.leases.strong_count() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })))
}

/// Where the listener subscribes: a node of the list, a different one each attempt (on a
/// cluster classic pub/sub reaches every node), or behind Sentinel the master the sentinels name
/// at that attempt (a master's messages also reach its replicas, so a subscription left on a
/// demoted master still hears them while it lives).
enum Source {
    Nodes(Vec<redis::Client>),
    Sentinel(Box<redis::sentinel::SentinelClient>),
}

impl Source {
    async fn client(&mut self, attempt: usize, within: Duration) -> Option<redis::Client> {
        match self {
            Source::Nodes(clients) => clients.get(attempt % clients.len().max(1)).cloned(),
            Source::Sentinel(sentinel) => tokio::time::timeout(within, sentinel.async_get_client())
                .await
                .ok()?
                .ok(),
        }
    }
}

/// A client per URL that parses.
fn clients(urls: &[String], options: &ConnectOptions) -> Vec<redis::Client> {
    urls.iter()
        .filter_map(|url| match &options.ca_pem {
            Some(pem) => redis::Client::build_with_tls(
                url.as_str(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            )
            .ok(),
            None => redis::Client::open(url.as_str()).ok(),
        })
        .collect()
}

async fn subscribe(client: &redis::Client, channel: &str, within: Duration) -> Option<redis::aio::PubSub> {
    let subscribed = tokio::time::timeout(within, async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    })
    .await;
    subscribed.ok()?.ok()
}

/// Stops the listener when the store that started it is dropped.
pub(crate) struct Listener(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}
