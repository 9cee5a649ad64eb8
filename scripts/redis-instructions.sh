#!/usr/bin/env bash
# Instructions Redis runs per rate limit decision, per algorithm and case, beside the same figure
# for other limiters on the same redis-server: the figure of merit for what a fleet pays in Redis
# CPU. redis-server runs under callgrind (Debian package valgrind); for each row the counters are
# zeroed, the decisions made, and the total divided by their number. Unlike wall time, the count
# does not move with the machine's load.
#
#   ./scripts/redis-instructions.sh
#   KEYS_PER_CASE=5000 MODE=single ./scripts/redis-instructions.sh
#   CELL_MODULE=/path/to/libredis_cell.so ./scripts/redis-instructions.sh
#   LIMITADOR_BIN=/path/to/limitador-server ./scripts/redis-instructions.sh
#   ROWS=peers CELL_MODULE=... LIMITADOR_BIN=... ./scripts/redis-instructions.sh
#
# Rows: every tollgate algorithm for a new key, a key counting within its limit and a denied
# key (policies of 3 per hour: `benches/decision_instructions.rs`, 64 decisions in flight, so
# the store batches them as under load; MODE=single for one decision per call);
# then, per algorithm, a charge of 1 against a check on a key counting within its limit;
# rate-limiter-flexible's RateLimiterRedis (a fixed window, `benches/versus_rate_limiter_flexible/
# phases.js`; needs node and npm, installed into a temporary directory); a bare `INCR` + `PEXPIRE`
# per decision (the floor for any counter); a function call doing nothing and one reading and
# writing a counter (the floor for any limiter written in Lua, one call per decision);
# redis-cell's `CL.THROTTLE` (the floor for GCRA, a native module) when CELL_MODULE names its
# built library (`libredis_cell.so`); and Kuadrant's limitador with its `redis` storage when
# LIMITADOR_BIN names a `limitador-server`: the script starts it against the same redis-server
# with one limit of 3 per 3600 s per value of the descriptor key `user` (a fixed window; a
# namespace per case), and `benches/rls_load.rs` of tollgate-cli sends one `ShouldRateLimit`
# call per value (`user-0` ...) over one HTTP/2 connection, up to 64 in flight (the largest
# number of streams that divides KEYS_PER_CASE, 50 for 2000; 1 with MODE=single); the row fails
# unless every answer is the case's (OK, OK, OVER_LIMIT). ROWS=peers leaves out the tollgate
# rows (ROWS=all, the default, runs them). Stops limitador and redis-server (by PID) however it
# exits.
#
# The peers build from their repositories: redis-cell with `cargo build --release` (the module
# is target/release/libredis_cell.so), limitador with `cargo build --release -p
# limitador-server` (needs the Debian packages libclang-dev and protobuf-compiler).
set -euo pipefail
cd "$(dirname "$0")/.."

KEYS_PER_CASE="${KEYS_PER_CASE:-2000}"
MODE="${MODE:-batched}"
ROWS="${ROWS:-all}"
case "$ROWS" in
    all | peers) ;;
    *) echo "redis-instructions: ROWS must be all or peers, not $ROWS" >&2; exit 2 ;;
esac
if [ -n "${LIMITADOR_BIN:-}" ] && [ ! -x "$LIMITADOR_BIN" ]; then
    echo "redis-instructions: LIMITADOR_BIN=$LIMITADOR_BIN is not an executable" >&2
    exit 2
fi
RLF_VERSION="${RLF_VERSION:-11}"
IOREDIS_VERSION="${IOREDIS_VERSION:-5}"
for tool in valgrind callgrind_control redis-server redis-cli cargo python3; do
    command -v "$tool" >/dev/null || { echo "redis-instructions: $tool not found" >&2; exit 1; }
done

