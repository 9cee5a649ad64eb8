#!/usr/bin/env bash
# tollgate's Envoy rate limit service against Kuadrant's limitador (a Rust Envoy rate limit
# server) and against a bare tonic server that decodes `ShouldRateLimit` and answers OK deciding
# nothing (the ceiling of the gRPC stack), all driven by one load generator.
#
#   ./scripts/versus-limitador.sh /path/to/limitador-server
#   ROUNDS=5 REQUESTS=200000 ./scripts/versus-limitador.sh /path/to/limitador-server
#
# Four cells: the memory store and one Redis, each with one key and with 100 000 keys. Every
# server and the Redis server run pinned to one core (SERVER_CORE, default 0) and the generator
# to the other (LOAD_CORE, default 1): `benches/rls_load.rs` of tollgate-cli, 2 HTTP/2
# connections x 32 concurrent streams as a 2-worker Envoy sends them, each call one descriptor
# `user: user-N` in domain `bench`. (h2load repeats one body, so it cannot spread calls over
# keys.) Both limiters get the same limit, a fixed window of 1 000 000 000 per minute per
# `user` value, so every call is decided and written and every answer is OK; before measuring,
# a second domain with 1 per minute must answer OK then OVER_LIMIT on both, which shows each
# reads the descriptor the same way. A fourth server, `worker`, is tollgate again with
# TOKIO_WORKER_THREADS=1: tokio's multi-threaded runtime, one worker thread beside the main one,
# against the one thread tollgate picks on one core. Rounds turn the order of the four servers;
# a round reads each server's (and Redis's) utime + stime from /proc before and after its load.
#
# Prints per cell and server the medians over rounds of requests/s, p99 latency and requests
# per server CPU-second (and per CPU-second of server + Redis), then the medians of the
# per-round ratios tollgate / limitador, tollgate / bare tonic and tollgate / worker. Builds tollgate's release
# binary and the two bench binaries first; everything listens on 127.0.0.1 and every process
# started here is stopped by its PID however the script exits.
set -euo pipefail
cd "$(dirname "$0")/.."

LIMITADOR_BIN="${1:-}"
if [ -z "$LIMITADOR_BIN" ] || [ ! -x "$LIMITADOR_BIN" ]; then
    echo "usage: versus-limitador.sh LIMITADOR_BIN (an executable limitador-server)" >&2
    exit 2
fi
ROUNDS="${ROUNDS:-3}"
REQUESTS="${REQUESTS:-100000}"
CONNECTIONS="${CONNECTIONS:-2}"
STREAMS="${STREAMS:-32}"
MANY_KEYS="${MANY_KEYS:-100000}"
# Calls of the unmeasured warm-up in each cell; by default enough to write every key.
WARM="${WARM:-}"
SERVER_CORE="${SERVER_CORE:-0}"
LOAD_CORE="${LOAD_CORE:-1}"
for tool in taskset redis-server redis-cli python3 cargo curl; do
    command -v "$tool" >/dev/null || { echo "versus-limitador: $tool not found" >&2; exit 1; }
done

. scripts/lib.sh
scratch

# utime + stime of a process, in clock ticks (fields 14 and 15; the name in field 2 may hold
# spaces, so count from its closing parenthesis).
ticks() {
    sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}

envoy_bench_binaries

# The same limits in both dialects: `bench`, 1 000 000 000 per minute per user (every call
# admitted and counted), and `strict`, 1 per minute per user (the equivalence check).
write_bench_domain "$work/tollgate"
cat >"$work/tollgate/strict.yaml" <<'YAML'
domain: strict
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
YAML
{
    limitador_limit bench 1000000000 60 user
    limitador_limit strict 1 60 user
} >"$work/limitador.yaml"

redis_pid=""
redis_url=""
tollgate_http=""
start_redis() {
    local port
    port="$(free_port)"
    taskset -c "$SERVER_CORE" redis-server --port "$port" --bind 127.0.0.1 --save '' \
        --appendonly no --daemonize no --dir "$work" >"$work/redis.log" 2>&1 &
    redis_pid=$!
    pids+=("$redis_pid")
    wait_port "$port" "$work/redis.log"
    redis_url="redis://127.0.0.1:$port"
}

