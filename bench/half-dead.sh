#!/usr/bin/env bash
# Half-dead PostgreSQL under hale (issue 43; BENCHMARKS.md, "Half-dead PostgreSQL"): the example's
# day-two scenarios standby-hang, primary-hang, disk-full and disk-stall, ROUNDS (5) rounds each
# on one cluster per scenario, at the default durability and then with --strict. As root;
# every run's rounds, report and event log in bench/results/half-dead-<time>/, a summary at
# the end (per scenario and mode: auth downtime p50/max, new primary serving p50, lost logins).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-bench/results/half-dead-$(date -u +%Y%m%dT%H%M%SZ)}
RUN=examples/postgres-failover/run.sh
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
for mode in default strict; do
  for scenario in ${SCENARIOS:-standby-hang primary-hang disk-full disk-stall}; do
    name=$scenario-$mode
    flags=(--scenario "$scenario" --rounds "$ROUNDS" --pre 5 --quiet --save "$OUT/$name")
    [ "$mode" = strict ] && flags+=(--strict)
    if line=$("$RUN" "${flags[@]}" 2>"$OUT/$name.err" | grep '^RESULT ' | sed 's/^RESULT //'); then
      echo "{\"run\":\"$name\",${line#\{}" | tee -a "$OUT/results.jsonl"
    else
      echo "$name: FAILED (see $OUT/$name.err)" | tee -a "$OUT/failed.txt" >&2
    fi
  done
done
python3 - "$OUT/results.jsonl" <<'PY' | tee "$OUT/summary.txt"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f'{r["run"]:<22} rounds {r["rounds"]}  auth downtime p50 {r["auth_downtime_p50_s"]} max {r["auth_downtime_max_s"]}'
          f'  new primary p50 {r.get("new_primary_serving_p50_s", "-")}  lost {r["committed_logins_lost"]} of {r["committed_logins"]}')
PY
