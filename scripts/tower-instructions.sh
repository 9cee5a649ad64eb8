#!/usr/bin/env bash
# Instructions per request the tower layer adds to a bare axum router, against tower_governor's:
# the versus_tower_governor bench runs each app alone for one round under callgrind (Debian
# package valgrind); each round's inclusive instructions divided by its requests, the bare
# router's subtracted. Unlike wall time, the count does not move with the machine's load.
# With CACHE_SIM=1, callgrind also simulates the caches (about twice as slow) and the table adds
# the first-level instruction cache misses per request (I1mr): how much distinct code a request
# runs through, which instruction counts do not show.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in valgrind cargo python3; do
    command -v "$tool" >/dev/null || { echo "${0##*/}: $tool not found" >&2; exit 1; }
done
. scripts/lib.sh
bench=$(bench_executable tollgate-tower versus_tower_governor)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
requests=100000 # the bench's REQUESTS_PER_ROUND
sim=()
events=Ir
if [ "${CACHE_SIM:-0}" = 1 ]; then
    sim=(--cache-sim=yes)
    events=Ir,I1mr
fi
# "instructions misses" per request of app $1, in measured_round (misses 0 without CACHE_SIM).
per_request() {
    valgrind --tool=callgrind "${sim[@]}" --callgrind-out-file="$out/$1" "$bench" "$1" >/dev/null 2>&1
    callgrind_annotate --inclusive=yes --show="$events" "$out/$1" 2>/dev/null \
        | grep "versus_tower_governor::measured_round" | head -1 | sed 's/([^)]*)//g' \
        | awk -v n="$requests" '{gsub(",", "", $1); gsub(",", "", $2); m = ($2 ~ /^[0-9]+$/) ? $2 : 0
            printf "%.0f %.0f", $1 / n, m / n}'
}
read -r bare bare_miss <<<"$(per_request no-limiter)"
read -r ours ours_miss <<<"$(per_request tollgate)"
read -r theirs theirs_miss <<<"$(per_request tower_governor)"
printf '%-16s %14s %14s\n' app "instr/request" "added"
printf '%-16s %14s %14s\n' no-limiter "$bare" -
printf '%-16s %14s %14s\n' tollgate "$ours" "$((ours - bare))"
printf '%-16s %14s %14s\n' tower_governor "$theirs" "$((theirs - bare))"
awk -v o="$((ours - bare))" -v t="$((theirs - bare))" \
    'BEGIN { printf "added, tollgate / tower_governor: %.3f\n", o / t }'
if [ "${CACHE_SIM:-0}" = 1 ]; then
    printf '\n%-16s %14s %14s\n' app "I1mr/request" "added"
    printf '%-16s %14s %14s\n' no-limiter "$bare_miss" -
    printf '%-16s %14s %14s\n' tollgate "$ours_miss" "$((ours_miss - bare_miss))"
    printf '%-16s %14s %14s\n' tower_governor "$theirs_miss" "$((theirs_miss - bare_miss))"
    awk -v o="$((ours_miss - bare_miss))" -v t="$((theirs_miss - bare_miss))" \
        'BEGIN { printf "instruction cache misses added, tollgate / tower_governor: %.3f\n", o / t }'
fi
