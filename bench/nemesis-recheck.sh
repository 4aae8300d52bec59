#!/usr/bin/env bash
# Checks every recorded history of a nemesis run again with this build's checker
# (`hale-nemesis check`), after the checker changed: what the run's own reports said
# stays in its worker logs and report.json files.
#
# Usage: bench/nemesis-recheck.sh bench/results/nemesis-<date>
# Output: <dir>/recheck.txt (a line per seed: ok, or its violations) and a count.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: bench/nemesis-recheck.sh RESULTS_DIR}
cargo build --release --locked -q -p hale-nemesis
out="$dir/recheck.txt"
echo "# $(date -u) checker of commit $(git rev-parse --short HEAD)" > "$out"
bad=0 all=0
for h in "$dir"/seed-*/history.json; do
  seed=$(basename "$(dirname "$h")")
  all=$((all + 1))
  if v=$(target/release/hale-nemesis check "$h" 2>&1 | grep '^(' ); [ -n "$v" ]; then
    bad=$((bad + 1))
    printf '%s: %s\n' "$seed" "$(echo "$v" | tr '\n' ' ')" >> "$out"
  else
    echo "$seed: ok" >> "$out"
  fi
done
echo "histories: $all, with violations: $bad" | tee -a "$out"
