#!/usr/bin/env bash
# Instructions per request the tower layer adds to a bare axum router, against tower_governor's:
# the versus_tower_governor bench runs each app alone for one round under callgrind (Debian
# package valgrind); each round's inclusive instructions divided by its requests, the bare
# router's subtracted. Unlike wall time, the count does not move with the machine's load.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
cargo bench -p tollgate-tower --bench versus_tower_governor --no-run --quiet
bench=$(ls -t "${CARGO_TARGET_DIR:-target}"/release/deps/versus_tower_governor-* | grep -v '\.d$' | head -1)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
requests=100000 # the bench's REQUESTS_PER_ROUND
per_request() {
    valgrind --tool=callgrind --callgrind-out-file="$out/$1" "$bench" "$1" >/dev/null 2>&1
    callgrind_annotate --inclusive=yes "$out/$1" 2>/dev/null \
        | grep "versus_tower_governor::measured_round" | head -1 \
        | awk -v n="$requests" '{gsub(",", "", $1); printf "%.0f", $1 / n}'
}
bare=$(per_request no-limiter)
ours=$(per_request tollgate)
theirs=$(per_request tower_governor)
printf '%-16s %14s %14s\n' app "instr/request" "added"
printf '%-16s %14s %14s\n' no-limiter "$bare" -
printf '%-16s %14s %14s\n' tollgate "$ours" "$((ours - bare))"
printf '%-16s %14s %14s\n' tower_governor "$theirs" "$((theirs - bare))"
awk -v o="$((ours - bare))" -v t="$((theirs - bare))" \
    'BEGIN { printf "added, tollgate / tower_governor: %.3f\n", o / t }'
