#!/usr/bin/env bash
# tollgate's Redis fixed window against rate-limiter-flexible (npm, RateLimiterRedis on ioredis),
# both on one redis-server this script starts on a free loopback port, both with the same number
# of decisions in flight on the same 100 000 keys, in alternating rounds (the order flipped every
# round); prints each round's ratio tollgate / rate-limiter-flexible and their median.
#
#   ./scripts/versus-rate-limiter-flexible.sh
#   ROUNDS=7 DECISIONS=400000 IN_FLIGHT=200 ./scripts/versus-rate-limiter-flexible.sh
#
# Installs rate-limiter-flexible and ioredis with npm into a temporary directory (needs node,
# npm and the registry), builds the tollgate side (`benches/fixed_window_load.rs`) in release
# mode, and stops the Redis server (by PID, reaped) however it exits.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-5}"
DECISIONS="${DECISIONS:-200000}"
IN_FLIGHT="${IN_FLIGHT:-200}"
KEYS="${KEYS:-100000}"
RLF_VERSION="${RLF_VERSION:-11}"
IOREDIS_VERSION="${IOREDIS_VERSION:-5}"
for tool in redis-server redis-cli node npm cargo; do
    command -v "$tool" >/dev/null || { echo "versus-rate-limiter-flexible: $tool not found" >&2; exit 1; }
done

work="$(mktemp -d)"
redis_pid=""
cleanup() {
    if [ -n "$redis_pid" ]; then
        kill -TERM "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. scripts/lib.sh

echo "installing rate-limiter-flexible@$RLF_VERSION and ioredis@$IOREDIS_VERSION into $work" >&2
cp crates/tollgate-redis/benches/versus_rate_limiter_flexible/peer.js "$work/"
(cd "$work" && npm init -y >/dev/null 2>&1 && npm install --no-audit --no-fund --silent \
    "rate-limiter-flexible@$RLF_VERSION" "ioredis@$IOREDIS_VERSION" >/dev/null)
rlf_installed="$(node -p "require('$work/node_modules/rate-limiter-flexible/package.json').version")"
ioredis_installed="$(node -p "require('$work/node_modules/ioredis/package.json').version")"

echo "building the tollgate side (release)" >&2
cargo bench -p tollgate-redis --bench fixed_window_load --no-run 2>/dev/null

port="$(free_port)"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 100); do
    redis-cli -p "$port" PING >/dev/null 2>&1 && break
    sleep 0.05
done
redis-cli -p "$port" PING >/dev/null

rate_of() { sed -n 's/.*decisions_per_second=\([0-9]*\).*/\1/p'; }
tollgate_round() {
    cargo bench -q -p tollgate-redis --bench fixed_window_load -- "$port" "$DECISIONS" "$IN_FLIGHT" "$KEYS" 2>/dev/null | rate_of
}
peer_round() {
    node "$work/peer.js" "$port" "$DECISIONS" "$IN_FLIGHT" "$KEYS" | rate_of
}

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p') on port $port;" \
    "rate-limiter-flexible $rlf_installed, ioredis $ioredis_installed, node $(node --version);" \
    "$DECISIONS decisions, $IN_FLIGHT in flight, $KEYS keys, fixed window 50 per 1 s"
echo
echo "| round | tollgate decisions/s | rate-limiter-flexible decisions/s | tollgate / rate-limiter-flexible |"
echo "|---|---|---|---|"
ratios=()
for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then
        ours="$(tollgate_round)"; theirs="$(peer_round)"
    else
        theirs="$(peer_round)"; ours="$(tollgate_round)"
    fi
    ratio="$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')"
    ratios+=("$ratio")
    echo "| $round | $ours | $theirs | $ratio |"
done
median="$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
echo
echo "median tollgate / rate-limiter-flexible: **$median** (target >= 1.5)"
