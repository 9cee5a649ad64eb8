#!/usr/bin/env bash
# `ShouldRateLimit` against `POST /v1/check` on one `tollgate serve`, both driven by the same
# outside load generator, h2load (Debian's nghttp2-client, written in C): HTTP/1.1 keep-alive
# connections for the check, HTTP/2 connections with concurrent streams for gRPC, as Envoy sends
# them. Alternating rounds, the order flipped every round; prints each round's requests/s and
# the ratio ShouldRateLimit / POST /v1/check, then the median ratio.
#
#   ./scripts/h2load-check-vs-grpc.sh
#   ROUNDS=9 REQUESTS=200000 STORE=redis ./scripts/h2load-check-vs-grpc.sh
#
# h2load sends one body over and over, so every request decides the same key (the hot-key path
# of the store), with a limit high enough that every answer is an admission. Both doors decide
# with the same engine and store; what differs is the protocol, the parsing and the answer.
# STORE=redis starts a redis-server on a free loopback port (stopped by PID, reaped, however this
# exits). Builds the release binary first.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-7}"
REQUESTS="${REQUESTS:-100000}"
STORE="${STORE:-memory}"
# 64 requests in flight on both sides: 64 HTTP/1.1 connections, or 2 HTTP/2 connections x 32
# streams (a 2-worker Envoy keeps about one connection per worker).
HTTP_CONNECTIONS="${HTTP_CONNECTIONS:-64}"
GRPC_CONNECTIONS="${GRPC_CONNECTIONS:-2}"
GRPC_STREAMS="${GRPC_STREAMS:-32}"
THREADS="${THREADS:-1}"
for tool in h2load python3 curl cargo; do
    command -v "$tool" >/dev/null || {
        echo "h2load-check-vs-grpc: $tool not found (h2load: apt-get install nghttp2-client)" >&2
        exit 1
    }
done

work="$(mktemp -d)"
server_pid=""
redis_pid=""
cleanup() {
    for pid in $server_pid $redis_pid; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cargo build --release -q -p tollgate-cli

# One config directory in both dialects: a policy for the check, a domain for Envoy, both
# admitting far more than this machine can send.
mkdir -p "$work/config"
cat >"$work/config/policies.yaml" <<'YAML'
policies:
  api:
    algorithm: gcra
    rate: 1000000/s
    burst: 1000
YAML
cat >"$work/config/envoy.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
YAML

# The bodies: JSON for the check; for gRPC one length-prefixed RateLimitRequest
# {domain: "bench", descriptors: [{entries: [{key: "user", value: "bench-user"}]}]}, encoded
# here from the protobuf wire format (field 1 domain, field 2 descriptors, whose field 1 is the
# entries, each with key = 1 and value = 2).
printf '{"policy": "api", "key": "bench-user"}' >"$work/check.json"
python3 - "$work/request.grpc" <<'PY'
import sys

def field(number, payload):
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload

entry = field(1, b"user") + field(2, b"bench-user")
message = field(1, b"bench") + field(2, field(1, entry))
with open(sys.argv[1], "wb") as out:
    out.write(b"\x00" + len(message).to_bytes(4, "big") + message)
PY

store_args=()
if [ "$STORE" = redis ]; then
    command -v redis-server >/dev/null || { echo "h2load-check-vs-grpc: redis-server not found" >&2; exit 1; }
    redis_port="$(free_port)"
    redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no --dir "$work" >"$work/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 1 50); do
        redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    store_args=(--store "redis://127.0.0.1:$redis_port")
elif [ "$STORE" != memory ]; then
    echo "h2load-check-vs-grpc: STORE is memory or redis, not $STORE" >&2
    exit 1
fi

http_port="$(free_port)"
grpc_port="$(free_port)"
target/release/tollgate serve --config "$work/config" --http "127.0.0.1:$http_port" \
    --grpc "127.0.0.1:$grpc_port" "${store_args[@]}" >"$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null 2>&1 && break
    sleep 0.1
done

# Both doors must admit before anything is measured: a 200 from the check, and grpc-status 0
# with overall_code OK (1, the answer's first field: bytes 08 01) from ShouldRateLimit.
grpc_url="http://127.0.0.1:$grpc_port/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
check_url="http://127.0.0.1:$http_port/v1/check"
status="$(curl -s -o /dev/null -w '%{http_code}' -H 'content-type: application/json' \
    --data-binary @"$work/check.json" "$check_url" || true)"
[ "$status" = 200 ] || {
    echo "h2load-check-vs-grpc: the check answered $status; the server said:" >&2
    cat "$work/serve.log" >&2
    exit 1
}
curl -s --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
    --data-binary @"$work/request.grpc" -D "$work/grpc.headers" -o "$work/grpc.answer" "$grpc_url"
grep -qi '^grpc-status: 0' "$work/grpc.headers" ||
    { echo "h2load-check-vs-grpc: no grpc-status 0:" >&2; cat "$work/grpc.headers" >&2; exit 1; }
[ "$(od -An -tx1 -j5 -N2 "$work/grpc.answer" | tr -d ' ')" = 0801 ] ||
    { echo "h2load-check-vs-grpc: ShouldRateLimit did not answer OK" >&2; exit 1; }

# Prints requests/s of one h2load run; fails unless every request got a 2xx.
run() {
    local out
    out="$(h2load "$@" 2>&1)"
    local ok
    ok="$(sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p' <<<"$out")"
    [ "$ok" = "$REQUESTS" ] || { echo "h2load-check-vs-grpc: not every request succeeded:" >&2; echo "$out" >&2; exit 1; }
    sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' <<<"$out"
}
http_round() {
    run --h1 -n "$REQUESTS" -c "$HTTP_CONNECTIONS" -m 1 -t "$THREADS" \
        -H 'content-type: application/json' -d "$work/check.json" "$check_url"
}
grpc_round() {
    run -n "$REQUESTS" -c "$GRPC_CONNECTIONS" -m "$GRPC_STREAMS" -t "$THREADS" \
        -H 'content-type: application/grpc' -H 'te: trailers' -d "$work/request.grpc" "$grpc_url"
}

# An unmeasured warm-up of each, then the rounds.
REQUESTS_SAVED="$REQUESTS"
REQUESTS=$((REQUESTS / 10))
http_round >/dev/null
grpc_round >/dev/null
REQUESTS="$REQUESTS_SAVED"

echo "store $STORE, $REQUESTS requests a run; check: $HTTP_CONNECTIONS HTTP/1.1 connections;" \
    "ShouldRateLimit: $GRPC_CONNECTIONS HTTP/2 connections x $GRPC_STREAMS streams"
ratios=()
for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then
        check="$(http_round)"
        grpc="$(grpc_round)"
    else
        grpc="$(grpc_round)"
        check="$(http_round)"
    fi
    ratio="$(python3 -c "print(f'{$grpc / $check:.3f}')")"
    ratios+=("$ratio")
    echo "round $round: POST /v1/check $check req/s, ShouldRateLimit $grpc req/s, ratio $ratio"
done
python3 -c "import statistics, sys; print('median ratio ShouldRateLimit / POST /v1/check:', f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "${ratios[@]}"
