//! What a replay found: per policy (or Envoy domain) the requests admitted and denied under
//! each config, the requests whose outcome flips, and the keys with the most flips; printed
//! as Markdown.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};

use crate::decision_log::{Door, LogLine, LoggedOutcome, OpKind};

/// How many keys "keys most affected" lists.
const TOP_KEYS: usize = 10;

/// Admitted, denied and failed requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Let through.
    pub allowed: u64,
    /// Refused.
    pub denied: u64,
    /// A store failure under `fail_closed`, a policy or domain the config lacks, refused input.
    pub error: u64,
}

impl Tally {
    fn add(&mut self, outcome: LoggedOutcome) {
        match outcome {
            LoggedOutcome::Allowed => self.allowed += 1,
            LoggedOutcome::Denied => self.denied += 1,
            LoggedOutcome::Error => self.error += 1,
        }
    }
}

/// One policy's (or Envoy domain's) requests under both configs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Group {
    /// Under the baseline.
    pub baseline: Tally,
    /// Under the new config.
    pub new: Tally,
    /// Requests whose outcome differs.
    pub flipped: u64,
}

/// A request whose outcome differs between the configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flip {
    /// When it was decided, µs since the Unix epoch.
    pub time_us: u64,
    /// Its door.
    pub door: Door,
    /// Its policy (policies joined with `+`), or `domain NAME` for Envoy.
    pub group: String,
    /// Its key (keys joined with `,`), or its descriptors' entries for Envoy.
    pub key: String,
    /// What it asked: its kinds of ops joined with `+` (`check`, `charge`, `refund`,
    /// `check+charge`...); for an Envoy line written before ops were logged, read off its
    /// descriptors.
    pub asked: String,
    /// Under the baseline.
    pub before: LoggedOutcome,
    /// Under the new config.
    pub after: LoggedOutcome,
}

/// The replay's findings.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The config tried.
    pub config: String,
    /// The baseline config, `None` for the logged outcomes.
    pub baseline: Option<String>,
    /// Requests replayed.
    pub decisions: u64,
    /// Requests whose outcome differs.
    pub flipped: u64,
    /// By policy, or `domain NAME`.
    pub groups: BTreeMap<String, Group>,
    /// The first flipped requests, in time order.
    pub flips: Vec<Flip>,
    /// Flips per key, for the most affected.
    per_key: HashMap<String, u64>,
    first_us: Option<u64>,
    last_us: u64,
    shown: usize,
}

impl Report {
    pub(super) fn new(shown: usize) -> Self {
        Report {
            shown,
            ..Report::default()
        }
    }

    /// Counts `line`, decided `before` under the baseline and `after` under the new config.
    pub(super) fn add(&mut self, line: &LogLine, before: LoggedOutcome, after: LoggedOutcome) {
        self.decisions += 1;
        self.first_us.get_or_insert(line.time_us);
        self.last_us = line.time_us;
        // One op, the common case, looks its group up without allocating.
        let group = match (&line.domain, line.ops.as_slice()) {
            (Some(domain), _) => {
                let name = format!("domain {domain}");
                self.groups.entry(name).or_default()
            }
            (None, [one]) => lookup(&mut self.groups, &one.policy, || one.policy.clone()),
            (None, rules) => {
                let name = rules
                    .iter()
                    .map(|r| r.policy.as_str())
                    .collect::<Vec<_>>()
                    .join("+");
                self.groups.entry(name).or_default()
            }
        };
        group.baseline.add(before);
        group.new.add(after);
        if before == after {
            return;
        }
        group.flipped += 1;
        self.flipped += 1;
        let key = key_of(line);
        if self.flips.len() < self.shown {
            self.flips.push(Flip {
                time_us: line.time_us,
                door: line.door,
                group: group_name(line),
                key: key.clone().into_owned(),
                asked: asked(line),
                before,
                after,
            });
        }
        // A key's first flip stores it; the others only count.
        match self.per_key.get_mut(key.as_ref()) {
            Some(flips) => *flips += 1,
            None => {
                self.per_key.insert(key.into_owned(), 1);
            }
        }
    }

    /// The keys with the most flips, most first (ties by key).
    pub fn most_affected(&self) -> Vec<(&str, u64)> {
        let mut keys: Vec<(&str, u64)> = self.per_key.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        keys.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        keys.truncate(TOP_KEYS);
        keys
    }
}

impl Report {
    /// The report as JSON, for scripts: `decisions`, `flipped`, `groups` (by policy or
    /// `domain NAME`: `before` and `after` tallies, `flipped`), `flips` (the first ones, with
    /// `time_us`) and `most_affected`.
    ///
    /// ```
    /// let report = tollgate_server::replay::Report::default();
    /// assert_eq!(report.to_json()["flipped"], 0);
    /// ```
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let tally = |t: &Tally| json!({"allowed": t.allowed, "denied": t.denied, "error": t.error});
        let groups: serde_json::Map<String, serde_json::Value> = self
            .groups
            .iter()
            .map(|(name, g)| {
                (
                    name.clone(),
                    json!({"before": tally(&g.baseline), "after": tally(&g.new), "flipped": g.flipped}),
                )
            })
            .collect();
        let flips: Vec<_> = self
            .flips
            .iter()
            .map(|f| {
                json!({
                    "time_us": f.time_us,
                    "door": f.door.as_str(),
                    "policy": f.group,
                    "key": f.key,
                    "asked": f.asked,
                    "before": f.before.as_str(),
                    "after": f.after.as_str(),
                })
            })
            .collect();
        let most: Vec<_> = self
            .most_affected()
            .into_iter()
            .map(|(key, n)| json!({"key": key, "flipped": n}))
            .collect();
        json!({
            "config": self.config,
            "baseline": self.baseline,
            "decisions": self.decisions,
            "flipped": self.flipped,
            "groups": groups,
            "flips": flips,
            "most_affected": most,
        })
    }
}

