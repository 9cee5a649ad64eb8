#!/usr/bin/env bash
# What an operator deploys, checked against the real tools (scripts/test.sh's stage "deploy
# artefacts"):
#
# - the image: the Dockerfile's final stage built with buildah over the root that
#   deploy/image/rootfs.sh puts together from TOLLGATE (the binary the tests ran), then the
#   binary started from the image's root as the image says (user, environment, entry point):
#   as `tollgate serve`, and as Envoy Gateway starts it (`/bin/ratelimit` with
#   envoyproxy/ratelimit's variables). Nothing can be pulled here and `podman run` cannot set
#   rlimits on these machines, so the root is entered with chroot. The Dockerfile's build stage
#   (cargo in the Rust image) is the one part not run here.
# - the Kubernetes manifests (scripts/deploy_checks.py on PYTHON, the kubernetes-validate
#   virtual environment's), and that broken copies of them fail those checks;
# - the alert rules: promtool check rules and test rules, a firing and a silent case for each
#   alert, and broken copies of the rules caught by the tests.
#
# The dashboard's queries run against a real Prometheus in crates/tollgate-cli/tests/
# grafana_dashboard.rs, with the other tests.
#
#   scripts/check-deploy.sh TOLLGATE PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -ne 2 ]; then
    echo "usage: scripts/check-deploy.sh TOLLGATE PYTHON" >&2
    exit 2
fi
binary=$1
python=$2
for tool in buildah promtool chroot; do
    command -v "$tool" >/dev/null || { echo "check-deploy: $tool not found (scripts/test.sh installs it)" >&2; exit 1; }
done

# env -i leaves only the image's PATH: chroot is named by its path on this machine.
chroot=$(command -v chroot)

work=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-deploy.XXXXXX")
storage=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
image=localhost/tollgate:check
server_pid=""
container=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -KILL "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [ -n "$container" ]; then
        buildah "${storage[@]}" rm "$container" >/dev/null 2>&1 || true
    fi
    buildah "${storage[@]}" rmi --all --force >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# --- The image ---------------------------------------------------------------------------------

mkdir -p "$work/context"
sh deploy/image/rootfs.sh "$binary" "$work/context/rootfs"
# The Dockerfile's last stage, taking the root from the context instead of the build stage.
awk '/^FROM /{stage = ""} {stage = stage $0 "\n"} END {printf "%s", stage}' Dockerfile > "$work/final"
grep -q '^FROM scratch$' "$work/final" || { echo "check-deploy: Dockerfile: the final stage is not FROM scratch" >&2; exit 1; }
grep -q '^COPY --from=build /rootfs /$' "$work/final" || {
    echo "check-deploy: Dockerfile: the final stage no longer copies /rootfs from the build stage" >&2
    exit 1
}
sed 's|^COPY --from=build /rootfs /$|COPY rootfs/ /|' "$work/final" > "$work/context/Containerfile"
buildah "${storage[@]}" bud --quiet --isolation chroot --format docker --layers=false \
    -t "$image" -f "$work/context/Containerfile" "$work/context" >/dev/null
buildah "${storage[@]}" inspect --type image "$image" > "$work/inspect.json"
config=$("$python" scripts/deploy_checks.py image "$work/inspect.json")
user=$(sed -n 's/^user //p' <<< "$config")
read -r -a image_env <<< "$(sed -n 's/^env //p' <<< "$config")"
read -r -a command <<< "$(sed -n 's/^command //p' <<< "$config")"
container=$(buildah "${storage[@]}" from "$image")
root=$(buildah "${storage[@]}" mount "$container")
echo "image built: user $user, ${image_env[*]}, command ${command[*]}"

# Starts the image's root with `env` added to the image's environment and `argv`, as `user`;
# sets server_pid and http (the address it listens on).
start() {
    local log=$1
    shift
    local env=()
    while [ "$1" != "--" ]; do
        env+=("$1")
        shift
    done
    shift
    # The log exists before the server starts, so the wait below never reads a missing file.
    : > "$log"
    env -i "${image_env[@]}" "${env[@]}" "$chroot" --userspec="$user" "$root" "$@" > "$log" 2>&1 &
    server_pid=$!
    http=""
    for _ in $(seq 1 300); do
        http=$(sed -n 's/^tollgate: http listening on //p' "$log")
        [ -n "$http" ] && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$http" ] || { echo "check-deploy: $* did not start from the image's root:" >&2; cat "$log" >&2; exit 1; }
    case "$http" in
        0.0.0.0:*) ;;
        *) echo "check-deploy: the image listens on $http, not on every interface" >&2; exit 1 ;;
    esac
}

# `GET` or `POST` on the server, from loopback: the body, or a failure naming the answer.
call() {
    "$python" - "$@" <<'PYTHON'
import sys, urllib.request
method, url, expected = sys.argv[1:4]
data = sys.argv[4].encode() if len(sys.argv) > 4 else None
request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=10) as answer:
        body = answer.read().decode()
except Exception as err:
    sys.exit(f"check-deploy: {method} {url}: {err}")
if expected not in body:
    sys.exit(f"check-deploy: {method} {url}: expected {expected!r} in {body!r}")
PYTHON
}

stop() {
    kill -TERM "$server_pid"
    local status=0
    wait "$server_pid" || status=$?
    server_pid=""
    [ "$status" -eq 0 ] || { echo "check-deploy: exit status $status after SIGTERM" >&2; exit 1; }
}

# As the image runs by default: `tollgate serve`, on a free port.
start "$work/serve.log" PORT=0 GRPC_PORT=0 -- "${command[@]}"
port=${http##*:}
call GET "http://127.0.0.1:$port/healthz" ok
call GET "http://127.0.0.1:$port/readyz" '"ready":true'
stop
echo "image: ${command[*]} answered /healthz and /readyz as user $user, and stopped with 0"

# As Envoy Gateway runs it: /bin/ratelimit, no arguments, limits under RUNTIME_ROOT.
mkdir -p "$root/data/ratelimit/config"
printf 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 100}\n' \
    > "$root/data/ratelimit/config/edge.yaml"
start "$work/ratelimit.log" PORT=0 GRPC_PORT=0 RUNTIME_ROOT=/data RUNTIME_SUBDIRECTORY=ratelimit \
    RUNTIME_IGNOREDOTFILES=true RUNTIME_WATCH_ROOT=false LOG_LEVEL=info USE_STATSD=false \
    USE_PROMETHEUS=true PROMETHEUS_ADDR=127.0.0.1:0 -- /bin/ratelimit
port=${http##*:}
call GET "http://127.0.0.1:$port/healthcheck" OK
call POST "http://127.0.0.1:$port/json" '"overallCode":"OK"' \
    '{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "198.51.100.7"}]}]}'
stop
echo "image: /bin/ratelimit served envoyproxy/ratelimit's /healthcheck and /json from RUNTIME_ROOT"

# --- Kubernetes manifests ----------------------------------------------------------------------

"$python" scripts/deploy_checks.py manifests deploy/kubernetes "$binary"
"$python" scripts/deploy_checks.py manifest-mutants deploy/kubernetes "$binary"

# --- Alert rules -------------------------------------------------------------------------------

promtool check rules deploy/prometheus/alerts.yaml
promtool test rules deploy/prometheus/alerts.test.yaml
"$python" scripts/deploy_checks.py alerts deploy/prometheus/alerts.yaml deploy/prometheus/alerts.test.yaml
"$python" scripts/deploy_checks.py mutants deploy/prometheus/alerts.yaml deploy/prometheus/alerts.test.yaml \
    "$(command -v promtool)"
