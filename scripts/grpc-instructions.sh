#!/usr/bin/env bash
# Instructions per Envoy `ShouldRateLimit` call: `tollgate serve` (memory store, one fixed
# window per user) against `benches/bare_rls.rs`, a tonic server that decodes the call and
# answers OK deciding nothing (the ceiling of the gRPC stack), each run under callgrind
# (Debian package valgrind) on the same runtime and driven by `benches/rls_load.rs` (2 HTTP/2
# connections x 32 streams over KEYS users). Unlike CPU time, the count does not move with the
# machine's load; it leaves out what the count cannot see (cache misses, waiting).
#
#   ./scripts/grpc-instructions.sh
#   REQUESTS=50000 KEYS=100000 ./scripts/grpc-instructions.sh
#
# Each server answers an unmeasured warm-up of REQUESTS calls (every key written), then the
# counters are zeroed and REQUESTS calls are counted. Everything listens on 127.0.0.1; every
# process started here is stopped by its PID however the script exits.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS="${REQUESTS:-20000}"
KEYS="${KEYS:-100000}"
for tool in valgrind callgrind_control taskset python3 cargo; do
    command -v "$tool" >/dev/null || { echo "grpc-instructions: $tool not found" >&2; exit 1; }
done

. scripts/lib.sh
scratch

envoy_bench_binaries

write_bench_domain "$work/config"

# Instructions per call of the server that `$@ ADDR` starts, under callgrind on core 0.
count() {
    local label=$1 port pid dump total
    shift
    port="$(free_port)"
    taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$work/$label.out" \
        "$@" "127.0.0.1:$port" >"$work/$label.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$port" "$work/$label.log"
    taskset -c 1 "$rls_load" "127.0.0.1:$port" "$REQUESTS" 2 32 "$KEYS" >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1
    taskset -c 1 "$rls_load" "127.0.0.1:$port" "$REQUESTS" 2 32 "$KEYS" >/dev/null
    callgrind_control -d "$pid" >/dev/null 2>&1
    # shellcheck disable=SC2012 # callgrind's dump names are plain: LABEL.out.N
    dump=$(ls -t "$work/$label".out.* | head -1)
    total=$(awk '/^(totals|summary):/ { print $2; exit }' "$dump")
    stop "$pid"
    echo $((total / REQUESTS))
}

bare=$(count bare "$bare_rls")
tollgate=$(count tollgate "$tollgate_bin" serve --config "$work/config" --http 127.0.0.1:0 --grpc)
echo "instructions per ShouldRateLimit call, $REQUESTS calls over $KEYS users (tollgate $(git rev-parse --short HEAD))"
echo "bare tonic server:  $bare"
echo "tollgate (memory):  $tollgate"
awk -v b="$bare" -v t="$tollgate" 'BEGIN { printf "tollgate / bare, calls per instruction: %.3f\n", b / t }'