work="$(mktemp -d)"
redis_pid=""
limitador_pid=""
cleanup() {
    local pid
    for pid in "$limitador_pid" "$redis_pid"; do
        [ -n "$pid" ] || continue
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. scripts/lib.sh

if [ "$ROWS" = all ]; then
    echo "building the tollgate side (release)" >&2
    driver=$(bench_executable tollgate-redis decision_instructions)
fi
if [ -n "${LIMITADOR_BIN:-}" ]; then
    echo "building the ShouldRateLimit generator (release)" >&2
    rls_load=$(bench_executable tollgate-cli rls_load)
fi

peer=""
if command -v node >/dev/null && command -v npm >/dev/null; then
    echo "installing rate-limiter-flexible@$RLF_VERSION and ioredis@$IOREDIS_VERSION into $work" >&2
    cp crates/tollgate-redis/benches/versus_rate_limiter_flexible/phases.js "$work/"
    if (cd "$work" && npm init -y >/dev/null 2>&1 && npm install --no-audit --no-fund --silent \
        "rate-limiter-flexible@$RLF_VERSION" "ioredis@$IOREDIS_VERSION" >/dev/null); then
        peer="$work/phases.js"
    fi
fi

port=$(free_port)
module_args=()
if [ -n "${CELL_MODULE:-}" ]; then
    module_args=(--loadmodule "$CELL_MODULE")
fi
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" \
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work" "${module_args[@]}" >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 600); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    kill -0 "$redis_pid" 2>/dev/null || { cat "$work/redis.log" >&2; exit 1; }
    sleep 0.1
done
redis-cli -p "$port" ping >/dev/null

# Instructions of redis-server while `$@` runs, divided by $KEYS_PER_CASE.
measured() {
    callgrind_control -z "$redis_pid" >/dev/null 2>&1
    "$@" >/dev/null
    callgrind_control -d "$redis_pid" >/dev/null 2>&1
    local dump total
    # shellcheck disable=SC2012 # callgrind's dump names are plain: callgrind.out.N
    dump=$(ls -t "$work"/callgrind.out* | head -1)
    total=$(awk '/^(totals|summary):/ { print $2; exit }' "$dump")
    rm -f "$dump"
    echo $((total / KEYS_PER_CASE))
}

# Inline commands for redis-cli --pipe into file $1: $2 rounds over the keys, each key getting
# every format that follows (each with one %d for the key).
commands() {
    local file=$1 rounds=$2
    shift 2
    : >"$file"
    for _ in $(seq 1 "$rounds"); do
        for key in $(seq 0 $((KEYS_PER_CASE - 1))); do
            for format in "$@"; do
                # shellcheck disable=SC2059
                printf "$format\r\n" "$key"
            done
        done
    done >>"$file"
}
pipe() { redis-cli -p "$port" --pipe <"$1" >/dev/null; }

# A row of commands sent with redis-cli --pipe: label, then the formats of one decision.
pipe_row() {
    local label=$1 case
    shift
    local row=()
    for case in new counting denied; do
        local formats=()
        local format
        for format in "$@"; do formats+=("${format//@/$case}"); done
        commands "$work/prepare" "$(before_of "$case")" "${formats[0]}"
        pipe "$work/prepare"
        commands "$work/measure" 1 "${formats[@]}"
        row+=("$(measured pipe "$work/measure")")
    done
    printf '%-40s %12s %12s %12s\n' "$label" "${row[@]}"
}

before_of() { case $1 in new) echo 0 ;; counting) echo 1 ;; denied) echo 3 ;; esac; }

printf '%-40s %12s %12s %12s\n' "instructions per decision ($MODE)" new counting denied
if [ "$ROWS" = all ]; then
    for algorithm in fixed_window sliding_window sliding_log token_bucket leaky_bucket gcra calendar_quota; do
        row=()
        for case in new counting denied; do
            "$driver" "$port" "$algorithm" "$case" prepare "$KEYS_PER_CASE" "$MODE" >/dev/null
            row+=("$(measured "$driver" "$port" "$algorithm" "$case" measure "$KEYS_PER_CASE" "$MODE")")
        done
        printf '%-40s %12s %12s %12s\n' "tollgate $algorithm" "${row[@]}"
    done
    printf '\n%-40s %12s %12s %12s\n' "charge of 1 on a counting key ($MODE)" check charge "charge/check"
    for algorithm in fixed_window sliding_window sliding_log token_bucket leaky_bucket gcra calendar_quota; do
        row=()
        for op in check charge; do
            "$driver" "$port" "$algorithm" counting prepare "$KEYS_PER_CASE" "$MODE" "$op" >/dev/null
            row+=("$(measured "$driver" "$port" "$algorithm" counting measure "$KEYS_PER_CASE" "$MODE" "$op")")
        done
        printf '%-40s %12s %12s %12s\n' "tollgate $algorithm" "${row[@]}" \
            "$(awk -v c="${row[0]}" -v g="${row[1]}" 'BEGIN { printf "%.3f", g / c }')"
    done
    echo
