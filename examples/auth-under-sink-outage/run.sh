#!/usr/bin/env bash
# The first incident, reproduced on loopback: an auth service reporting each
# error of a database failover to a Sentry that is up or half-dead (accepts
# TCP, never answers). Reporting modes, side by side:
#
#   naive         synchronous HTTP on the request path, no timeout (the incident)
#   hale          hale's in-process reporter
#   sentry>agent  the unmodified Sentry SDK (`sentry` crate), DSN pointed at a
#                 real `hale agent` process whose [relay] forwards to the fake
#   sentry-direct the unmodified Sentry SDK, DSN pointed at the fake itself
#
# RUNS runs of each mode (default 3), SECS seconds each (default 10) at RATE
# logins/s (default 200); prints every run, then the median of each column
# per mode. Bounded in time: each run is killed after SECS + 30 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS="${SECS:-10}"
RATE="${RATE:-200}"
RUNS="${RUNS:-3}"
MODES="${MODES:-hale:up hale:half-dead sentry>agent:up sentry>agent:half-dead naive:up naive:half-dead sentry-direct:up sentry-direct:half-dead}"
cargo build --release -q -p hale-relay --example auth-under-sink-outage
cargo build --release -q -p hale --bin hale
bin=target/release/examples/auth-under-sink-outage
hale=target/release/hale
tmp=$(mktemp -d)
agent_pid=""
cleanup() {
  if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss_mib() { awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "/proc/$1/status" 2>/dev/null || echo nan; }

# Starts `hale agent` with a relay to the fake Sentry on $1; sets agent_pid, agent_http.
start_agent() {
  agent_http=$(free_port)
  cat >"$tmp/hale.toml" <<EOF
[agent]
name = "auth-host"
bind = "127.0.0.1:0"
http = "127.0.0.1:$agent_http"
[relay]
primary = { dsn = "http://public@127.0.0.1:$1/1" }
EOF
  HALE_LOG=warn "$hale" agent --config "$tmp/hale.toml" 2>"$tmp/agent.log" &
  agent_pid=$!
  for _ in $(seq 1 200); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$agent_http/metrics" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "the agent did not come up:" >&2; cat "$tmp/agent.log" >&2; exit 1
}

stop_agent() {
  kill -TERM "$agent_pid" 2>/dev/null || true
  wait "$agent_pid" 2>/dev/null || true
  agent_pid=""
}

for run in $(seq 1 "$RUNS"); do
  for m in $MODES; do
    mode=${m%%:*} sink=${m#*:}
    sink_port=$(free_port)
    extra=(--sink-addr "127.0.0.1:$sink_port")
    report=$mode
    agent_rss=0
    case $mode in
      "sentry>agent")
        start_agent "$sink_port"
        report=sentry extra+=(--dsn "http://public@127.0.0.1:$agent_http/1") ;;
      sentry-direct)
        report=sentry extra+=(--dsn "http://public@127.0.0.1:$sink_port/1") ;;
    esac
    out=$(timeout $((SECS + 30)) "$bin" --report "$report" --sink "$sink" --secs "$SECS" --rate "$RATE" "${extra[@]}")
    if [ -n "$agent_pid" ]; then agent_rss=$(rss_mib "$agent_pid"); stop_agent; fi
    echo "$out" | python3 -c 'import json,sys
r=json.loads(sys.stdin.read()); r["mode"]=sys.argv[1]; r["run"]=int(sys.argv[2]); r["agent_rss_mib"]=float(sys.argv[3])
print(json.dumps(r))' "$mode" "$run" "$agent_rss" >>"$tmp/runs.jsonl"
    tail -n1 "$tmp/runs.jsonl"
  done
done

python3 - "$tmp/runs.jsonl" "$SECS" "$RATE" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"\nmedians of {max(r['run'] for r in rows)} runs per mode, {sys.argv[2]} s at {sys.argv[3]} logins/s "
      "(failover window 20%-80% of the run; every third login then reports an error)")
cols = ["sent", "served", "error_rate", "p50_ms", "p99_ms", "rss_mib", "agent_rss_mib"]
print(f"{'mode':<14} {'sink':<10} {'sent':>6} {'served':>6} {'err_rate':>8} {'p50_ms':>7} {'p99_ms':>7} "
      f"{'rss_mib':>7} {'agent_rss':>9}   p99 per run")
seen = []
for r in rows:
    k = (r["mode"], r["sink"])
    if k not in seen:
        seen.append(k)
for mode, sink in seen:
    rs = [r for r in rows if (r["mode"], r["sink"]) == (mode, sink)]
    med = {c: statistics.median(r[c] for r in rs) for c in cols}
    per = ", ".join(f"{r['p99_ms']:.2f}" for r in rs)
    print(f"{mode:<14} {sink:<10} {med['sent']:>6.0f} {med['served']:>6.0f} {med['error_rate']:>8.4f} "
          f"{med['p50_ms']:>7.2f} {med['p99_ms']:>7.2f} {med['rss_mib']:>7.1f} {med['agent_rss_mib']:>9.1f}   {per}")
for mode in dict.fromkeys(m for m, _ in seen):
    up = [r for r in rows if r["mode"] == mode and r["sink"] == "up"]
    hd = [r for r in rows if r["mode"] == mode and r["sink"] == "half-dead"]
    if up and hd:
        p_up, p_hd = (statistics.median(r["p99_ms"] for r in x) for x in (up, hd))
        s_up, s_hd = (statistics.median(1 - r["error_rate"] for r in x) for x in (up, hd))
        # The same round's runs are minutes apart at most: pair them.
        pairs = [h["p99_ms"] / u["p99_ms"] for u in up for h in hd if h["run"] == u["run"]]
        print(f"{mode:<14} half-dead vs up: p99 {p_hd:.2f} / {p_up:.2f} ms = {p_hd / p_up:.2f}x "
              f"(per round: {', '.join(f'{x:.2f}' for x in pairs)}; median {statistics.median(pairs):.2f}x); "
              f"success {s_hd:.4f} vs {s_up:.4f}")
EOF
