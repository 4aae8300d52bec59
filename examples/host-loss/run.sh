#!/usr/bin/env bash
# The first incident, on one machine: three "hosts" (agents on loopback), two
# essential roles, db and auth, each with a primary and two hot standbys. Host
# A holds both primaries and fails. The script prints the failover timeline
# from the promote/demote hooks. Loopback only; everything is cleaned up on
# exit (by session id: each host runs in a session of its own).
#
#   examples/host-loss/run.sh            # one run, with the timeline
#   examples/host-loss/run.sh --trials 20 --quiet   # benchmark: prints one line per trial
#   examples/host-loss/run.sh --fault kill   # host A dies: every process of it (default)
#   examples/host-loss/run.sh --fault hang   # host A's services hang (checks fail; fail_after = 3 s)
#   examples/host-loss/run.sh --fault stop   # host A freezes whole (SIGSTOP of every process,
#                                            # watchdogs and hooks included) for --stop-secs (5),
#                                            # then resumes: prints when the standby promoted and
#                                            # how long after resuming the old holder demoted
#   examples/host-loss/run.sh --fault none --steady 600   # no fault: counts changes of
#                                            # holder over 600 s of steady state
#   --promote-secs S --demote-secs S         # hooks that take S seconds (like pg_ctl promote)
#   KEEP_SLOW=S examples/host-loss/run.sh ...   # keep the logs of any trial whose promote
#                                            # took over S seconds (in <trial dir>.slow)
set -euo pipefail
HALE=${HALE:-"$(cd "$(dirname "$0")/../.." && pwd)/target/release/hale"}
TRIALS=1; QUIET=0; FAULT=kill; PROMOTE_SECS=0; DEMOTE_SECS=0; STOP_SECS=5; STEADY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --trials) TRIALS=$2; shift 2 ;;
    --quiet) QUIET=1; shift ;;
    --fault) FAULT=$2; shift 2 ;;
    --promote-secs) PROMOTE_SECS=$2; shift 2 ;;
    --demote-secs) DEMOTE_SECS=$2; shift 2 ;;
    --stop-secs) STOP_SECS=$2; shift 2 ;;
    --steady) STEADY=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$FAULT" in kill|hang|stop|none) ;; *) echo "--fault is kill, hang, stop or none" >&2; exit 2 ;; esac
[ -x "$HALE" ] || { echo "build first: cargo build --release -p hale" >&2; exit 2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }
# Every process of a host's session (its agent, watchdogs, hooks: hooks run
# in process groups of their own, but stay in the session).
host_procs() { ps -e -o pid=,sid= | awk -v s="$1" '$2 == s { print $1 }'; }
signal_host() { local p; for p in $(host_procs "$2"); do kill "-$1" "$p" 2>/dev/null || true; done; }

