//! The Lua scripts, compiled in with `include_str!` and hashed once.
//!
//! The decision script is the common helpers (integers, time), the rule helpers
//! (`prelude.lua`: arguments, state, the penalty), every algorithm's step (each file registers
//! itself by name), the request (`request.lua`: all or nothing over a request's rules) and the
//! driver (`decide.lua`: one request), so one script decides any mix of algorithms in one call.
//! The batch script is the same with another driver (`batch.lua`: many requests in turn, each
//! as the decision script would decide it alone); both also charge, a request mode of its own
//! (see `request.lua`). The refund script is the same library with its own driver. The attempts and concurrency scripts are the common helpers and their own bodies.
//!
//! `redis::Script` sends EVALSHA and, on NOSCRIPT (restart, `SCRIPT FLUSH`, failover, a node that
//! never saw it), loads the script on the node that answered and retries, so callers never see
//! NOSCRIPT.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::Script;
use tollgate::{Algorithm, Rule};

/// The common helpers, the rule helpers and every algorithm, then the given files (the request
/// and a driver, say) from `lua/`.
macro_rules! library {
    ($($file:literal),*) => {
        concat!(
            include_str!("../lua/common.lua"),
            "\n",
            include_str!("../lua/prelude.lua"),
            "\n",
            include_str!("../lua/fixed_window.lua"),
            "\n",
            include_str!("../lua/sliding_log.lua"),
            "\n",
            include_str!("../lua/sliding_window.lua"),
            "\n",
            include_str!("../lua/token_bucket.lua"),
            "\n",
            include_str!("../lua/leaky_bucket.lua"),
            "\n",
            include_str!("../lua/gcra.lua"),
            "\n",
            include_str!("../lua/calendar_quota.lua"),
            $("\n", include_str!(concat!("../lua/", $file)),)*
        )
    };
}

/// The decision and batch scripts as one Redis function library (Redis 7 and later),
/// called with `FCALL`.
///
/// A script runs its whole text on every call: for the decision script that is defining the
/// library's functions again each time, which costs Redis more than deciding one rule (about
/// 13 µs of a 23 µs single decision). A function library runs its text once, when loaded, and
/// each call runs only the function: the same Lua, with the call's keys and arguments handed to
/// it instead of set as globals. The library is named after a hash of its code, so instances of
/// different versions never call each other's functions. A node that does not have it (a
/// restart, `FUNCTION FLUSH`, a new node) answers "Function not found", which says the call did
/// not run: the library is loaded and the call sent again, as for NOSCRIPT. A server without
/// functions (Redis 6) or a user not allowed to use them is told by its first answer, and from
/// then on the store sends the scripts (`EVALSHA`) instead.
pub(crate) struct Library {
    /// `FUNCTION LOAD` text.
    pub(crate) code: String,
    /// For each script the library holds: its hash and its function's name.
    functions: [(String, String); 2],
    /// Whether to call functions: cleared once the server shows it has none for us.
    usable: AtomicBool,
}

impl Library {
    fn new(decide: &Script, batch: &Script) -> Self {
        // The code is written with `NAME` for the library's name, then named after a hash of
        // all of it: any change to it, the wrapping included, is a library of its own.
        const NAME: &str = "tollgate_LIBRARY";
        let mut code = format!(
            "#!lua name={NAME}\n-- The call's keys and arguments, set by each function before it runs.\nlocal KEYS, ARGV\n{}\n",
            library!("request.lua")
        );
        let mut function = |script: &Script, driver: &str, lua: &str| {
            // The driver is the body of a function of the call's keys and arguments; each call
            // reads Redis TIME afresh.
            code.push_str(&format!(
                "redis.register_function('{NAME}_{driver}', function(keys, args)\nKEYS, ARGV, redis_now = keys, args, nil\n{lua}\nend)\n"
            ));
            (script.get_hash().to_owned(), format!("{NAME}_{driver}"))
        };
        let functions = [
            function(decide, "decide", include_str!("../lua/decide.lua")),
            function(batch, "batch", include_str!("../lua/batch.lua")),
        ];
        let hash = Script::new(&code).get_hash().to_owned();
        let name = format!("tollgate_{}", &hash[..16]);
        Library {
            code: code.replace(NAME, &name),
            functions: functions.map(|(script, function)| (script, function.replace(NAME, &name))),
            usable: AtomicBool::new(true),
        }
    }

