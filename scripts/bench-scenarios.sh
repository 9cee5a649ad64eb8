#!/usr/bin/env bash
# Runs every `tollgate bench` scenario and writes docs/scenarios.md with the charts in
# docs/scenarios/, and `tollgate bench compare` on memory, Redis and a Redis Cluster into
# docs/compare.md with the charts in docs/compare/. Starts its own redis-server and 3-master
# Redis Cluster on free loopback ports, in temporary directories, and stops them (by PID, reaped)
# when it exits, however it exits.
#
#   ./scripts/bench-scenarios.sh            # defaults: --duration 2s --concurrency 1,16,64
#   DURATION=500ms ./scripts/bench-scenarios.sh
#   ONLY=compare ./scripts/bench-scenarios.sh   # only docs/compare.md (ONLY=scenarios: the rest)
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION="${DURATION:-2s}"
CONCURRENCY="${CONCURRENCY:-1,16,64}"
ONLY="${ONLY:-all}"
case "$ONLY" in all | scenarios | compare) ;; *) echo "bench-scenarios: ONLY must be all, scenarios or compare" >&2; exit 1 ;; esac
for tool in redis-server redis-cli cargo; do
    command -v "$tool" >/dev/null || { echo "bench-scenarios: $tool not found (Debian: apt-get install -y redis-server)" >&2; exit 1; }
done

work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

taken=" "
# A loopback port nothing listens on (and that this script has not handed out yet).
free_port() {
    local port
    for _ in $(seq 1 200); do
        port=$((20000 + RANDOM % 30000))
        case "$taken" in *" $port "*) continue ;; esac
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            taken="$taken$port "
            echo "$port"
            return 0
        fi
    done
    echo "bench-scenarios: no free port found" >&2
    return 1
}

# start_redis DIR PORT [ARGS...]: a non-daemonized redis-server child on 127.0.0.1:PORT.
start_redis() {
    local dir="$1" port="$2"
    shift 2
    mkdir -p "$dir"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
        --daemonize no --logfile "$dir/redis.log" "$@" &
    pids+=("$!")
    for _ in $(seq 1 100); do
        if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = "PONG" ]; then
            return 0
        fi
        sleep 0.1
    done
    echo "bench-scenarios: redis-server on port $port did not start; log:" >&2
    cat "$dir/redis.log" >&2 || true
    return 1
}

redis_port="$(free_port)"
start_redis "$work/redis" "$redis_port"

cluster_ports=()
for node in 1 2 3; do
    port="$(free_port)"
    bus="$(free_port)"
    start_redis "$work/node$node" "$port" --cluster-enabled yes --cluster-port "$bus" \
        --cluster-config-file "$work/node$node/nodes.conf" --cluster-node-timeout 2000
    cluster_ports+=("$port")
done
redis-cli --cluster create "${cluster_ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >"$work/cluster-create.log"
for port in "${cluster_ports[@]}"; do
    for attempt in $(seq 1 100); do
        redis-cli -p "$port" cluster info | grep -q 'cluster_state:ok' && break
        [ "$attempt" -eq 100 ] && { echo "bench-scenarios: cluster not ok on port $port" >&2; exit 1; }
        sleep 0.1
    done
done
cluster_url="redis+cluster://$(printf '127.0.0.1:%s,' "${cluster_ports[@]}" | sed 's/,$//')"

cargo build --release --locked -p tollgate-cli --bin tollgate
tollgate="${CARGO_TARGET_DIR:-target}/release/tollgate"

about="($(date -u +%Y-%m-%d), $(nproc) cores, $(redis-server --version | cut -d' ' -f1-3), Redis and
a 3-master Redis Cluster on loopback)"

if [ "$ONLY" != compare ]; then
mkdir -p docs/scenarios
out="$work/scenarios.md"
{
    echo "# Scenarios"
    echo
    echo "What each algorithm does with a polite bot and with a burst across a window boundary, and"
    echo "how many decisions per second each store makes. Written by \`scripts/bench-scenarios.sh\`"
    echo "$about; every number below is measured by that run. The side-by-side table of"
    echo "every algorithm's speed, accuracy and cost is in [compare.md](compare.md)."
    echo
    "$tollgate" bench bot --chart docs/scenarios/bot.png --chart-height 900
    echo "![bot: admitted and denied requests over time, and admitted so far against the rate, per algorithm](scenarios/bot.png)"
    echo
    echo "Why the buckets and GCRA admit more than \"20 per minute\" at first, and how every algorithm"
    echo "settles at the rate: [algorithms.md](algorithms.md#the-bot-burst-versus-rate)."
    echo
    "$tollgate" bench boundary --chart docs/scenarios/boundary.png
    echo "![boundary: admitted per burst and in any 60 s, per algorithm](scenarios/boundary.png)"
    echo
    "$tollgate" bench throughput --redis "redis://127.0.0.1:$redis_port" --redis-cluster "$cluster_url" \
        --duration "$DURATION" --concurrency "$CONCURRENCY" --chart docs/scenarios/throughput.png
    echo "![throughput: decisions per second per algorithm, by store and concurrency](scenarios/throughput.png)"
} >"$out"
mv "$out" docs/scenarios.md
echo "bench-scenarios: wrote docs/scenarios.md and docs/scenarios/{bot,boundary,throughput}.png"
fi

if [ "$ONLY" != scenarios ]; then
mkdir -p docs/compare
out="$work/compare.md"
{
    echo "# Comparing the algorithms"
    echo
    echo "Every algorithm on one store, side by side: speed, accuracy against the exact limit, what"
    echo "a decision costs the store, and memory per key. Written by \`scripts/bench-scenarios.sh\`"
    echo "$about with \`tollgate bench compare\`; every number below is measured by that run."
    echo "Run it on your own store with \`tollgate bench compare --store redis://127.0.0.1:6379\`"
    echo "(loopback addresses only)."
    echo
    tail -n +3 scripts/compare-guide.md   # without its two comment lines
    echo
    "$tollgate" bench compare --store memory --duration "$DURATION" --chart docs/compare/memory.png
    echo "![compare on the memory store: speed, latency, accuracy, CPU and memory per algorithm](compare/memory.png)"
    echo
    "$tollgate" bench compare --store "redis://127.0.0.1:$redis_port" --duration "$DURATION" \
        --chart docs/compare/redis.png
    echo "![compare on Redis: speed, latency, accuracy, Redis CPU and memory per algorithm](compare/redis.png)"
    echo
    "$tollgate" bench compare --store "$cluster_url" --duration "$DURATION" --chart docs/compare/cluster.png
    echo "![compare on a Redis Cluster: speed, latency, accuracy, Redis CPU and memory per algorithm](compare/cluster.png)"
} >"$out"
mv "$out" docs/compare.md
echo "bench-scenarios: wrote docs/compare.md and docs/compare/{memory,redis,cluster}.png"
fi