# Starts one server ($1: tollgate, limitador or bare) for store $2; sets server_pid and
# server_addr.
server_pid=""
server_addr=""
start_server() {
    local name="$1" store="$2" port http_port log="$work/$1-$2.log"
    port="$(free_port)"
    server_addr="127.0.0.1:$port"
    case "$name" in
        tollgate | worker)
            local store_args=() threads=()
            [ "$store" = redis ] && store_args=(--store "$redis_url")
            # `worker`: the same binary on tokio's multi-threaded runtime with one worker thread
            # beside the main one (what it ran on before it picked one thread on one core).
            [ "$name" = worker ] && threads=(TOKIO_WORKER_THREADS=1)
            http_port="$(free_port)"
            [ "$name" = tollgate ] && tollgate_http="127.0.0.1:$http_port"
            env "${threads[@]}" taskset -c "$SERVER_CORE" "$tollgate_bin" serve --config "$work/tollgate" \
                --grpc "$server_addr" --http "127.0.0.1:$http_port" "${store_args[@]}" >"$log" 2>&1 &
            ;;
        limitador)
            local store_args=(memory --cache 1000000)
            [ "$store" = redis ] && store_args=(redis "$redis_url")
            http_port="$(free_port)"
            taskset -c "$SERVER_CORE" "$LIMITADOR_BIN" --rls-ip 127.0.0.1 --rls-port "$port" \
                --http-ip 127.0.0.1 --http-port "$http_port" "$work/limitador.yaml" \
                "${store_args[@]}" >"$log" 2>&1 &
            ;;
        bare)
            taskset -c "$SERVER_CORE" "$bare_rls" "$server_addr" >"$log" 2>&1 &
            ;;
    esac
    server_pid=$!
    pids+=("$server_pid")
    wait_port "$port" "$log"
}

# One load: $1 requests, $2 keys, $3 domain against server_addr; prints the generator's line.
load() {
    taskset -c "$LOAD_CORE" "$rls_load" "$server_addr" "$1" "$CONNECTIONS" "$STREAMS" "$2" "$3"
}
field() { sed -n "s/.*\\b$1=\\([0-9.]*\\).*/\\1/p" <<<"$2"; }

