#!/usr/bin/env bash
# The whole test suite, on a fresh machine or a warm one: installs what the tests need from Debian
# when it is missing (Redis; Chromium and chromedriver for the dashboard's browser test), then
# checks formatting and lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

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

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