    /// The function to call in place of `script`, while functions are usable.
    pub(crate) fn function_of(&self, script: &Script) -> Option<&str> {
        if !self.usable.load(Ordering::Relaxed) {
            return None;
        }
        self.functions
            .iter()
            .find(|(hash, _)| hash == script.get_hash())
            .map(|(_, function)| function.as_str())
    }

    /// The name of the decision script's function.
    pub(crate) fn decide_function(&self) -> &str {
        &self.functions[0].1
    }

    /// From now on, scripts instead of functions.
    pub(crate) fn unusable(&self) {
        self.usable.store(false, Ordering::Relaxed);
    }
}

/// Every script, hashed once.
pub(crate) struct Scripts {
    pub(crate) decide: Script,
    /// Many requests in one call, each as `decide` would decide it alone (see `batch`).
    pub(crate) batch: Script,
    pub(crate) refund: Script,
    pub(crate) lease: Script,
    pub(crate) attempts: Script,
    pub(crate) reset: Script,
    /// The fleet's allow and deny list entries (see `access`).
    pub(crate) access: Script,
    /// Writes a key override with its expiry (see `overrides`).
    pub(crate) set_override: Script,
    /// A policy's list of key overrides: bounded, read page by page (see `overrides`).
    pub(crate) override_keys: Script,
    /// Sets a prefix override within its policy's bound (see `overrides`).
    pub(crate) override_prefix: Script,
    /// Concurrency leases: acquire and release (see `concurrency`).
    pub(crate) concurrency: Script,
    /// The decision and batch scripts as a function library.
    pub(crate) library: Library,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let decide = Script::new(library!("request.lua", "decide.lua"));
        let batch = Script::new(library!("request.lua", "batch.lua"));
        Scripts {
            library: Library::new(&decide, &batch),
            decide,
            batch,
            refund: Script::new(library!("refund.lua")),
            lease: Script::new(library!("lease.lua")),
            attempts: Script::new(concat!(
                include_str!("../lua/common.lua"),
                "\n",
                include_str!("../lua/attempts.lua")
            )),
            reset: Script::new(include_str!("../lua/reset.lua")),
            access: Script::new(include_str!("../lua/access.lua")),
            set_override: Script::new(include_str!("../lua/override.lua")),
            override_keys: Script::new(include_str!("../lua/override_keys.lua")),
            override_prefix: Script::new(include_str!("../lua/override_prefix.lua")),
            concurrency: Script::new(concat!(
                include_str!("../lua/common.lua"),
                "\n",
                include_str!("../lua/concurrency.lua")
            )),
        }
    }

    /// Every script, for `SCRIPT LOAD` ahead of traffic.
    pub(crate) fn all(&self) -> [&Script; 11] {
        [
            &self.access,
            &self.set_override,
            &self.override_keys,
            &self.override_prefix,
            &self.decide,
            &self.batch,
            &self.refund,
            &self.lease,
            &self.attempts,
            &self.reset,
            &self.concurrency,
        ]
    }
}

/// What the decision script does with the rules (ARGV[3]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Change nothing.
    Peek,
    /// All or nothing.
    Commit,
    /// Commit, and report where each spend went.
    Reserve,
    /// Give back reserved spends (the refund script).
    Refund,
    /// Give back what the caller asks, without marks (the refund script: `Store::refund`).
    GiveBack,
    /// Give back a lease's unused units and take a new lease (the lease script).
    Lease,
    /// Record costs whatever is left (`Store::charge`).
    Charge,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Peek => "peek",
            Mode::Commit => "commit",
            Mode::Reserve => "reserve",
            Mode::Refund => "refund",
            Mode::GiveBack => "give_back",
            Mode::Lease => "lease",
            Mode::Charge => "charge",
        }
    }
}

