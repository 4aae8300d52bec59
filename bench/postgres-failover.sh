#!/usr/bin/env bash
# The incident with real parts, benchmarked (BENCHMARKS.md, "The incident with real parts"):
# TRIALS (10) host deaths with A's Sentry half-dead, each paired with one with a healthy Sentry
# (the baseline for auth latency, run alternately so both see the same machine), then one
# trial of each other fault and one with the SDK's own transport. As root; raw outputs
# (report, event log, every attempt) in bench/results/postgres-failover/, a summary at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS=${TRIALS:-10}
OUT=${OUT:-bench/results/postgres-failover}
RUN=examples/postgres-failover/run.sh
ARGS=(--pre "${PRE:-8}" --after "${AFTER:-10}" --quiet)
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
trial() { # name args...
  local name=$1; shift
  local line
  line=$("$RUN" "${ARGS[@]}" --save "$OUT/$name" "$@" | grep '^RESULT ' | sed 's/^RESULT //') || { echo "$name: FAILED" >&2; return 0; }
  echo "{\"trial\":\"$name\",${line#\{}" | tee -a "$OUT/results.jsonl"
}
for i in $(seq 1 "$TRIALS"); do
  trial "host-death-$i" --fault host-death
  trial "host-death-healthy-sentry-$i" --fault host-death --sentry healthy
done
trial pg-hang --fault pg-hang
trial partition --fault partition
trial sentry-half-dead --fault sentry-half-dead
trial host-death-sdk-transport --fault host-death --transport sdk
python3 - "$OUT/results.jsonl" <<'PY'
import json, sys, statistics as st
rs = [json.loads(l) for l in open(sys.argv[1])]
def pct(v, p):
    v = sorted(v); return v[max(0, min(len(v) - 1, -(-len(v) * p // 100) - 1))] if v else None
hd = [r for r in rs if r["trial"].startswith("host-death-") and "healthy" not in r["trial"] and "sdk" not in r["trial"]]
hh = [r for r in rs if r["trial"].startswith("host-death-healthy")]
d = [r["downtime_s"] for r in hd]
print(f"host death, Sentry half-dead: {len(hd)} trials")
print(f"  auth downtime s: p50 {pct(d,50):.3f}  p99 {pct(d,99):.3f}  all {[round(x,3) for x in d]}")
print(f"  promote hook start s: {[round(r['promote_start_s'],3) for r in hd]}")
print(f"  committed logins missing: {sum(r['missing'] for r in hd)} of {sum(r['committed'] for r in hd)}")
print(f"  old primary: rows after promotion {sum(r['old_primary_rows_after_promotion'] for r in hd)}; direct writes {set(r['old_primary_direct_write'] for r in hd)}")
print(f"  reports raised {sum(r['reports_raised'] for r in hd)} received {sum(r['reports_received'] for r in hd)}")
a = [r["p99_outside_ms"] for r in hd]; b = [r["p99_outside_ms"] for r in hh]
print(f"  auth p99 outside the outage ms: median {st.median(a):.2f} {a}")
if b:
    print(f"host death, Sentry healthy: {len(hh)} trials; p99 outside median {st.median(b):.2f} {b}; ratio {st.median(a)/st.median(b):.3f}")
    print(f"  downtime s: {[round(r['downtime_s'],3) for r in hh]}")
for r in rs:
    if not r["trial"].startswith("host-death-") or "sdk" in r["trial"]:
        print(r["trial"], json.dumps(r))
PY
