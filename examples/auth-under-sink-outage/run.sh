#!/usr/bin/env bash
# The first incident, reproduced on loopback: an auth service reporting each
# error of a database failover to a Sentry that is half-dead (accepts TCP,
# never answers), reporting naively (synchronous HTTP, no timeout) or through
# hale's reporter, against a healthy-sink baseline. Bounded in time:
# 4 runs of SECS seconds each (default 10), plus a 2 s client timeout.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS="${SECS:-10}"
RATE="${RATE:-200}"
cargo build --release -q -p hale-relay --example auth-under-sink-outage
bin=target/release/examples/auth-under-sink-outage
printf '%-7s %-10s %8s %8s %10s %9s %9s %9s %8s\n' report sink sent served error_rate p50_ms p99_ms rss_mib dropped
for run in "hale up" "hale half-dead" "naive up" "naive half-dead"; do
  set -- $run
  timeout $((SECS + 30)) "$bin" --report "$1" --sink "$2" --secs "$SECS" --rate "$RATE" |
    python3 -c 'import json,sys
r=json.loads(sys.stdin.read())
print("%-7s %-10s %8d %8d %10.4f %9.2f %9.2f %9.1f %8d" % (r["report"], r["sink"], r["sent"], r["served"], r["error_rate"], r["p50_ms"], r["p99_ms"], r["rss_mib"], r["reporter_dropped"]))'
done
