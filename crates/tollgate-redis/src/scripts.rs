//! The Lua scripts, compiled in with `include_str!` and hashed once.
//!
//! A decision script is the common helpers (integers, time), the shared prelude (arguments,
//! state loading), the algorithm's step and the shared epilogue (penalty, TTL), concatenated
//! into one script per algorithm; the attempts script is the common helpers and its own body.
//! `redis::Script` sends EVALSHA and, on NOSCRIPT (restart, `SCRIPT FLUSH`, failover, a node that
//! never saw it), loads the script on the node that answered and retries, so callers never see
//! NOSCRIPT.

use redis::Script;
use tollgate::Algorithm;

macro_rules! decision_script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("../lua/common.lua"),
            "\n",
            include_str!("../lua/prelude.lua"),
            "\n",
            include_str!(concat!("../lua/", $file)),
            "\n",
            include_str!("../lua/decide.lua"),
        ))
    };
}

/// Every script, hashed once.
pub(crate) struct Scripts {
    fixed_window: Script,
    sliding_log: Script,
    sliding_window: Script,
    token_bucket: Script,
    leaky_bucket: Script,
    gcra: Script,
    pub(crate) attempts: Script,
    pub(crate) reset: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            fixed_window: decision_script!("fixed_window.lua"),
            sliding_log: decision_script!("sliding_log.lua"),
            sliding_window: decision_script!("sliding_window.lua"),
            token_bucket: decision_script!("token_bucket.lua"),
            leaky_bucket: decision_script!("leaky_bucket.lua"),
            gcra: decision_script!("gcra.lua"),
            attempts: Script::new(concat!(
                include_str!("../lua/common.lua"),
                "\n",
                include_str!("../lua/attempts.lua")
            )),
            reset: Script::new(include_str!("../lua/reset.lua")),
        }
    }

    /// The decision script of `algorithm`.
    pub(crate) fn decision(&self, algorithm: &Algorithm) -> &Script {
        match algorithm {
            Algorithm::FixedWindow(_) => &self.fixed_window,
            Algorithm::SlidingLog(_) => &self.sliding_log,
            Algorithm::SlidingWindow(_) => &self.sliding_window,
            Algorithm::TokenBucket(_) => &self.token_bucket,
            Algorithm::LeakyBucket(_) => &self.leaky_bucket,
            Algorithm::Gcra(_) => &self.gcra,
        }
    }

    /// Every script's source, for `SCRIPT LOAD` ahead of traffic and for the ceiling benchmark.
    pub(crate) fn all(&self) -> [&Script; 8] {
        [
            &self.fixed_window,
            &self.sliding_log,
            &self.sliding_window,
            &self.token_bucket,
            &self.leaky_bucket,
            &self.gcra,
            &self.attempts,
            &self.reset,
        ]
    }
}

/// The algorithm-specific ARGV (from ARGV[6] on), as documented at the top of each script.
pub(crate) fn params(algorithm: &Algorithm) -> Vec<String> {
    use tollgate::Anchor;
    match algorithm {
        Algorithm::FixedWindow(p) => vec![
            p.limit().to_string(),
            p.window_us().to_string(),
            match p.anchor() {
                Anchor::Epoch => "epoch".into(),
                Anchor::FirstHit => "first_hit".into(),
            },
        ],
        Algorithm::SlidingLog(p) => vec![p.limit().to_string(), p.window_us().to_string()],
        Algorithm::SlidingWindow(p) => vec![p.limit().to_string(), p.window_us().to_string()],
        Algorithm::TokenBucket(p) => vec![p.capacity().to_string(), p.refill().interval_us().to_string()],
        Algorithm::LeakyBucket(p) => vec![p.capacity().to_string(), p.leak().interval_us().to_string()],
        Algorithm::Gcra(p) => vec![p.rate().interval_us().to_string(), p.burst().to_string()],
    }
}
