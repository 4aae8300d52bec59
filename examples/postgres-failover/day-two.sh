# Day two with PostgreSQL under hale: sourced by run.sh (--scenario) once the three hosts,
# HAProxy, the auth service and the load are up. Each scenario runs ROUNDS rounds on the same
# cluster and writes one JSON line per round to rounds.jsonl; the summary (per-round auth
# downtime from the load's attempts, committed logins lost, the checks of each round) is
# printed and saved with --save.
#
#   failovers   kill the current primary's host; bring it back BACK s after the fault; wait
#               until it streams from the new primary; a direct write to it must be refused
#   lagging     C's replay paused while the primary writes >= 16 MB; kill the primary's host:
#               the other, up-to-date standby must be promoted, C never; then C resumes. A
#               last round also hangs the up-to-date standby's PostgreSQL: no promotion for
#               20 s, C says why (not-eligible), and the standby is promoted once it thaws
#   switchover  hale roles switchover (asked of C's agent) from the primary to the other of
#               A and B; then one to C while its replay is held back: refused, nothing moves
#   pause       pause db, kill the primary's host: nobody promoted for HOLD s; resume: the
#               failover follows
#   standby-hang  every PostgreSQL process of a standby in the quorum stopped for HANG s
#               (SIGSTOP: its connections stay open); then thawed: writes must go on
#   primary-hang  every PostgreSQL process of the primary stopped: its agent's check fails,
#               it is fenced (killed), a standby promoted; it rejoins the new primary
#   disk-full   the primary's disk filled to 32 MB free (below min_free_bytes): it hands
#               over; the ballast removed, it rejoins
#   disk-stall  the primary's disk frozen (fsfreeze) until a new primary serves, 20 s at
#               most; thawed, it rejoins

