//! Per-stats-key counters, the Prometheus form of envoyproxy/ratelimit's statistics
//! (`ratelimit.service.rate_limit.<stats key>.<stat>`), so dashboards built on upstream's stats
//! keep their meaning:
//!
//! | upstream stat  | metric                                 |
//! |----------------|----------------------------------------|
//! | `total_hits`   | `tollgate_envoy_total_hits_total{key}` |
//! | `over_limit`   | `tollgate_envoy_over_limit_total{key}` |
//! | `near_limit`   | `tollgate_envoy_near_limit_total{key}` |
//! | `within_limit` | `tollgate_envoy_within_limit_total{key}` |
//! | `shadow_mode`  | `tollgate_envoy_shadow_mode_total{key}` |
//!
//! `key` is upstream's stats key ([`Resolved::stats_key`](tollgate_config::Resolved::stats_key),
//! or `domain.key_value...` for a limit override). Hits are counted as upstream counts them:
//! each descriptor adds its cost, split between `near_limit`, `over_limit` and `within_limit` by
//! where the count was before and after it (`near_limit` starts at the near-limit ratio of the
//! limit).
//!
//! `detailed_metric` and `value_to_metric` put request values into the key, so the number of
//! keys is capped ([`EnvoySettings::max_stats_keys`](super::EnvoySettings)): the first keys seen
//! get their own series, every later one is counted under [`OVERFLOW_KEY`], and the memory of
//! the metrics stays bounded whatever the traffic. When statsd is on, the same counts go out
//! under upstream's own names ([`statsd`](crate::ops::statsd)), under the same cap.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use metrics::Counter;
use tollgate_config::envoy_plan::Hit;

/// The `key` label of hits whose own key came past the cap.
pub const OVERFLOW_KEY: &str = "_other";

/// The keys that have a series of their own, with their counters: a hit looks its key up under
/// a read lock and increments five atomics, without building labels again.
#[derive(Debug)]
pub(crate) struct StatsKeys {
    admitted: RwLock<HashMap<String, Arc<KeyCounters>>>,
    max: usize,
}

/// The five counters of one stats key.
#[derive(Debug)]
pub(crate) struct KeyCounters {
    total_hits: Counter,
    over_limit: Counter,
    near_limit: Counter,
    within_limit: Counter,
    shadow_mode: Counter,
    /// The same counts for statsd, when it is on.
    statsd: Option<Arc<crate::ops::statsd::KeyStats>>,
}

impl KeyCounters {
    fn new(label: &str) -> Self {
        let counter = |name: &'static str| metrics::counter!(name, "key" => label.to_owned());
        KeyCounters {
            total_hits: counter("tollgate_envoy_total_hits_total"),
            over_limit: counter("tollgate_envoy_over_limit_total"),
            near_limit: counter("tollgate_envoy_near_limit_total"),
            within_limit: counter("tollgate_envoy_within_limit_total"),
            shadow_mode: counter("tollgate_envoy_shadow_mode_total"),
            statsd: crate::ops::statsd::key(label),
        }
    }
}

/// How a hit splits between upstream's stats.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Split {
    pub(crate) near: u64,
    pub(crate) over: u64,
    pub(crate) within: u64,
    pub(crate) shadow: u64,
}

/// Upstream's arithmetic: of the hits that took the count from `before` to `before + cost`,
/// those past the limit are over it, those between the near-limit threshold and the limit are
/// near it; a hit within the limit counts all its cost as within, some of it also as near.
pub(crate) fn split(hit: &Hit, near_limit_ratio: f32) -> Split {
    let near_at = (hit.limit as f64 * f64::from(near_limit_ratio)).floor() as u64;
    let after = hit.before.saturating_add(hit.cost);
    let mut split = Split::default();
    if hit.over {
        let over_part = if hit.before >= hit.limit {
            hit.cost
        } else {
            split.near = hit.limit.saturating_sub(near_at.max(hit.before));
            after.saturating_sub(hit.limit)
        };
        split.over = over_part;
        if hit.shadow {
            split.shadow = over_part;
        }
    } else {
        split.within = hit.cost;
        if after > near_at {
            split.near = if hit.before >= near_at {
                hit.cost
            } else {
                after - near_at
            };
        }
    }
    split
}

impl StatsKeys {
    pub(crate) fn new(max: usize) -> Self {
        StatsKeys {
            admitted: RwLock::new(HashMap::new()),
            max,
        }
    }

    /// The counters of `key`: its own while there is room, else those of [`OVERFLOW_KEY`]
    /// (which never takes a place of its own).
    pub(crate) fn counters(&self, key: &str) -> Arc<KeyCounters> {
        let admitted = self.admitted.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(counters) = admitted.get(key) {
            return Arc::clone(counters);
        }
        drop(admitted);
        let mut admitted = self.admitted.write().unwrap_or_else(PoisonError::into_inner);
        let own = admitted.len() < self.max + usize::from(admitted.contains_key(OVERFLOW_KEY));
        let label = if own { key } else { OVERFLOW_KEY };
        Arc::clone(
            admitted
                .entry(label.to_owned())
                .or_insert_with(|| Arc::new(KeyCounters::new(label))),
        )
    }

