#!/usr/bin/env bash
# Failover figures for BENCHMARKS.md (Failover): runs examples/host-loss/run.sh
# in each configuration the failover issue names and keeps the raw lines in
# bench/results/failover-*.txt. Release build first: cargo build --release -p hale.
#   bench/failover.sh [TRIALS] [STEADY_SECS]     (defaults 20 and 600)
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS=${1:-20}; STEADY=${2:-600}
RUN=examples/host-loss/run.sh
out() { echo "bench/results/failover-$1.txt"; }
stamp() { echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) nproc=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg): $*"; }
{ stamp "$RUN --promote-secs 3 --demote-secs 1 --fault none --steady $STEADY --quiet"
  $RUN --promote-secs 3 --demote-secs 1 --fault none --steady "$STEADY" --quiet; } | tee "$(out steady-slow-hooks)"
{ stamp "$RUN --promote-secs 3 --demote-secs 1 --trials $TRIALS --quiet"
  $RUN --promote-secs 3 --demote-secs 1 --trials "$TRIALS" --quiet; } | tee "$(out kill-slow-hooks-$TRIALS)"
{ stamp "$RUN --promote-secs 3 --demote-secs 1 --fault stop --trials $TRIALS --quiet"
  $RUN --promote-secs 3 --demote-secs 1 --fault stop --trials "$TRIALS" --quiet; } | tee "$(out stop-slow-hooks-$TRIALS)"
{ stamp "$RUN --trials $TRIALS --quiet"
  $RUN --trials "$TRIALS" --quiet; } | tee "$(out kill-$TRIALS)"
# Percentiles of the promote times (every role of every trial), and the
# slowest demote after resuming (stop trials).
summary() {
  local f; f=$(out "$1")
  local v; v=$(grep -v '^#' "$f" | tr ' ' '\n' | awk -F= '$1 == "db" || $1 == "auth" { print $2 }' | sort -n)
  [ -n "$v" ] || return 0
  local n; n=$(echo "$v" | wc -l)
  local p50; p50=$(echo "$v" | sed -n "$(( (n + 1) / 2 ))p")
  local max; max=$(echo "$v" | tail -1)
  local r; r=$(grep -v '^#' "$f" | tr ' ' '\n' | awk -F= '$1 ~ /demote_after_resume/ { print $2 }' | sort -n | tail -1)
  echo "$1: n=$n p50=${p50}s p99(max)=${max}s${r:+ max_demote_after_resume=${r}s}"
}
for f in kill-slow-hooks-$TRIALS stop-slow-hooks-$TRIALS kill-$TRIALS; do summary "$f"; done