host_ip() { local v=IP_$1; echo "${!v}"; }
host_ns() { local v=NS_$1; echo "${!v}"; }
link_of() { echo "p${1,,}"; }
agent_url() { echo "http://$(host_ip "$1"):7947$2"; }
# The holder of db as the first agent that answers says (A, B or C; empty if none).
holder() {
  local h out
  for h in C B A; do
    out=$(in_ns "$NS_L" curl -fsS -m 1 "$(agent_url "$h" /v1/roles)" 2>/dev/null) || continue
    echo "$out" | python3 -c 'import json,sys; l=(json.load(sys.stdin).get("leases") or {}).get("db") or {}; h=l.get("holder") or ""; print(h.replace("host-",""))' && return 0
  done
}
primary_is() { http_ok "$(agent_url "$1" /v1/roles/db/primary)" 2>/dev/null; }
streams() { http_ok "$(agent_url "$1" /v1/roles/db/replica)" 2>/dev/null; }
kill_host() {
  local p
  for p in $(ip netns pids "$(host_ns "$1")"); do kill -KILL "$p" 2>/dev/null || true; done
  ip -n "$BR" link del "$(link_of "$1")"
}
back_host() { link_up "$(host_ns "$1")" "$(link_of "$1")" "$(host_ip "$1")"; start_agent "$(host_ns "$1")" "$1"; }
api_post() { # host path body
  in_ns "$NS_L" curl -sS -m 5 -o "$DIR/post.out" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' -d "$3" "$(agent_url "$1" "$2")"
}
others() { local h; for h in A B C; do [ "$h" = "$1" ] || echo "$h"; done; }
new_primary() { # not-this-host: prints the host whose agent answers 200 on /primary
  local h
  for h in $(others "$1"); do primary_is "$h" && { echo "$h"; return 0; }; done
  return 1
}
secs_since() { awk -v a="$1" -v b="$(now_ns)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }
# Bytes host $2's replay is behind host $1's current WAL position.
replay_behind() {
  local p r
  p=$(psql_on "$1" -Atc "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint") || return 1
  r=$(psql_on "$2" -Atc "SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::bigint") || return 1
  echo $(( p - r ))
}
c_far_behind() { [ "$(replay_behind "$1" C 2>/dev/null || echo 0)" -ge $(( 16 << 20 )) ]; }
within_1mb() { http_ok "$(agent_url "$1" '/v1/roles/db/replica?lag=1048576')"; }
caught_up() { [ "$(replay_behind "$1" "$2" 2>/dev/null || echo 99999999)" -le $(( 1 << 20 )) ]; }
promoted_events() { # host: how many `promoting` events its agent reported
  in_ns "$NS_L" curl -fsS -m 2 -H "Authorization: Bearer $TOKEN" "$(agent_url "$1" /v1/events)" 2>/dev/null |
    python3 -c 'import json,sys; print(sum(1 for e in json.load(sys.stdin) if e.get("kind") == "promoting"))' || echo "?"
}
not_eligible_said() {
  in_ns "$NS_L" curl -fsS -m 2 -H "Authorization: Bearer $TOKEN" "$(agent_url C /v1/events)" 2>/dev/null |
    python3 -c 'import json,sys; sys.exit(0 if any(e.get("kind") == "not-eligible" for e in json.load(sys.stdin)) else 1)'
}
# Holds C's replay back while the primary P writes some 20 MB of WAL outside the load's table.
hold_c_back() {
  psql_on C -c "SELECT pg_wal_replay_pause()" >/dev/null
  psql_on "$1" -c "CREATE TABLE IF NOT EXISTS ballast (pad text);
    INSERT INTO ballast SELECT md5(random()::text) FROM generate_series(1, 250000)" >/dev/null 2>&1
  wait_for 30 "C 16 MB behind $1" c_far_behind "$1"
}
release_c() { psql_on C -c "SELECT pg_wal_replay_resume()" >/dev/null 2>&1 || true; }
round() { echo "$1" >> "$DIR/rounds.jsonl"; say "  $1"; }
# The postmaster of host $1's PostgreSQL and its children.
pg_pids() {
  local pid
  pid=$(head -1 "$(disk_of "$1")/postmaster.pid" 2>/dev/null) || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  echo "$pid"; pgrep -P "$pid" || true
}
pg_signal() { local p; for p in $(pg_pids "$1"); do kill "-$2" "$p" 2>/dev/null || true; done; }
in_quorum() { [ "$(psql_on "$1" -Atc "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'host-$2'" 2>/dev/null)" = quorum ]; }
# Bytes a non-root writer may still use on host $1's disk.
avail() { df --output=avail -B1 "$(disk_of "$1")" | tail -1 | tr -d ' '; }

: > "$DIR/rounds.jsonl"
BACK=${BACK:-10}; HOLD=${HOLD:-60}; HANG=${HANG:-8}
case "$SCENARIO" in
  failovers)
    for k in $(seq 1 "$ROUNDS"); do
      P=$(holder); [ -n "$P" ] || fail "round $k: nobody holds db"
      T=$(now_ns); event "round $k: host $P (primary) dies"
      kill_host "$P"
      wait_for 60 "round $k: a new primary" new_primary "$P"
      Q=$(new_primary "$P"); PROMOTED=$(secs_since "$T")
      event "round $k: $Q serves as primary"
      while [ "$(now_ns)" -lt $(( T + BACK * 1000000000 )) ]; do sleep 0.1; done
      back_host "$P"; B=$(now_ns); event "round $k: host $P back"
      wait_for 120 "round $k: $P streaming from $Q" streams "$P"
      REJOIN=$(secs_since "$B"); event "round $k: $P streams from $Q"
      round "{\"round\": $k, \"t0_ns\": $T, \"killed\": \"$P\", \"new_primary\": \"$Q\", \"new_primary_serving_s\": $PROMOTED, \"back_to_streaming_s\": $REJOIN, \"direct_write_on_returned\": \"$(direct_write "$P")\"}"
      sleep 3
    done ;;
  lagging)
    for k in $(seq 1 "$ROUNDS"); do
      P=$(holder); [ -n "$P" ] || fail "round $k: nobody holds db"
      [ "$P" != C ] || fail "round $k: C, the lagging standby, holds db"
      U=$(others "$P" | grep -v C)
      hold_c_back "$P"
      wait_for 30 "round $k: $U within 1 MB" within_1mb "$U"
      LAG=$(replay_behind "$P" C)
      sleep 1   # a renewal carries P's position to the control plane
      C_PROMOTIONS=$(promoted_events C)
      T=$(now_ns); event "round $k: host $P dies; C is $LAG bytes behind"
      kill_host "$P"
      wait_for 60 "round $k: a new primary" new_primary "$P"
      Q=$(new_primary "$P"); PROMOTED=$(secs_since "$T")
      sleep 2
      C_AFTER=$(promoted_events C)
      back_host "$P"; wait_for 120 "round $k: $P streaming" streams "$P"
      release_c; wait_for 60 "round $k: C caught up" caught_up "$Q" C
      round "{\"round\": $k, \"t0_ns\": $T, \"killed\": \"$P\", \"up_to_date\": \"$U\", \"c_behind_bytes\": $LAG, \"new_primary\": \"$Q\", \"new_primary_serving_s\": $PROMOTED, \"c_promoted\": $([ "$C_AFTER" = "$C_PROMOTIONS" ] && echo false || echo true)}"
      sleep 2
    done
    # The up-to-date standby's PostgreSQL hangs too: nobody may be promoted.
    P=$(holder); U=$(others "$P" | grep -v C)
    hold_c_back "$P"; wait_for 30 "$U within 1 MB" within_1mb "$U"; sleep 1
    upid_runs() { UPID=$(head -1 "$DIR/pg/${U,,}/postmaster.pid" 2>/dev/null) && kill -0 "$UPID" 2>/dev/null; }
    wait_for 30 "$U's postmaster running" upid_runs
    upid_runs
    T=$(now_ns); event "last round: host $P dies and $U's PostgreSQL (pid $UPID) hangs (SIGSTOP)"
    kill -STOP "$UPID"; kill_host "$P"
    NOBODY=true
    end=$(( $(now_ns) + 20000000000 ))
    while [ "$(now_ns)" -lt "$end" ]; do primary_is C && NOBODY=false; sleep 0.5; done
    SAID=$(not_eligible_said && echo true || echo false)
    kill -CONT "$UPID" 2>/dev/null || fail "$U's hung PostgreSQL was killed (fenced) while the primary was dead: nobody left to promote"
    wait_for 60 "$U promoted once its PostgreSQL thawed" primary_is "$U"
    THAWED=$(secs_since "$T")
    back_host "$P"; wait_for 120 "$P streaming" streams "$P"; release_c
    round "{\"round\": \"both-down\", \"t0_ns\": $T, \"killed\": \"$P\", \"hung\": \"$U\", \"nobody_promoted_for_20_s\": $NOBODY, \"c_said_not_eligible\": $SAID, \"up_to_date_promoted_after_s\": $THAWED}" ;;
  switchover)
    for k in $(seq 1 "$ROUNDS"); do
      P=$(holder); [ -n "$P" ] || fail "round $k: nobody holds db"
      U=$(others "$P" | grep -v C); [ "$P" != C ] || U=A
      wait_for 30 "round $k: $U streaming" streams "$U"
      T=$(now_ns); event "round $k: switchover $P -> $U asked of C's agent"
      code=$(api_post C /v1/roles/db/switchover "{\"to\": \"host-$U\"}")
      [ "$code" = 202 ] || fail "round $k: switchover answered $code: $(cat "$DIR/post.out")"
      wait_for 60 "round $k: $U primary" primary_is "$U"
      SERVING=$(secs_since "$T"); event "round $k: $U serves as primary"
      wait_for 120 "round $k: $P streaming from $U" streams "$P"
      round "{\"round\": $k, \"t0_ns\": $T, \"from\": \"$P\", \"to\": \"$U\", \"new_primary_serving_s\": $SERVING, \"old_primary_streaming_s\": $(secs_since "$T")}"
      sleep 3
    done
    P=$(holder); hold_c_back "$P"; sleep 1
    T=$(now_ns); event "switchover $P -> C (held back) asked of C's agent"
    code=$(api_post C /v1/roles/db/switchover '{"to": "host-C"}')
    REASON=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("error",""))' "$DIR/post.out" 2>/dev/null || cat "$DIR/post.out")
    sleep 3
    AFTER=$(holder); release_c
    round "{\"round\": \"ineligible\", \"t0_ns\": $T, \"to\": \"C\", \"status\": $code, \"reason\": $(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$REASON"), \"holder_before\": \"$P\", \"holder_after\": \"$AFTER\"}" ;;
  standby-hang)
    for k in $(seq 1 "$ROUNDS"); do
      P=$(holder); [ -n "$P" ] || fail "round $k: nobody holds db"
      S=$(others "$P" | head -1)
      wait_for 60 "round $k: $S streaming" streams "$S"
      wait_for 30 "round $k: $S in $P's quorum" in_quorum "$P" "$S"
      T=$(now_ns); event "round $k: every PostgreSQL process of $S (standby) hangs (SIGSTOP)"
      pg_signal "$S" STOP
      sleep "$HANG"
      pg_signal "$S" CONT; event "round $k: $S's PostgreSQL thawed"
      wait_for 120 "round $k: $S streaming again" streams "$S"
      round "{\"round\": $k, \"t0_ns\": $T, \"primary\": \"$P\", \"hung\": \"$S\", \"hung_for_s\": $HANG, \"holder_after\": \"$(holder)\", \"back_to_streaming_s\": $(secs_since "$T")}"
      sleep 3
    done ;;
  primary-hang|disk-full|disk-stall)
    for k in $(seq 1 "$ROUNDS"); do
      P=$(holder); [ -n "$P" ] || fail "round $k: nobody holds db"
      for h in $(others "$P"); do wait_for 120 "round $k: $h streaming" streams "$h"; done
      T=$(now_ns)
      case "$SCENARIO" in
        primary-hang) event "round $k: every PostgreSQL process of $P (primary) hangs (SIGSTOP)"; pg_signal "$P" STOP ;;
        disk-full)
          FREE=$(avail "$P")
          event "round $k: $P's disk filled ($FREE bytes free, 32 MB left)"
          fallocate -l $(( FREE - (32 << 20) )) "$(disk_of "$P")/ballast" ;;
        disk-stall) event "round $k: $P's disk frozen (fsfreeze)"; fsfreeze -f "$(disk_of "$P")" ;;
      esac
      FROZEN_PROMOTED=n/a
      if [ "$SCENARIO" = disk-stall ]; then
        end=$(( T + 20000000000 ))
        until new_primary "$P" >/dev/null 2>&1 || [ "$(now_ns)" -ge "$end" ]; do sleep 0.1; done
        new_primary "$P" >/dev/null 2>&1 && FROZEN_PROMOTED=true || FROZEN_PROMOTED=false
      fi
      wait_for 60 "round $k: a new primary" new_primary "$P"
      Q=$(new_primary "$P"); PROMOTED=$(secs_since "$T"); event "round $k: $Q serves as primary"
      case "$SCENARIO" in
        primary-hang) ;;   # its agent fences (kills) it: nothing to undo
        disk-full) rm -f "$(disk_of "$P")/ballast" ;;
        disk-stall) fsfreeze -u "$(disk_of "$P")" ;;
      esac
      B=$(now_ns); event "round $k: $P's fault undone"
      wait_for 120 "round $k: $P streaming from $Q" streams "$P"
      round "{\"round\": $k, \"t0_ns\": $T, \"fault\": \"$SCENARIO\", \"old_primary\": \"$P\", \"new_primary\": \"$Q\", \"new_primary_serving_s\": $PROMOTED, \"promoted_while_frozen\": \"$FROZEN_PROMOTED\", \"back_to_streaming_s\": $(secs_since "$B"), \"direct_write_on_old\": \"$(direct_write "$P")\"}"
      sleep 3
    done ;;
  pause)
    P=$(holder); [ -n "$P" ] || fail "nobody holds db"
    code=$(api_post C /v1/roles/db/pause '{}'); [ "$code" = 200 ] || fail "pause answered $code"
    T=$(now_ns); event "db paused; host $P (primary) dies"
    kill_host "$P"
    PROMOTED_WHILE_PAUSED=false
    end=$(( T + HOLD * 1000000000 ))
    while [ "$(now_ns)" -lt "$end" ]; do new_primary "$P" >/dev/null && PROMOTED_WHILE_PAUSED=true; sleep 0.5; done
    R=$(now_ns); code=$(api_post C /v1/roles/db/resume '{}'); [ "$code" = 200 ] || fail "resume answered $code"
    event "db resumed"
    wait_for 60 "a new primary after resume" new_primary "$P"
    Q=$(new_primary "$P"); AFTER_RESUME=$(secs_since "$R")
    back_host "$P"; wait_for 120 "$P streaming" streams "$P"
    round "{\"round\": 1, \"t0_ns\": $T, \"killed\": \"$P\", \"paused_for_s\": $HOLD, \"promoted_while_paused\": $PROMOTED_WHILE_PAUSED, \"new_primary\": \"$Q\", \"new_primary_serving_after_resume_s\": $AFTER_RESUME}" ;;