    /// The label `key` is counted under.
    #[cfg(test)]
    fn label(&self, key: &str) -> String {
        let counters = self.counters(key);
        let admitted = self.admitted.read().unwrap_or_else(PoisonError::into_inner);
        admitted
            .iter()
            .find(|(_, c)| Arc::ptr_eq(c, &counters))
            .map(|(k, _)| k.clone())
            .unwrap_or_default()
    }

    /// Counts one descriptor's hit under its stats key.
    pub(crate) fn record(&self, key: &str, hit: Hit, near_limit_ratio: f32) {
        let counters = self.counters(key);
        let split = split(&hit, near_limit_ratio);
        counters.total_hits.increment(hit.cost);
        counters.over_limit.increment(split.over);
        counters.near_limit.increment(split.near);
        counters.within_limit.increment(split.within);
        counters.shadow_mode.increment(split.shadow);
        if let Some(statsd) = &counters.statsd {
            use std::sync::atomic::Ordering::Relaxed;
            statsd.total_hits.fetch_add(hit.cost, Relaxed);
            statsd.over_limit.fetch_add(split.over, Relaxed);
            statsd.near_limit.fetch_add(split.near, Relaxed);
            statsd.within_limit.fetch_add(split.within, Relaxed);
            statsd.shadow_mode.fetch_add(split.shadow, Relaxed);
        }
    }
}

/// A request that global shadow mode let through although it was over the limit (upstream's
/// service-level `global_shadow_mode` stat).
pub(crate) fn global_shadow_mode() {
    metrics::counter!("tollgate_envoy_global_shadow_mode_total").increment(1);
    crate::ops::statsd::global_shadow_mode();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(before: u64, cost: u64, over: bool) -> Split {
        let hit = Hit {
            cost,
            limit: 10,
            before,
            over,
            shadow: false,
        };
        super::split(&hit, 0.8)
    }

    #[test]
    fn hits_below_the_near_threshold_are_only_within() {
        assert_eq!(
            split(0, 1, false),
            Split {
                within: 1,
                ..Split::default()
            }
        );
        assert_eq!(
            split(7, 1, false),
            Split {
                within: 1,
                ..Split::default()
            }
        );
    }

    #[test]
    fn hits_past_the_near_threshold_are_near_as_well() {
        assert_eq!(
            split(8, 1, false),
            Split {
                within: 1,
                near: 1,
                ..Split::default()
            }
        );
        // From 6 to 10: the two hits past 8 are near.
        assert_eq!(
            split(6, 4, false),
            Split {
                within: 4,
                near: 2,
                ..Split::default()
            }
        );
    }

    #[test]
    fn over_limit_hits_split_at_the_limit() {
        // From 9 to 12: two over, one near (9 to 10).
        assert_eq!(
            split(9, 3, true),
            Split {
                over: 2,
                near: 1,
                ..Split::default()
            }
        );
        // Already at the limit: all of the cost is over.
        assert_eq!(
            split(10, 3, true),
            Split {
                over: 3,
                ..Split::default()
            }
        );
    }

    #[test]
    fn shadow_mode_counts_the_over_part_again() {
        let hit = Hit {
            cost: 2,
            limit: 10,
            before: 10,
            over: true,
            shadow: true,
        };
        assert_eq!(
            super::split(&hit, 0.8),
            Split {
                over: 2,
                shadow: 2,
                ..Split::default()
            }
        );
    }

    #[test]
    fn a_ratio_outside_zero_to_one_never_panics() {
        for ratio in [-1.0, 0.0, 1.0, 2.5, f32::NAN, f32::INFINITY] {
            for (before, over) in [(0, false), (9, true), (10, true)] {
                let hit = Hit {
                    cost: 3,
                    limit: 10,
                    before,
                    over,
                    shadow: false,
                };
                let split = super::split(&hit, ratio);
                assert!(split.near <= 10, "{ratio}: {split:?}");
            }
        }
    }

    #[test]
    fn a_deny_all_limit_counts_everything_over() {
        let hit = Hit {
            cost: 1,
            limit: 0,
            before: 0,
            over: true,
            shadow: false,
        };
        assert_eq!(
            super::split(&hit, 0.8),
            Split {
                over: 1,
                ..Split::default()
            }
        );
    }

    #[test]
    fn keys_past_the_cap_share_the_overflow_label() {
        let keys = StatsKeys::new(2);
        assert_eq!(keys.label("a"), "a");
        assert_eq!(keys.label("b"), "b");
        assert_eq!(keys.label("c"), OVERFLOW_KEY);
        assert_eq!(keys.label("d"), OVERFLOW_KEY);
        assert_eq!(keys.label("a"), "a", "an admitted key keeps its label");
        assert_eq!(
            keys.admitted.read().unwrap().len(),
            3,
            "two keys and the overflow"
        );
    }
}
