#!/usr/bin/env bash
# Instructions per operation of a charge and of a check on the memory store, per algorithm, and
# their ratio: the charge_vs_check bench's memory loops run under callgrind (Debian package
# valgrind), each loop's inclusive instructions divided by its operations. Unlike wall time,
# the count does not move with the machine's load.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in valgrind cargo python3; do
    command -v "$tool" >/dev/null || { echo "${0##*/}: $tool not found" >&2; exit 1; }
done
. scripts/lib.sh
bench=$(bench_executable tollgate-redis charge_vs_check)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# 5 rounds of 200 000 operations per loop (the bench's ROUNDS x MEMORY_OPS).
ops=$((5 * 200000))
printf '%-16s %14s %14s %16s\n' algorithm "check instr" "charge instr" "charge / check"
for algorithm in fixed_window sliding_window token_bucket leaky_bucket gcra sliding_log calendar_quota; do
    valgrind --tool=callgrind --callgrind-out-file="$out/$algorithm" "$bench" memory "$algorithm" >/dev/null 2>&1
    inclusive() {
        callgrind_annotate --inclusive=yes "$out/$algorithm" 2>/dev/null \
            | grep "charge_vs_check::$1" | head -1 | awk '{gsub(",", "", $1); print $1}'
    }
    check=$(inclusive memory_checks)
    charge=$(inclusive memory_charges)
    awk -v a="$algorithm" -v c="$check" -v g="$charge" -v n="$ops" \
        'BEGIN { printf "%-16s %14.0f %14.0f %16.3f\n", a, c / n, g / n, g / c }'
done
