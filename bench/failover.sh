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
# Percentiles of the promote times (every role of every trial).
for f in steady-slow-hooks kill-slow-hooks-$TRIALS stop-slow-hooks-$TRIALS kill-$TRIALS; do
  grep -v '^#' "$(out "$f")" | tr ' ' '\n' | awk -F= -v f="$f" '
    $1 == "db" || $1 == "auth" { v[n++] = $2 }
    $1 ~ /demote_after_resume/ { if ($2 > r) r = $2 }
    END { if (n == 0) exit; asort(v); printf "%s: n=%d p50=%.2fs p99(max)=%.2fs", f, n, v[int((n+1)/2)], v[n];
          if (r != "") printf " max_demote_after_resume=%.3fs", r; print "" }'
done
