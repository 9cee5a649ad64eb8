# shellcheck shell=bash
# Helpers the benchmark scripts share; sourced after they `cd` to the repo root.

# A loopback port nothing listens on (tried by connecting, at most 200 times).
free_port() {
    local port
    for _ in $(seq 1 200); do
        port=$((20000 + RANDOM % 30000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    echo "${0##*/}: no free port" >&2
    return 1
}

# Waits (at most 20 s) until something listens on loopback port $1; fails showing log $2
# otherwise.
wait_port() {
    local port="$1" log="$2"
    for _ in $(seq 1 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "${0##*/}: nothing listens on $port; the log says:" >&2
    cat "$log" >&2
    return 1
}

# Builds bench target $2 of package $1 (release, not run) and prints its executable's path, as
# cargo names it (so CARGO_TARGET_DIR is honoured).
bench_executable() {
    local path
    path=$(cargo bench -q -p "$1" --bench "$2" --no-run --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])
' "$2")
    [ -x "$path" ] || { echo "${0##*/}: bench $2 of $1 was not built" >&2; return 1; }
    echo "$path"
}

# One limit of limitador's limits file (a YAML list): namespace $1 (the Envoy domain), $2 per $3
# seconds for each value of descriptor key $4 in the request's first descriptor.
limitador_limit() {
    cat <<YAML
- namespace: $1
  max_value: $2
  seconds: $3
  conditions: []
  variables: ["descriptors[0].$4"]
YAML
}

# A scratch directory ($work) and the PIDs of the processes a script starts ($pids): on exit,
# however it comes, each one still listed is stopped and reaped by its PID and the directory
# removed.
scratch() {
    work="$(mktemp -d)"
    pids=()
    trap scratch_cleanup EXIT
    trap 'exit 130' INT TERM
}
scratch_cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}

# Stops one process listed in $pids and forgets it, so its PID is never signalled again.
stop() {
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    local left=() pid
    for pid in "${pids[@]}"; do [ "$pid" = "$1" ] || left+=("$pid"); done
    pids=("${left[@]}")
}

# Builds the release `tollgate` binary and prints its path (in CARGO_TARGET_DIR when set).
tollgate_release_binary() {
    cargo build --release -q -p tollgate-cli
    echo "$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/release/tollgate"
}

# The binaries every Envoy-path script runs, built in release mode: sets tollgate_bin (the
# server), rls_load (the ShouldRateLimit generator) and bare_rls (the tonic server that decides
# nothing).
# shellcheck disable=SC2034 # the variables are read by the script that sources this file
envoy_bench_binaries() {
    echo "building tollgate (release) and the bench binaries" >&2
    tollgate_bin="$(tollgate_release_binary)"
    rls_load="$(bench_executable tollgate-cli rls_load)"
    bare_rls="$(bench_executable tollgate-cli bare_rls)"
}

# Writes DIR/bench.yaml: domain `bench`, 1 000 000 000 calls per minute per `user` value, so
# every call is decided, counted and admitted.
write_bench_domain() {
    mkdir -p "$1"
    cat >"$1/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
YAML
}