fn lookup<'a>(
    groups: &'a mut BTreeMap<String, Group>,
    name: &str,
    owned: impl FnOnce() -> String,
) -> &'a mut Group {
    if !groups.contains_key(name) {
        groups.insert(owned(), Group::default());
    }
    groups
        .get_mut(name)
        .unwrap_or_else(|| unreachable!("inserted above"))
}

fn group_name(line: &LogLine) -> String {
    match &line.domain {
        Some(domain) => format!("domain {domain}"),
        None => line
            .ops
            .iter()
            .map(|r| r.policy.as_str())
            .collect::<Vec<_>>()
            .join("+"),
    }
}

/// A rules line's keys, or an Envoy line's descriptors (`k=v,k=v; k=v`); borrowed from the
/// line for one op.
fn key_of(line: &LogLine) -> Cow<'_, str> {
    if let (None, [one]) = (&line.domain, line.ops.as_slice()) {
        return Cow::Borrowed(&one.key);
    }
    Cow::Owned(if line.domain.is_some() {
        let mut key = String::new();
        for (i, descriptor) in line.descriptors.iter().enumerate() {
            if i > 0 {
                key.push_str("; ");
            }
            for (j, [k, v]) in descriptor.entries.iter().enumerate() {
                if j > 0 {
                    key.push(',');
                }
                let _ = write!(key, "{k}={v}");
            }
        }
        key
    } else {
        line.ops
            .iter()
            .map(|r| r.key.as_str())
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// What a line asked: its kinds of ops, each once, in order, joined with `+`; an Envoy line
/// without ops, by its descriptors (a refund, a charge, else a check).
fn asked(line: &LogLine) -> String {
    let mut kinds: Vec<&str> = Vec::new();
    let mut add = |kind: &'static str| {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    };
    if line.ops.is_empty() {
        for descriptor in &line.descriptors {
            add(match (descriptor.refund, descriptor.hits_addend) {
                (true, _) => OpKind::Refund.as_str(),
                (false, Some(hits)) if hits > 0 => OpKind::Charge.as_str(),
                _ => OpKind::Check.as_str(),
            });
        }
    }
    for op in &line.ops {
        add(op.op.as_str());
    }
    kinds.join("+")
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let baseline = match &self.baseline {
            Some(path) => format!("`{path}`"),
            None => "the logged outcomes".to_owned(),
        };
        writeln!(
            f,
            "# Replay of {} decisions under `{}`",
            self.decisions, self.config
        )?;
        writeln!(f)?;
        if let Some(first) = self.first_us {
            writeln!(
                f,
                "From {} to {}, against {baseline}: {} requests change outcome.",
                utc(first),
                utc(self.last_us),
                self.flipped
            )?;
            writeln!(f)?;
        }
        writeln!(
            f,
            "| policy | admitted before | denied before | admitted after | denied after | errors before | errors after | flipped |"
        )?;
        writeln!(f, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
        for (name, g) in &self.groups {
            writeln!(
                f,
                "| {name} | {} | {} | {} | {} | {} | {} | {} |",
                g.baseline.allowed,
                g.baseline.denied,
                g.new.allowed,
                g.new.denied,
                g.baseline.error,
                g.new.error,
                g.flipped
            )?;
        }
        if self.flipped == 0 {
            return Ok(());
        }
        writeln!(f)?;
        writeln!(
            f,
            "## Requests that change outcome (first {} of {})",
            self.flips.len(),
            self.flipped
        )?;
        writeln!(f)?;
        writeln!(f, "| time | door | asked | policy | key | before → after |")?;
        writeln!(f, "|---|---|---|---|---|---|")?;
        for flip in &self.flips {
            writeln!(
                f,
                "| {} | {} | {} | {} | {} | {} → {} |",
                utc(flip.time_us),
                flip.door.as_str(),
                flip.asked,
                flip.group,
                flip.key,
                flip.before.as_str(),
                flip.after.as_str()
            )?;
        }
        writeln!(f)?;
        writeln!(f, "## Keys most affected")?;
        writeln!(f)?;
        writeln!(f, "| key | flipped |")?;
        writeln!(f, "|---|---:|")?;
        for (key, n) in self.most_affected() {
            writeln!(f, "| {key} | {n} |")?;
        }
        Ok(())
    }
}

/// `time_us` as `2024-01-01T00:00:00.000000Z`.
fn utc(time_us: u64) -> String {
    let secs = time_us / 1_000_000;
    let micros = time_us % 1_000_000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rest = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_the_epoch_and_a_leap_day() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(utc(1_704_067_200_000_000), "2024-01-01T00:00:00.000000Z");
        assert_eq!(
            utc(1_709_164_800_000_001 + 3_723_000_000),
            "2024-02-29T01:02:03.000001Z"
        );
    }
}
