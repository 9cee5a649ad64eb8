//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

use tollgate::{Algorithm, Policy};

/// The directory of config fixtures.
pub(crate) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

/// A policy in one line, so a test can state every parameter at once:
/// `gcra 5 per 60s, burst 5; block_for 900s; fail_closed`.
pub(crate) fn describe(policy: &Policy) -> String {
    let per = |count: u64, period: std::time::Duration| format!("{count} per {period:?}");
    let mut text = match policy.algorithm() {
        Algorithm::FixedWindow(p) => format!("fixed_window {}, {:?}", per(p.limit(), p.window()), p.anchor()),
        Algorithm::SlidingLog(p) => format!("sliding_log {}", per(p.limit(), p.window())),
        Algorithm::SlidingWindow(p) => format!("sliding_window {}", per(p.limit(), p.window())),
        Algorithm::TokenBucket(p) => {
            format!(
                "token_bucket {}, refill {}",
                p.capacity(),
                per(p.refill().count(), p.refill().period())
            )
        }
        Algorithm::LeakyBucket(p) => {
            format!(
                "leaky_bucket {}, leak {}",
                p.capacity(),
                per(p.leak().count(), p.leak().period())
            )
        }
        Algorithm::Gcra(p) => format!(
            "gcra {}, burst {}",
            per(p.rate().count(), p.rate().period()),
            p.burst()
        ),
        Algorithm::CalendarQuota(p) => format!(
            "calendar_quota {} per {} in {}, weeks from {:?}",
            p.limit(),
            p.period().as_str(),
            p.time_zone(),
            p.week_start()
        ),
    };
    if let Some(block_for) = policy.block_for() {
        text += &format!("; block_for {block_for:?}");
    }
    text += &format!("; {}", policy.failure_mode());
    text
}
