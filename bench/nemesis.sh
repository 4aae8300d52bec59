#!/usr/bin/env bash
# The nemesis benchmark: N random fault schedules (>= 60 s of faults each) on five real
# agents in network namespaces, each checked by the independent checker
# (crates/hale-nemesis). Results are in BENCHMARKS.md, section "Nemesis".
#
# Usage: sudo bench/nemesis.sh [SCHEDULES] [PARALLEL] [LENGTH_S] [FIRST_SEED] [-- extra `hale-nemesis run` args]
#        (defaults: 300 schedules, 2 in parallel, 60 s, first seed 1)
# Output: bench/results/nemesis-<date>/ (a directory per seed: schedule, history.json,
# report.json, violations.txt when any, the agents' and registers' logs) and
# summary.txt. Replay one seed: target/release/hale-nemesis run --seed N [same extra args].
set -euo pipefail
cd "$(dirname "$0")/.."
schedules=${1:-300}
parallel=${2:-2}
length=${3:-60}
first=${4:-1}
shift $(( $# < 4 ? $# : 4 ))
[ "${1:-}" = "--" ] && shift
extra=("$@")
cargo build --release --locked -p hale -p hale-nemesis
out=bench/results/nemesis-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
echo "# $(date -u) $(uname -srm), $(nproc) cores, commit $(git rev-parse --short HEAD)" | tee "$out/summary.txt"
echo "# $schedules schedules of $length s from seed $first, $parallel in parallel, extra args: ${extra[*]:-none}" | tee -a "$out/summary.txt"
# Seeds are dealt round-robin to PARALLEL workers; each runs its seeds one after another.
pids=()
for w in $(seq 0 $((parallel - 1))); do
  (
    for s in $(seq $((first + w)) "$parallel" $((first + schedules - 1))); do
      target/release/hale-nemesis run --seed "$s" --length "$length" --out "$out" "${extra[@]}" || true
    done
  ) > "$out/worker-$w.log" 2>&1 &
  pids+=($!)
done
trap 'kill -INT "${pids[@]}" 2>/dev/null; wait' INT TERM
wait "${pids[@]}"
grep -h '^seed ' "$out"/worker-*.log | sort -t' ' -k2,2n > "$out/runs.txt" || true
target/release/hale-nemesis summary "$out" | tee -a "$out/summary.txt"
echo "written to $out"