/// The ARGV of a decision or refund call, as documented in `lua/decide.lua` and
/// `lua/prelude.lua`: `now` ("" for Redis time), the count, the mode, then one record of
/// [`RULE_FIELDS`] values per rule, with its mark (0 unless refunding), ending with the policy
/// version's [`stamp`] and [`version`].
pub(crate) fn call_args<'r>(
    now: String,
    mode: Mode,
    rules: impl ExactSizeIterator<Item = (&'r Rule<'r>, u64)>,
) -> Vec<String> {
    // Calendar periods are computed here, around the call's time (the test clock's, or this
    // instance's for Redis time); the script picks the one that holds its own time.
    let around_us = now.parse::<u64>().unwrap_or_else(|_| system_now_us());
    let mut args = Vec::with_capacity(3 + rules.len() * RULE_FIELDS);
    args.push(now);
    args.push(rules.len().to_string());
    args.push(mode.as_str().to_string());
    for (rule, mark) in rules {
        let algorithm = rule.policy.algorithm();
        args.push(algorithm.name().to_string());
        args.push(rule.cost.to_string());
        // The role: 1 for a shadow rule, plus 2 for a question (never spent).
        args.push((u8::from(rule.shadow) + 2 * u8::from(rule.question)).to_string());
        args.push(rule.policy.penalty().map_or_else(|| "0".to_owned(), |p| p.wire()));
        args.push(mark.to_string());
        args.extend(params(algorithm, around_us));
        args.push(stamp(rule.policy));
        args.push(version(rule.policy));
    }
    args
}

/// Values per rule record.
pub(crate) const RULE_FIELDS: usize = 10;

/// The stamp a state written under this version of `policy` carries (its field `a`): the
/// algorithm's name and the version's fingerprint, "fixed_window/0123456789abcdef". A state
/// stamped otherwise was written under other numbers and is migrated (see `lua/prelude.lua`).
pub(crate) fn stamp(policy: &tollgate::Policy) -> String {
    format!("{}/{}", policy.version_algorithm().name(), policy.fingerprint())
}

/// This version of `policy` as a state written under it records it (its field `g`), so that
/// another version can read it: "<generation>|<on_change>|<parameters>", the parameters those of
/// the rule record without an override, joined by spaces; a calendar quota's is only its limit
/// (its periods are placed around each call's time, so they cannot be stored).
pub(crate) fn version(policy: &tollgate::Policy) -> String {
    let algorithm = policy.version_algorithm();
    let params = match algorithm {
        Algorithm::CalendarQuota(p) => p.limit().to_string(),
        other => params(other, 0).join(" "),
    };
    format!("{}|{}|{params}", policy.generation(), policy.on_change())
}

/// Integers per rule in a decision script's reply (see `lua/decide.lua`).
pub(crate) const ANSWER: usize = 5;

/// How many integers the decision script answers the call `args` with: [`ANSWER`] per rule
/// (a charge's too, its first carrying the debt), with "reserve" one mark per rule more.
pub(crate) fn reply_len(args: &[String]) -> usize {
    let rules = args.get(1).and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
    let mode = args.get(2).map(String::as_str);
    let per_rule = if mode == Some(Mode::Reserve.as_str()) {
        ANSWER + 1
    } else {
        ANSWER
    };
    (per_rule * rules).max(1)
}

/// This instance's time, µs since the Unix epoch.
fn system_now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The algorithm's three parameters, as listed at the top of its file ("" when unused).
/// `around_us` places a calendar quota's periods.
pub(crate) fn params(algorithm: &Algorithm, around_us: u64) -> [String; 3] {
    use tollgate::Anchor;
    match algorithm {
        Algorithm::FixedWindow(p) => [
            p.limit().to_string(),
            p.window_us().to_string(),
            match p.anchor() {
                Anchor::Epoch => "epoch".into(),
                Anchor::FirstHit => "first_hit".into(),
            },
        ],
        Algorithm::SlidingLog(p) => [p.limit().to_string(), p.window_us().to_string(), String::new()],
        Algorithm::SlidingWindow(p) => [p.limit().to_string(), p.window_us().to_string(), String::new()],
        Algorithm::TokenBucket(p) => [
            p.capacity().to_string(),
            p.refill().interval_us().to_string(),
            String::new(),
        ],
        Algorithm::LeakyBucket(p) => [
            p.capacity().to_string(),
            p.leak().interval_us().to_string(),
            String::new(),
        ],
        Algorithm::Gcra(p) => [
            p.rate().interval_us().to_string(),
            p.burst().to_string(),
            String::new(),
        ],
        Algorithm::CalendarQuota(p) => [
            p.limit().to_string(),
            p.boundaries_around(around_us)
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
            String::new(),
        ],
    }
}