fi
if [ -n "$peer" ]; then
    row=()
    for case in new counting denied; do
        node "$peer" "$port" "$case" prepare "$KEYS_PER_CASE" >/dev/null
        row+=("$(measured node "$peer" "$port" "$case" measure "$KEYS_PER_CASE")")
    done
    printf '%-40s %12s %12s %12s\n' "rate-limiter-flexible fixed window" "${row[@]}"
else
    echo "rate-limiter-flexible: skipped (node and npm with the registry are needed)" >&2
fi
pipe_row "INCR (floor, no expiry)" "INCR floor-@-%d"
pipe_row "INCR + PEXPIRE (floor for a counter)" "INCR both-@-%d" "PEXPIRE both-@-%d 3600000"
# The floor for any limiter written in Lua, one call per decision: calling a function that does
# nothing, and one that reads a counter and writes it back with its expiry (GET, SET PX).
redis-cli -p "$port" FUNCTION LOAD REPLACE "#!lua name=instructions_floor
redis.register_function('floor_nothing', function(keys, args) return 1 end)
redis.register_function('floor_read_write', function(keys, args)
  local count = tonumber(redis.call('GET', keys[1]) or '0') + 1
  redis.call('SET', keys[1], count, 'PX', 3600000)
  return count
end)" >/dev/null
pipe_row "FCALL of a Lua function doing nothing" "FCALL floor_nothing 1 nothing-@-%d"
pipe_row "FCALL of Lua GET + SET PX (Lua floor)" "FCALL floor_read_write 1 read-write-@-%d"
if [ -n "${CELL_MODULE:-}" ]; then
    pipe_row "redis-cell CL.THROTTLE (GCRA, native)" "CL.THROTTLE cell-@-%d 2 3 3600 1"
fi
if [ -n "${LIMITADOR_BIN:-}" ]; then
    # A namespace (the Envoy domain) per case, so each case has keys of its own.
    for case in new counting denied; do limitador_limit "$case" 3 3600 user; done >"$work/limitador.yaml"
    rls_port=$(free_port)
    http_port=$(free_port)
    "$LIMITADOR_BIN" --rls-ip 127.0.0.1 --rls-port "$rls_port" --http-ip 127.0.0.1 \
        --http-port "$http_port" "$work/limitador.yaml" redis "redis://127.0.0.1:$port" \
        >"$work/limitador.log" 2>&1 &
    limitador_pid=$!
    wait_port "$rls_port" "$work/limitador.log"
    streams=1
    if [ "$MODE" = batched ]; then
        streams=64
        while [ $((KEYS_PER_CASE % streams)) != 0 ]; do streams=$((streams - 1)); done
    fi
    # One round of calls in domain $1, one per value; fails unless $2 of them were answered OK.
    limitador_round() {
        local line
        line=$("$rls_load" "127.0.0.1:$rls_port" "$KEYS_PER_CASE" 1 "$streams" "$KEYS_PER_CASE" "$1")
        [[ "$line" == "requests=$KEYS_PER_CASE ok=$2 "* ]] || {
            echo "redis-instructions: limitador, $1: expected ok=$2 of $KEYS_PER_CASE, got: $line" >&2
            exit 1
        }
    }
    row=()
    for case in new counting denied; do
        for _ in $(seq 1 "$(before_of "$case")"); do limitador_round "$case" "$KEYS_PER_CASE"; done
        admitted=$KEYS_PER_CASE
        if [ "$case" = denied ]; then admitted=0; fi
        row+=("$(measured limitador_round "$case" "$admitted")")
    done
    printf '%-40s %12s %12s %12s\n' "limitador, redis storage (fixed window)" "${row[@]}"
fi
