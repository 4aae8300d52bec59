#!/usr/bin/env bash
# The first incident, on one machine: three "hosts" (agents on loopback), two
# essential roles, db and auth, each with a primary and two hot standbys. Host
# A holds both primaries and dies (its agent, its watchdogs and its services
# are killed at once). The script prints the failover timeline from the
# promote/demote hooks. Loopback only; everything is cleaned up on exit.
#
#   examples/host-loss/run.sh            # one run, with the timeline
#   examples/host-loss/run.sh --trials 20 --quiet   # benchmark: prints one line per trial
#   examples/host-loss/run.sh --fault hang          # instead, host A's services hang
#                                                   # (checks fail; fail_after = 3 s)
set -euo pipefail
HALE=${HALE:-"$(cd "$(dirname "$0")/../.." && pwd)/target/release/hale"}
TRIALS=1; QUIET=0; FAULT=kill
while [ $# -gt 0 ]; do
  case "$1" in
    --trials) TRIALS=$2; shift 2 ;;
    --quiet) QUIET=1; shift ;;
    --fault) FAULT=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$HALE" ] || { echo "build first: cargo build --release -p hale" >&2; exit 2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }

trial() {
  local dir; dir=$(mktemp -d /tmp/hale-host-loss.XXXXXX)
  local pids=()
  cleanup() {
    for p in "${pids[@]:-}"; do kill -CONT "$p" 2>/dev/null || true; kill -9 "$p" 2>/dev/null || true; done
    pkill -9 -f "$dir" 2>/dev/null || true
    rm -rf "$dir"
  }
  trap cleanup RETURN
  local key; key=$("$HALE" keygen)
  local hosts=(A B C) prio=(100 50 10) g=() c=() h=()
  for i in 0 1 2; do g+=("$(free_port)"); c+=("$(free_port)"); h+=("$(free_port)"); done
  local servers="\"1=127.0.0.1:${c[0]}\", \"2=127.0.0.1:${c[1]}\", \"3=127.0.0.1:${c[2]}\""
  for i in 0 1 2; do
    local n=${hosts[$i]}
    touch "$dir/db-up-$n" "$dir/auth-up-$n"
    local seeds=""; [ "$i" -gt 0 ] && seeds="seeds = [\"127.0.0.1:${g[0]}\"]"
    cat > "$dir/$n.toml" <<TOML
[agent]
name = "host-$n"
bind = "127.0.0.1:${g[$i]}"
http = "127.0.0.1:${h[$i]}"
$seeds
[cluster]
name = "host-loss"
keys = ["$key"]
[control]
id = $((i + 1))
bind = "127.0.0.1:${c[$i]}"
servers = [$servers]
bootstrap = $([ "$i" = 0 ] && echo true || echo false)
data_dir = "$dir/data-$n"
[[service]]
name = "postgres"
essential = true
[[service.check]]
command = ["test", "-f", "$dir/db-up-$n"]
interval = "200ms"
[[service]]
name = "auth"
essential = true
[[service.check]]
command = ["test", "-f", "$dir/auth-up-$n"]
interval = "200ms"
[[role]]
name = "db"
service = "postgres"
priority = ${prio[$i]}
fail_after = "3s"
promote = ["sh", "-c", "echo \$(date +%s%N) host-$n promote \$HALE_ROLE \$HALE_EPOCH >> $dir/hooks.log"]
demote = ["sh", "-c", "echo \$(date +%s%N) host-$n demote \$HALE_ROLE \$HALE_EPOCH \$HALE_REASON >> $dir/hooks.log"]
[[role]]
name = "auth"
service = "auth"
priority = ${prio[$i]}
fail_after = "3s"
promote = ["sh", "-c", "echo \$(date +%s%N) host-$n promote \$HALE_ROLE \$HALE_EPOCH >> $dir/hooks.log"]
demote = ["sh", "-c", "echo \$(date +%s%N) host-$n demote \$HALE_ROLE \$HALE_EPOCH \$HALE_REASON >> $dir/hooks.log"]
TOML
    HALE_LOG=warn "$HALE" agent -c "$dir/$n.toml" > "$dir/$n.log" 2>&1 &
    pids+=($!)
  done
  # Wait (at most 30 s) until host A holds both primaries.
  local t_end=$(( $(date +%s) + 30 ))
  until [ "$(grep -c 'host-A promote' "$dir/hooks.log" 2>/dev/null || true)" = 2 ]; do
    [ "$(date +%s)" -lt "$t_end" ] || { echo "host A never held both roles" >&2; return 1; }
    sleep 0.1
  done
  sleep 2 # steady state: renewals flowing
  [ "$QUIET" = 1 ] || { echo "Host A holds db and auth. As host B sees it:"; "$HALE" --http "127.0.0.1:${h[1]}" roles; echo; }
  local t0; t0=$(now_ns)
  if [ "$FAULT" = hang ]; then
    # Host A's database and auth hang: their checks fail from now on.
    rm -f "$dir/db-up-A" "$dir/auth-up-A"
  else
    # Host A dies: its agent and everything it started.
    pkill -9 -P "${pids[0]}" 2>/dev/null || true
    kill -9 "${pids[0]}"
    pkill -9 -f "$dir/A.toml" 2>/dev/null || true
  fi
  t_end=$(( $(date +%s) + 30 ))
  until [ "$(awk -v t="$t0" '$1 > t && $3 == "promote"' "$dir/hooks.log" | wc -l)" -ge 2 ]; do
    [ "$(date +%s)" -lt "$t_end" ] || { echo "no failover within 30 s" >&2; cat "$dir/hooks.log" >&2; return 1; }
    sleep 0.05
  done
  local lines; lines=$(awk -v t="$t0" '$1 > t && $3 == "promote" { printf "%s %s %s %.3f\n", $4, $2, $5, ($1 - t) / 1e9 }' "$dir/hooks.log")
  if [ "$QUIET" = 1 ]; then
    echo "$lines" | awk '{ printf "%s=%s ", $1, $4 } END { print "" }'
  else
    echo "Host A's fault ($FAULT) at t=0. Failover timeline (promote hook started):"
    echo "$lines" | awk '{ printf "  t=+%6.3fs  %-5s -> %s (fencing epoch %s)\n", $4, $1, $2, $3 }'
    echo
    "$HALE" --http "127.0.0.1:${h[1]}" roles
  fi
}

for _ in $(seq "$TRIALS"); do trial; done
