//! The flags of the Envoy rate limit service's settings: each one a flag and a `TOLLGATE_*`
//! variable, so a binary user reaches every setting the docs name (docs/envoy.md, "Settings").
//! envoyproxy/ratelimit's own variables (`SHADOW_MODE`, ...; see `envoy_env`) are read too;
//! a flag given here wins over them, and a switch turned on by either is on.
//!
//! - [`LoadArgs`]: how config files are read (`serve`, `check-config`, `explain`), so a
//!   directory `serve` accepts is one `check-config` accepts.
//! - [`ModeArgs`]: what a request means (`serve`, `explain`), so explain answers as the server.
//! - [`ReplyArgs`]: what an answer carries beyond its codes (`serve`).

use clap::Args;
use tollgate_server::{ResponseHeaders, Settings};

/// The most distinct stats keys `--max-stats-keys` may give series of their own.
const MAX_STATS_KEYS: usize = 1_000_000;

/// How config files are read.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct LoadArgs {
    /// Let one Envoy domain's descriptors come from several files (as envoyproxy/ratelimit's
    /// MERGE_DOMAIN_CONFIG=true, which is read too).
    #[arg(long, env = "TOLLGATE_MERGE_DOMAIN_CONFIG")]
    merge_domain_config: bool,
}

impl LoadArgs {
    /// Turns on in `settings` what the flags ask for.
    pub(crate) fn apply(&self, settings: &mut Settings) {
        if self.merge_domain_config {
            settings.load = settings.load.with_merge_domains(true);
        }
    }
}

/// What an Envoy request means.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct ModeArgs {
    /// Answer every Envoy request OK overall; its limits are decided and counted only (as
    /// SHADOW_MODE=true, which is read too).
    #[arg(long, env = "TOLLGATE_SHADOW_MODE")]
    shadow_mode: bool,
    /// Put every descriptor in quota mode (as QUOTA_MODE=true, which is read too).
    #[arg(long, env = "TOLLGATE_QUOTA_MODE")]
    quota_mode: bool,
    /// Count as envoyproxy/ratelimit does: a descriptor within its limit spends even when
    /// another one of the request is over, and a cost above what is left spends what is left.
    /// Off: a request over any limit spends nothing (see docs/envoy.md).
    #[arg(long, env = "TOLLGATE_COUNT_EVERY_DESCRIPTOR")]
    count_every_descriptor: bool,
    /// Record no charge (a descriptor's own hits_addend) of a request whose checked descriptors
    /// are over the limit (as STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, which is read too).
    #[arg(long, env = "TOLLGATE_STOP_CHARGES_WHEN_OVER")]
    stop_charges_when_over: bool,
}

impl ModeArgs {
    /// Turns on in `settings` what the flags ask for.
    pub(crate) fn apply(&self, settings: &mut Settings) {
        let envoy = &mut settings.envoy;
        envoy.global_shadow_mode |= self.shadow_mode;
        envoy.global_quota_mode |= self.quota_mode;
        envoy.count_every_descriptor |= self.count_every_descriptor;
        envoy.stop_charges_when_over |= self.stop_charges_when_over;
    }
}

/// What an Envoy answer carries beyond its codes.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct ReplyArgs {
    /// The share of a limit past which hits count as near the limit in the per-descriptor
    /// statistics, above 0 and at most 1 [default: NEAR_LIMIT_RATIO when set, else 0.8].
    #[arg(long, env = "TOLLGATE_NEAR_LIMIT_RATIO", value_parser = near_limit_ratio)]
    near_limit_ratio: Option<f32>,
    /// Distinct stats keys with per-descriptor counters of their own; hits of any later key are
    /// counted under `_other` [default: 1000].
    #[arg(long, env = "TOLLGATE_MAX_STATS_KEYS", value_parser = clap::value_parser!(u32).range(0..=MAX_STATS_KEYS as i64))]
    max_stats_keys: Option<u32>,
    /// Add the request and the descriptors' metadata to answers as dynamic metadata (as
    /// RESPONSE_DYNAMIC_METADATA=true, which is read too).
    #[arg(long, env = "TOLLGATE_RESPONSE_DYNAMIC_METADATA")]
    response_dynamic_metadata: bool,
    /// Add rate limit headers to answers (as LIMIT_RESPONSE_HEADERS_ENABLED=true, which is read
    /// too).
    #[arg(long, env = "TOLLGATE_LIMIT_RESPONSE_HEADERS")]
    limit_response_headers: bool,
    /// The name of the header with the limit [default: LIMIT_LIMIT_HEADER, else RateLimit-Limit].
    #[arg(long, env = "TOLLGATE_LIMIT_LIMIT_HEADER", value_parser = header_name, requires = "limit_response_headers")]
    limit_limit_header: Option<String>,
    /// The name of the header with the budget left [default: LIMIT_REMAINING_HEADER, else
    /// RateLimit-Remaining].
    #[arg(long, env = "TOLLGATE_LIMIT_REMAINING_HEADER", value_parser = header_name, requires = "limit_response_headers")]
    limit_remaining_header: Option<String>,
    /// The name of the header with the seconds to the reset [default: LIMIT_RESET_HEADER, else
    /// RateLimit-Reset].
    #[arg(long, env = "TOLLGATE_LIMIT_RESET_HEADER", value_parser = header_name, requires = "limit_response_headers")]
    limit_reset_header: Option<String>,
    /// Add `Retry-After` (whole seconds until the limiting descriptor admits again) to every
    /// OVER_LIMIT answer, for Envoy to put on the 429 it sends.
    #[arg(long, env = "TOLLGATE_ENVOY_RETRY_AFTER")]
    envoy_retry_after: bool,
    /// Add the IETF draft's `RateLimit-Policy` and `RateLimit` fields to answers, as the HTTP
    /// API sends them.
    #[arg(long, env = "TOLLGATE_ENVOY_RATELIMIT_FIELDS")]
    envoy_ratelimit_fields: bool,
}