results="$work/results"
: >"$results"
clk_tck="$(getconf CLK_TCK)"
servers=(tollgate worker limitador bare)
for store in memory redis; do
    [ "$store" = redis ] && start_redis
    declare -A spid saddr
    for name in "${servers[@]}"; do
        start_server "$name" "$store"
        spid[$name]="$server_pid"
        saddr[$name]="$server_addr"
        # Both limiters: the first call of a user in `strict` is OK, the second OVER_LIMIT.
        # (`worker` is tollgate again, and on Redis would find the user already counted.)
        if [ "$name" = tollgate ] || [ "$name" = limitador ]; then
            line="$(taskset -c "$LOAD_CORE" "$rls_load" "$server_addr" 2 1 1 1 strict)"
            [ "$(field ok "$line")" = 1 ] || {
                echo "versus-limitador: $name did not limit the strict domain: $line" >&2
                exit 1
            }
        fi
    done
    for keys in 1 "$MANY_KEYS"; do
        cell="$store, $keys key$([ "$keys" = 1 ] || echo s)"
        # An unmeasured warm-up: connections settled and, with many keys, every key written.
        warm="${WARM:-$((keys > REQUESTS / 5 ? keys : REQUESTS / 5))}"
        for name in "${servers[@]}"; do
            server_addr="${saddr[$name]}"
            load "$warm" "$keys" bench >/dev/null
        done
        for round in $(seq 1 "$ROUNDS"); do
            # The order turns every round: each server goes first, second and last in turn.
            turn=$(((round - 1) % ${#servers[@]}))
            order=("${servers[@]:$turn}" "${servers[@]:0:$turn}")
            for name in "${order[@]}"; do
                server_addr="${saddr[$name]}"
                pid="${spid[$name]}"
                before="$(ticks "$pid")"
                redis_before="$([ -n "$redis_pid" ] && ticks "$redis_pid" || echo 0)"
                line="$(load "$REQUESTS" "$keys" bench)"
                after="$(ticks "$pid")"
                redis_after="$([ -n "$redis_pid" ] && ticks "$redis_pid" || echo 0)"
                sent="$(field requests "$line")"
                [ "$(field ok "$line")" = "$sent" ] || {
                    echo "versus-limitador: $name did not admit every call: $line" >&2
                    exit 1
                }
                echo "$cell|$name|$round|$(field requests_per_second "$line")|$(field p99_us "$line")|$sent|$((after - before))|$((redis_after - redis_before))" >>"$results"
                echo "$cell, round $round, $name: $line server_ticks=$((after - before)) redis_ticks=$((redis_after - redis_before))" >&2
            done
        done
    done
    # A store call that failed or timed out would have been decided by the failure mode, not
    # measured: there must be none.
    metrics="$(curl -s "http://$tollgate_http/metrics")"
    grep -q '^tollgate_decisions_total' <<<"$metrics" ||
        { echo "versus-limitador: no decisions in tollgate's /metrics" >&2; exit 1; }
    degraded="$(awk '/^tollgate_(degraded_decisions|store_errors)_total/ { n += $NF } END { print n + 0 }' <<<"$metrics")"
    [ "$degraded" = 0 ] || { echo "versus-limitador: tollgate counted $degraded store failures" >&2; exit 1; }
    for name in "${servers[@]}"; do stop "${spid[$name]}"; done
    if [ -n "$redis_pid" ]; then stop "$redis_pid"; redis_pid=""; fi
    unset spid saddr
done

echo
echo "limitador $("$LIMITADOR_BIN" --version 2>/dev/null | head -1 || true); tollgate $(git rev-parse --short HEAD);" \
    "$ROUNDS rounds of $REQUESTS calls, $CONNECTIONS HTTP/2 connections x $STREAMS streams;" \
    "servers and Redis on core $SERVER_CORE, the generator on core $LOAD_CORE"
python3 - "$results" "$clk_tck" <<'PY'
import collections, statistics, sys

rows = collections.defaultdict(dict)  # (cell, round) -> server -> figures
cells = []
for line in open(sys.argv[1]):
    cell, server, rnd, rps, p99, sent, ticks, redis_ticks = line.strip().split("|")
    if cell not in cells:
        cells.append(cell)
    tck = float(sys.argv[2])
    server_s = max(int(ticks), 1) / tck
    total_s = max(int(ticks) + int(redis_ticks), 1) / tck
    rows[(cell, rnd)][server] = dict(
        rps=float(rps), p99=int(p99) / 1000, per_cpu=int(sent) / server_s,
        per_total=int(sent) / total_s,
    )

med = statistics.median
print()
print("| cell | server | requests/s | p99 ms | requests per server CPU-second | per server + Redis CPU-second |")
print("|---|---|---:|---:|---:|---:|")
for cell in cells:
    rounds = [v for (c, _), v in rows.items() if c == cell]
    for server in ("tollgate", "worker", "limitador", "bare"):
        runs = [r[server] for r in rounds]
        total = f"{med(r['per_total'] for r in runs):,.0f}" if cell.startswith("redis") and server != "bare" else "-"
        print(f"| {cell} | {server} | {med(r['rps'] for r in runs):,.0f} | {med(r['p99'] for r in runs):.2f} "
              f"| {med(r['per_cpu'] for r in runs):,.0f} | {total} |")
print()
print("| cell | tollgate / limitador, requests/s | per server CPU-second | per server + Redis CPU-second | tollgate / bare, requests/s | per server CPU-second | tollgate / worker, per server CPU-second |")
print("|---|---:|---:|---:|---:|---:|---:|")
for cell in cells:
    rounds = [v for (c, _), v in rows.items() if c == cell]
    def ratio(a, b, what):
        values = sorted(r[a][what] / r[b][what] for r in rounds)
        return f"**{med(values):.2f}** ({values[0]:.2f} to {values[-1]:.2f})"
    total = ratio("tollgate", "limitador", "per_total") if cell.startswith("redis") else "-"
    print(f"| {cell} | {ratio('tollgate', 'limitador', 'rps')} | {ratio('tollgate', 'limitador', 'per_cpu')} | {total} "
          f"| {ratio('tollgate', 'bare', 'rps')} | {ratio('tollgate', 'bare', 'per_cpu')} "
          f"| {ratio('tollgate', 'worker', 'per_cpu')} |")
PY