esac

stop_load
FINAL=$(holder)
psql_on "$FINAL" -Atc "SELECT id FROM logins" > "$DIR/committed.txt"
python3 - "$DIR/attempts.csv" "$DIR/committed.txt" "$DIR/rounds.jsonl" "$SCENARIO" "$RATE" "$STRICT" > "$DIR/report.txt" <<'EOF'
import json, sys
attempts_path, committed_path, rounds_path, scenario, rate, strict = sys.argv[1:]
att = []
with open(attempts_path) as f:
    next(f)
    for line in f:
        seq, sent, good, status, ok, lat, id_ = line.rstrip("\n").split(",")
        att.append((int(sent), ok == "1", int(lat), int(id_) if id_ else None))
att.sort()
committed = set(int(x) for x in open(committed_path).read().split())
rounds = [json.loads(l) for l in open(rounds_path)]
timed = [r for r in rounds if "t0_ns" in r]
ends = [r["t0_ns"] for r in timed[1:]] + [att[-1][0] + 1 if att else 0]
for r, end in zip(timed, ends):
    t0 = r["t0_ns"]
    fails = [a for a in att if not a[1] and t0 <= a[0] < end]
    if not fails:
        r["auth_downtime_s"] = 0.0
        continue
    first, last = fails[0][0], fails[-1][0]
    before = max((a[0] + a[2] * 1000 for a in att if a[1] and a[0] < first), default=None)
    after = min((a[0] + a[2] * 1000 for a in att if a[1] and a[0] > last), default=None)
    r["auth_downtime_s"] = round((after - before) / 1e9, 3) if before and after else None