impl ReplyArgs {
    /// Sets in `settings` what the flags ask for; what they leave out stays as it is.
    pub(crate) fn apply(&self, settings: &mut Settings) {
        let envoy = &mut settings.envoy;
        if let Some(ratio) = self.near_limit_ratio {
            envoy.near_limit_ratio = ratio;
        }
        if let Some(keys) = self.max_stats_keys {
            envoy.max_stats_keys = keys as usize;
        }
        envoy.response_dynamic_metadata |= self.response_dynamic_metadata;
        envoy.retry_after |= self.envoy_retry_after;
        envoy.ratelimit_fields |= self.envoy_ratelimit_fields;
        if self.limit_response_headers {
            let names = envoy.response_headers.take().unwrap_or_default();
            envoy.response_headers = Some(ResponseHeaders::new(
                self.limit_limit_header.clone().unwrap_or(names.limit),
                self.limit_remaining_header.clone().unwrap_or(names.remaining),
                self.limit_reset_header.clone().unwrap_or(names.reset),
            ));
        }
    }
}

/// A ratio above 0 and at most 1.
fn near_limit_ratio(text: &str) -> Result<f32, String> {
    match text.trim().parse::<f32>() {
        Ok(ratio) if ratio > 0.0 && ratio <= 1.0 => Ok(ratio),
        _ => Err("expected a number above 0 and at most 1, like 0.8".to_owned()),
    }
}

/// An HTTP header name (a token).
fn header_name(text: &str) -> Result<String, String> {
    crate::envoy_env::header_name(text)
        .map(str::to_owned)
        .ok_or_else(|| "expected an HTTP header name".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        load: LoadArgs,
        #[command(flatten)]
        modes: ModeArgs,
        #[command(flatten)]
        reply: ReplyArgs,
    }

    fn settings(args: &[&str]) -> Result<Settings, clap::Error> {
        let flags = Flags::try_parse_from(std::iter::once("tollgate").chain(args.iter().copied()))?;
        let mut settings = Settings::default();
        flags.load.apply(&mut settings);
        flags.modes.apply(&mut settings);
        flags.reply.apply(&mut settings);
        Ok(settings)
    }

    #[test]
    fn every_setting_has_a_flag() {
        let settings = settings(&[
            "--merge-domain-config",
            "--shadow-mode",
            "--quota-mode",
            "--count-every-descriptor",
            "--near-limit-ratio=0.5",
            "--max-stats-keys=20",
            "--response-dynamic-metadata",
            "--limit-response-headers",
            "--limit-remaining-header=X-RateLimit-Remaining",
        ])
        .expect("valid flags");
        assert!(settings.load.merge_domains);
        let envoy = &settings.envoy;
        assert!(envoy.global_shadow_mode && envoy.global_quota_mode && envoy.count_every_descriptor);
        assert_eq!((envoy.near_limit_ratio, envoy.max_stats_keys), (0.5, 20));
        assert!(envoy.response_dynamic_metadata);
        let headers = envoy.response_headers.as_ref().expect("headers on");
        assert_eq!(
            (
                headers.limit.as_str(),
                headers.remaining.as_str(),
                headers.reset.as_str()
            ),
            ("RateLimit-Limit", "X-RateLimit-Remaining", "RateLimit-Reset")
        );
    }

    #[test]
    fn no_flag_changes_nothing() {
        assert_eq!(settings(&[]).expect("no flags").envoy, Settings::default().envoy);
    }

    #[test]
    fn bad_values_are_refused_naming_the_flag() {
        for args in [
            &["--near-limit-ratio=0"][..],
            &["--near-limit-ratio=1.5"],
            &["--max-stats-keys=-1"],
            &["--max-stats-keys=2000000"],
            &["--limit-response-headers", "--limit-limit-header=a b"],
            &["--limit-reset-header=X-Reset"],
        ] {
            let err = settings(args).map(|_| ()).expect_err("refused");
            let flag = args.last().unwrap().split('=').next().unwrap();
            assert!(err.to_string().contains(flag), "{args:?}: {err}");
        }
    }
}
