//! The Markdown summaries printed on stdout: a heading, what was run with which parameters, and
//! a table of what was measured. Every number comes from the scenario's report; nothing here
//! predicts.

use std::fmt::Write as _;
use std::time::Duration;

use crate::bot::BotReport;
use crate::boundary::{self, BoundaryReport};
use crate::lineup::words;
use crate::throughput::ThroughputReport;

/// The bot scenario as Markdown.
///
/// ```
/// let report = tollgate_scenarios::bot::run()?;
/// let markdown = tollgate_scenarios::report::bot(&report);
/// assert!(markdown.contains("| fixed window |"));
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn bot(report: &BotReport) -> String {
    let requests = report.lanes.first().map_or(0, |lane| lane.requests.len());
    let last = report
        .lanes
        .first()
        .and_then(|lane| lane.requests.last())
        .map_or(Duration::ZERO, |r| r.at);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## Bot: one request every {} for {}, against {} per minute\n",
        words(report.every),
        words(last),
        report.limit
    );
    let _ = writeln!(
        out,
        "One client sends {requests} requests, at t = 0, {e}, …, {l} s ({per} a minute against a \
         budget of {limit}). Memory store on a manual clock; fixed windows are aligned to the \
         epoch and start at t = 0, 60, 120 s.\n",
        e = report.every.as_secs(),
        l = last.as_secs(),
        per = 60 / report.every.as_secs().max(1),
        limit = report.limit,
    );
    out.push_str(
        "| algorithm | parameters | admitted | denied | passed before the first denial | \
         first denial | denied at (s) | admission resumed at (s) |\n",
    );
    out.push_str("|---|---|---:|---:|---|---|---|---|\n");
    for lane in &report.lanes {
        let first_denial = lane.first_denial();
        let before: Vec<Duration> = lane
            .requests
            .iter()
            .take_while(|r| r.allowed)
            .map(|r| r.at)
            .collect();
        let before = match (before.first(), before.last()) {
            (Some(a), Some(b)) => format!("{} (t = {}–{} s)", before.len(), a.as_secs(), b.as_secs()),
            _ => "0".to_string(),
        };
        let runs: Vec<String> = lane.denied_runs().iter().map(|&(a, b)| span(a, b)).collect();
        let resumed: Vec<String> = lane
            .resumed_at()
            .iter()
            .map(|t| t.as_secs().to_string())
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            lane.label,
            lane.parameters,
            lane.admitted(),
            lane.denied(),
            before,
            first_denial.map_or("none".to_string(), |t| format!("t = {} s", t.as_secs())),
            or_none(runs.join(", ")),
            or_none(resumed.join(", ")),
        );
    }
    out.push('\n');
    out
}

/// The boundary scenario as Markdown: an accuracy table.
///
/// ```
/// let report = tollgate_scenarios::boundary::run(10)?;
/// let markdown = tollgate_scenarios::report::boundary(&report);
/// assert!(markdown.contains("| fixed window | 10 | 10 | 20 |"));
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn boundary(report: &BoundaryReport) -> String {
    let l = report.limit;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## Boundary: {l} requests at 0:59.9 and {l} at 1:00.0, against {l} per minute\n"
    );
    let _ = writeln!(
        out,
        "A client that knows where fixed windows start sends a burst of {l} at 0:59.9 (the end \
         of the first window) and {l} more {gap} later at 1:00.0 (the start of the next). \
         Memory store on a manual clock; windows aligned to the epoch start at t = 0. \"Max in \
         any 60 s\" is computed from the admitted requests' timestamps with a sliding scan.\n",
        gap = words(boundary::SECOND_AT - boundary::FIRST_AT),
    );
    out.push_str("| algorithm | admitted at 0:59.9 | admitted at 1:00.0 | max in any 60 s | vs limit |\n");
    out.push_str("|---|---:|---:|---:|---|\n");
    for row in &report.rows {
        let ratio = row.max_in_span as f64 / l as f64;
        let verdict = match row.max_in_span.cmp(&l) {
            std::cmp::Ordering::Greater => format!("{ratio:.2}× — over by {}", row.max_in_span - l),
            std::cmp::Ordering::Equal => format!("{ratio:.2}× — at the limit"),
            std::cmp::Ordering::Less => format!("{ratio:.2}× — under by {}", l - row.max_in_span),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            row.label, row.first_burst, row.second_burst, row.max_in_span, verdict
        );
    }
    out.push_str("\nParameters:\n\n");
    for row in &report.rows {
        let _ = writeln!(out, "- {}: {}", row.label, row.parameters);
    }
    out.push('\n');
    out
}

/// The throughput scenario as Markdown.
///
/// ```
/// use std::time::Duration;
/// use tollgate_scenarios::ThroughputArgs;
///
/// let args = ThroughputArgs { concurrency: vec![1], duration: Duration::from_millis(10), ..ThroughputArgs::default() };
/// let markdown = tollgate_scenarios::report::throughput(&tollgate_scenarios::throughput::run(&args)?);
/// assert!(markdown.contains("skipped"));
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn throughput(report: &ThroughputReport) -> String {
    let mut out = String::new();
    out.push_str("## Throughput: decisions per second and latency of one check\n\n");
    let _ = writeln!(
        out,
        "Keys drawn pseudo-randomly from {} distinct keys. Each cell (algorithm × store × \
         concurrency) stops after {} or {} checks, whichever comes first. Concurrency is the \
         number of tokio tasks sharing one store (Redis: one multiplexed connection) on a \
         {}-thread runtime. Latency is one `check` call, from an HDR histogram. The Redis deny \
         cache is off, so every Redis decision is a round trip; servers are on loopback.\n",
        thousands(report.keys as f64),
        words(report.duration),
        thousands(report.max_requests as f64),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    out.push_str("Parameters (per key):\n\n");
    for (label, parameters) in &report.lineup {
        let _ = writeln!(out, "- {label}: {parameters}");
    }
    out.push('\n');
    for (store, why) in &report.skipped {
        let _ = writeln!(out, "- {} skipped: {why}", store.label());
    }
    if !report.skipped.is_empty() {
        out.push('\n');
    }
    out.push_str(
        "| store | algorithm | concurrency | decisions/s | p50 | p99 | decisions | admitted | degraded |\n",
    );
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for cell in &report.cells {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell.store.label(),
            cell.algorithm,
            cell.concurrency,
            thousands(cell.per_second()),
            latency(cell.p50),
            latency(cell.p99),
            thousands(cell.decisions as f64),
            thousands(cell.allowed as f64),
            cell.degraded,
        );
    }
    out.push('\n');
    out
}

fn span(a: Duration, b: Duration) -> String {
    if a == b {
        a.as_secs().to_string()
    } else {
        format!("{}–{}", a.as_secs(), b.as_secs())
    }
}

fn or_none(text: String) -> String {
    if text.is_empty() { "none".into() } else { text }
}

/// `1 234 567` (rounded to a whole number).
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// `850 ns`, `12.3 µs`, `1.25 ms`.
fn latency(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands_and_picks_latency_units() {
        assert_eq!(thousands(1_234_567.4), "1 234 567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(latency(Duration::from_nanos(850)), "850 ns");
        assert_eq!(latency(Duration::from_nanos(12_340)), "12.3 µs");
        assert_eq!(latency(Duration::from_micros(1_250)), "1.25 ms");
    }
}