trial() {
  local dir; dir=$(mktemp -d /tmp/hale-host-loss.XXXXXX)
  local pids=()
  cleanup() {
    for p in "${pids[@]:-}"; do
      signal_host CONT "$p"; signal_host KILL "$p"
    done
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
    # Hooks log their start (promote/demote) and end (promoted/demoted).
    local promote="echo \$(date +%s%N) host-$n promote \$HALE_ROLE \$HALE_EPOCH >> $dir/hooks.log; sleep $PROMOTE_SECS; echo \$(date +%s%N) host-$n promoted \$HALE_ROLE \$HALE_EPOCH >> $dir/hooks.log"
    local demote="echo \$(date +%s%N) host-$n demote \$HALE_ROLE \$HALE_EPOCH \$HALE_REASON >> $dir/hooks.log; sleep $DEMOTE_SECS; echo \$(date +%s%N) host-$n demoted \$HALE_ROLE \$HALE_EPOCH >> $dir/hooks.log"
    local role_hooks="promote = [\"sh\", \"-c\", \"$promote\"]
demote = [\"sh\", \"-c\", \"$demote\"]"
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
$role_hooks
[[role]]
name = "auth"
service = "auth"
priority = ${prio[$i]}
fail_after = "3s"
$role_hooks
TOML
    # A session of its own: the host's processes are found by session id.
    HALE_LOG=${AGENT_LOG:-warn} setsid "$HALE" agent -c "$dir/$n.toml" > "$dir/$n.log" 2>&1 &
    pids+=($!); disown "$!"
  done
  # Wait (at most 60 s) until host A holds both primaries, promoted.
  local t_end=$(( $(date +%s) + 60 ))
  until [ "$(awk '$2 == "host-A" && $3 == "promoted"' "$dir/hooks.log" 2>/dev/null | wc -l)" = 2 ]; do
    [ "$(date +%s)" -lt "$t_end" ] || { echo "host A never held both roles" >&2; cat "$dir/hooks.log" >&2 || true; return 1; }
    sleep 0.1
  done
  # Steady state: renewals flowing. The fault then comes at a random point of
  # the renewal period (500 ms): a host dies at no particular moment, and the
  # promotion waits a lease after the *last renewal*, so a fault timed from
  # the grant would always land just after a renewal and bias the figures.
  sleep "2.$(printf '%03d' $((RANDOM % 500)))"
  [ "$QUIET" = 1 ] || { echo "Host A holds db and auth. As host B sees it:"; "$HALE" roles --http "127.0.0.1:${h[1]}"; echo; }
  local t0; t0=$(now_ns)
  case "$FAULT" in
    none)
      sleep "$STEADY"
      local changes; changes=$(awk -v t="$t0" '$1 > t && $3 == "promote"' "$dir/hooks.log" | wc -l)
      local demotes; demotes=$(awk -v t="$t0" '$1 > t && $3 == "demote"' "$dir/hooks.log" | wc -l)
      echo "steady=${STEADY}s promote=${PROMOTE_SECS}s demote=${DEMOTE_SECS}s changes_of_holder=$changes demotes=$demotes"
      return 0 ;;
    hang) rm -f "$dir/db-up-A" "$dir/auth-up-A" ;;   # checks fail from now on
    kill) signal_host KILL "${pids[0]}" ;;           # every process of host A at once
    stop) signal_host STOP "${pids[0]}" ;;           # every process of host A frozen
  esac
  t_end=$(( $(date +%s) + 30 ))
  until [ "$(awk -v t="$t0" '$1 > t && $3 == "promote"' "$dir/hooks.log" | wc -l)" -ge 2 ]; do
    [ "$(date +%s)" -lt "$t_end" ] || {
      echo "no failover within 30 s; logs kept in $dir.failed" >&2; cat "$dir/hooks.log" >&2
      signal_host CONT "${pids[0]}"; cp -r "$dir" "$dir.failed"; return 1; }
    sleep 0.05
  done
  local resumed=""
  if [ "$FAULT" = stop ]; then
    # Resume host A after --stop-secs in all; then wait for its demotes.
    local left; left=$(awk -v t="$t0" -v n="$(now_ns)" -v s="$STOP_SECS" 'BEGIN { r = s - (n - t) / 1e9; print (r > 0 ? r : 0) }')
    sleep "$left"
    resumed=$(now_ns)
    signal_host CONT "${pids[0]}"
    t_end=$(( $(date +%s) + 10 ))
    until [ "$(awk -v t="$resumed" '$1 > t && $2 == "host-A" && $3 == "demote"' "$dir/hooks.log" | wc -l)" -ge 2 ] \
       || [ "$(date +%s)" -ge "$t_end" ]; do sleep 0.05; done
  fi
  local lines; lines=$(awk -v t="$t0" '$1 > t && $3 == "promote" { printf "%s %s %s %.3f\n", $4, $2, $5, ($1 - t) / 1e9 }' "$dir/hooks.log")
  if [ -n "${KEEP_SLOW:-}" ] && echo "$lines" | awk -v s="$KEEP_SLOW" '$4 > s { slow = 1 } END { exit !slow }'; then
    cp -r "$dir" "$dir.slow"; echo "slow trial: logs kept in $dir.slow" >&2
  fi
  local after=""
  if [ -n "$resumed" ]; then
    # Old holder's demote (hook or watchdog fence) after resuming, per role; and
    # how many times each epoch of host A was demoted.
    after=$(awk -v t="$resumed" '$1 >= t && $2 == "host-A" && $3 == "demote" { printf "%s_demote_after_resume=%.3f ", $4, ($1 - t) / 1e9 }' "$dir/hooks.log")
    after+=$(awk '$2 == "host-A" && $3 == "demote" { n[$4 "@" $5]++ } END { m = 0; for (k in n) if (n[k] > m) m = n[k]; printf "max_demotes_per_epoch=%d", m }' "$dir/hooks.log")
  fi
  if [ "$QUIET" = 1 ]; then
    echo "$lines" | awk -v a="$after" '{ printf "%s=%s ", $1, $4 } END { print a }'
  else
    echo "Host A's fault ($FAULT) at t=0. Failover timeline (promote hook started):"
    echo "$lines" | awk '{ printf "  t=+%6.3fs  %-5s -> %s (fencing epoch %s)\n", $4, $1, $2, $3 }'
    [ -n "$after" ] && echo "  after host A resumed: $after"
    echo
    "$HALE" roles --http "127.0.0.1:${h[1]}"
  fi
}

for _ in $(seq "$TRIALS"); do trial; done