ok_ids = [a[3] for a in att if a[1] and a[3] is not None]
lost = sum(1 for i in ok_ids if i not in committed)
def pct(v, p):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    return v[min(len(v) - 1, max(0, int(-(-len(v) * p // 1)) - 1))]
down = [r.get("auth_downtime_s") for r in timed if isinstance(r["round"], int)]
summary = {"scenario": scenario, "strict": strict == "true", "rate": int(rate), "rounds": len(rounds), "attempts": len(att),
           "committed_logins": len(ok_ids), "committed_logins_lost": lost,
           "auth_downtime_p50_s": pct(down, 0.5), "auth_downtime_p99_s": pct(down, 0.99),
           "auth_downtime_max_s": max((d for d in down if d is not None), default=None)}
stream = [r.get("back_to_streaming_s") for r in rounds if "back_to_streaming_s" in r]
if stream:
    summary["back_to_streaming_p50_s"] = pct(stream, 0.5)
    summary["back_to_streaming_p99_s"] = pct(stream, 0.99)
    summary["direct_writes_accepted"] = sum(1 for r in rounds if r.get("direct_write_on_returned") == "accepted")
serving = [r.get("new_primary_serving_s") for r in rounds if "new_primary_serving_s" in r]
if serving:
    summary["new_primary_serving_p50_s"] = pct(serving, 0.5)
if scenario == "lagging":
    summary["c_promoted_rounds"] = sum(1 for r in rounds if r.get("c_promoted"))
    summary["up_to_date_promoted_rounds"] = sum(1 for r in rounds if isinstance(r["round"], int) and r.get("new_primary") == r.get("up_to_date"))
for r in rounds:
    print(json.dumps(r))
print("RESULT " + json.dumps(summary))
EOF
report_and_save "$DIR/rounds.jsonl"
if [ -n "$SAVE" ]; then
  for f in "$DIR"/agent-*.log; do gzip -c "$f" > "$SAVE/$(basename "$f").gz"; done
fi
