//! The Markdown summaries printed on stdout: a heading, what was run with which parameters, and
//! a table of what was measured. Every number comes from the scenario's report; nothing here
//! predicts.

use std::fmt::Write as _;
use std::time::Duration;

use crate::bot::BotReport;
use crate::boundary::{self, BoundaryReport};
use crate::compare::CompareReport;
use crate::compare::traffic::Shape;
use crate::lineup::words;
use crate::throughput::{StoreKind, ThroughputReport};

/// How much of the bot's run the "denied at" column lists; the per-minute counts cover the rest.
const LISTED: Duration = Duration::from_secs(180);

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
        words(report.every * requests as u32),
        report.limit
    );
    let _ = writeln!(
        out,
        "One client sends {requests} requests, at t = 0, {e}, …, {l} s ({per} a minute against a \
         budget of {limit}). Memory store on a manual clock; fixed windows are aligned to the \
         epoch and start every 60 s (t = 0, 60, 120, … s). \"Admitted in each minute\" counts \
         t = 0–59 s, 60–119 s, and so on: the first minutes show each algorithm's burst, the \
         last ones the rate it settles at. Denials are listed for the first {shown} minutes.\n",
        e = report.every.as_secs(),
        l = last.as_secs(),
        per = 60 / report.every.as_secs().max(1),
        limit = report.limit,
        shown = LISTED.as_secs() / 60,
    );
    out.push_str(
        "| algorithm | parameters | admitted | denied | passed before the first denial | \
         first denial | admitted in each minute | denied at (s) |\n",
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
        let all_runs = lane.denied_runs();
        let mut runs: Vec<String> = all_runs
            .iter()
            .filter(|&&(a, _)| a < LISTED)
            .map(|&(a, b)| span(a, b))
            .collect();
        if runs.len() < all_runs.len() {
            runs.push("…".to_string());
        }
        let minutes: Vec<String> = lane
            .admitted_per_minute()
            .iter()
            .map(ToString::to_string)
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
            minutes.join(", "),
            or_none(runs.join(", ")),
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

/// The comparison as Markdown: one table with every column, then the sliding window counter's
/// worst cases and how each column was measured.
///
/// ```
/// use std::time::Duration;
/// use tollgate_scenarios::CompareArgs;
///
/// let args = CompareArgs { limit: 10, duration: Duration::from_millis(10), keys: 100, seeds: 2, ..CompareArgs::default() };
/// let markdown = tollgate_scenarios::report::compare(&tollgate_scenarios::compare::run(&args)?);
/// assert!(markdown.contains("| sliding log |"));
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn compare(report: &CompareReport) -> String {
    let l = report.limit;
    let w = words(report.window);
    let mut out = String::new();
    let store = match report.store {
        StoreKind::Memory => "the memory store".to_string(),
        StoreKind::Redis => "one Redis server".to_string(),
        StoreKind::RedisCluster => format!("a Redis Cluster of {} nodes", report.redis_nodes),
    };
    let _ = writeln!(out, "## Compare: every algorithm on {store}, {l} per {w}\n");
    let (cpu_column, cpu_how) = match report.store {
        StoreKind::Memory => (
            "process CPU / 1 000",
            "this process's CPU time (user + system, load generator included) during the speed run",
        ),
        _ => (
            "Redis CPU / 1 000",
            "the Redis servers' `used_cpu_user + used_cpu_sys` (`INFO cpu`, summed over nodes) during the speed run",
        ),
    };
    let memory_how = match report.store {
        StoreKind::Memory => format!(
            "resident memory a fresh store grew by while {} keys each spent a full budget ({l} checks spread over one window; the window is an hour here, which changes no state's size), per key",
            thousands(report.sample_keys as f64)
        ),
        _ => format!(
            "`MEMORY USAGE … SAMPLES 0` of {} keys after each spent a full budget ({l} checks spread over one window; the window is an hour here, so that no key expires while it is measured, which changes no state's size), state and sliding log sorted set together, per key",
            report.sample_keys
        ),
    };
    let _ = writeln!(
        out,
        "Speed: {c} concurrent clients check keys drawn from {k} distinct keys for {d} or {m} \
         checks, whichever comes first, in {r} rounds interleaved with the other algorithms (so \
         other load on the machine falls on all alike); latency is one check, from an HDR \
         histogram. Accuracy: \
         the most requests admitted in any {w} span divided by the limit (1.00 = the limit held \
         exactly, 2.00 = twice the limit got through), on a simulated clock (seed 1). CPU: \
         {cpu_how}. Memory: {memory_how}.\n",
        c = report.concurrency,
        k = thousands(report.keys as f64),
        d = words(report.duration),
        m = thousands(report.max_requests as f64),
        r = crate::compare::SPEED_ROUNDS,
    );
    let _ = writeln!(
        out,
        "| algorithm | decisions/s | mean | p50 | p99 | max | {} | {} | {} | {cpu_column} | bytes per key |",
        Shape::ALL[0].label(),
        Shape::ALL[1].label(),
        Shape::ALL[2].label(),
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for row in &report.rows {
        let accuracy = row.accuracy(l);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} |",
            row.label,
            thousands(row.per_second()),
            latency(row.mean),
            latency(row.p50),
            latency(row.p99),
            latency(row.max),
            accuracy[0],
            accuracy[1],
            accuracy[2],
            row.cpu_per_1000.map_or("n/a".to_string(), latency),
            row.bytes_per_key.map_or("n/a".to_string(), bytes),
        );
    }
    let sw = &report.sliding_window;
    let _ = writeln!(
        out,
        "\nSliding window counter, worst case: over {seeds} seeds each of Poisson and on/off \
         traffic, at most **{most}** admitted in one {w} span ({ratio:.2}× the limit; {shape}, \
         seed {seed}). The proven bound is **2L − ⌈L / w⌉ = {bound}** ({bound_ratio:.2}×, w = \
         the window in ms), and an attacker who sends {l} requests in the last microsecond of \
         a window, then paces requests through the next one millisecond at a time, gets \
         **{attack}** through: the bound is reached, but only by precise pacing over a whole \
         window, where a fixed window gives 2L to two bursts a millisecond apart.\n",
        seeds = sw.seeds,
        most = sw.most_over_seeds,
        ratio = sw.most_over_seeds as f64 / l as f64,
        shape = sw.worst_seed.0.label(),
        seed = sw.worst_seed.1,
        bound = sw.bound,
        bound_ratio = sw.bound as f64 / l as f64,
        attack = sw.attack,
    );
    out.push_str("Admitted in the speed run (the rest were denied, which costs the same round trip):\n\n");
    for row in &report.rows {
        let _ = writeln!(
            out,
            "- {}: {} of {} ({:.0}%); {}",
            row.label,
            thousands(row.allowed as f64),
            thousands(row.decisions as f64),
            100.0 * row.allowed as f64 / row.decisions.max(1) as f64,
            row.parameters
        );
    }
    out.push('\n');
    out
}

/// `64 B`, `1.5 KiB`.
fn bytes(value: f64) -> String {
    if value < 1024.0 {
        format!("{value:.0} B")
    } else {
        format!("{:.1} KiB", value / 1024.0)
    }
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
