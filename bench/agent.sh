#!/usr/bin/env bash
# Benchmarks of real `hale agent` processes on loopback: detection time
# (SIGKILL, SIGSTOP; first and all observers) at N=10 and N=30, then idle
# bandwidth, CPU and RSS at N=10 and N=30. Results are in BENCHMARKS.md,
# section "Agent (real processes)".
#
# Usage: bench/agent.sh [TRIALS] [IDLE_SECS]      (defaults: 20 trials, 180 s)
# Output: every trial, then RESULT lines; a copy goes to bench/results/agent-<date>.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-20}
secs=${2:-180}
cargo build --release --locked -p hale --bins --examples
bench=target/release/examples/agent_bench
mkdir -p bench/results
out=bench/results/agent-$(date -u +%Y%m%dT%H%M%SZ).txt
{
  echo "# $(date -u) $(uname -srm), $(nproc) cores, commit $(git rev-parse --short HEAD)"
  for n in 10 30; do
    for sig in kill stop; do
      echo "\$ $bench detect --nodes $n --trials $trials --signal $sig"
      "$bench" detect --nodes "$n" --trials "$trials" --signal "$sig"
    done
  done
  for n in 10 30; do
    echo "\$ $bench idle --nodes $n --secs $secs"
    "$bench" idle --nodes "$n" --secs "$secs"
  done
} 2>&1 | tee "$out"
echo "written to $out"
