#!/usr/bin/env bash
# hale's first incident with real parts. Three hosts, each a network namespace
# with a hale agent, and a fourth for the clients:
#
#   host A  PostgreSQL 15 primary (role `db`, priority 100); a Sentry (half-dead
#           by default: accepts connections, never answers) = the relay's primary
#   host B  PostgreSQL 15 standby (priority 50)
#   host C  PostgreSQL 15 standby (priority 10); the relay (its agent's) and the
#           relay's standby Sentry (counts events). A acknowledges a commit once B
#           *or* C has flushed it (quorum commit: ANY 1 (B, C))
#   host L  HAProxy in front of PostgreSQL, following GET /v1/roles/db/primary on
#           the three agents; the auth service (hale-demo-auth serve: axum +
#           tokio-postgres, failures to the `sentry` crate whose DSN is C's
#           relay); the load generator (200 logins/s, 1 in 20 with a wrong secret)
#
# PostgreSQL runs under hale ([role.postgres]): hale promotes and fences it (its hooks are
# `hale postgres promote|fence`), clones B and C from A (their data directories hold only their
# own settings), keeps quorum commit over the streaming standbys (none streaming: A commits
# alone, unless --strict), checks that each server does its job (a primary commits a write, every
# 250 ms; fails over after 1 s of failing), grants the role only to a standby within
# max_lag_on_failover (1 MB), the furthest synchronous copy first, and after the fault
# brings the old primary back as a streaming replica of the new one (pg_rewind, or a fresh clone).
# Every TCP connection to PostgreSQL authenticates with a password (SCRAM, pg_hba.conf): hale
# reads it from its password_file and hands pg_basebackup, pg_rewind and the standbys only the
# path of a 0600 passfile; the auth service reads it from the same file (--db-password-file).
#
# Then a fault, and a timeline with the figures. As root:
#
#   examples/postgres-failover/run.sh                         # host A dies (default)
#   examples/postgres-failover/run.sh --fault pg-hang         # A's postmaster SIGSTOPped
#   examples/postgres-failover/run.sh --fault partition       # A cut off by nftables
#   examples/postgres-failover/run.sh --fault sentry-half-dead  # only Sentry goes half-dead
#   --sentry healthy     A's Sentry answers (the baseline for auth latency)
#   --transport sdk      the auth service reports through the SDK's own transport (one
#                        request at a time, a queue of 30) instead of a concurrent one
#   --pre S --after S    load before the fault (8 s) and after the new primary serves (15 s)
#   --rate N             logins per second (200)
#   --quiet              print only the RESULT line;  --keep  keep the work directory
#   --save DIR           copy the run's raw outputs (report, events, attempts) to DIR
#
# Day two (day-two.sh: rounds on one cluster, a JSON line per round, per-round auth downtime):
#   --scenario failovers --rounds 20 [--back 10]   kill the primary's host, back BACK s later
#   --scenario lagging --rounds 10                 C held 16 MB behind: never promoted
#   --scenario switchover --rounds 10              hale roles switchover, then one refused
#   --scenario pause [--hold 60]                   paused: no promotion; resumed: failover
#   --scenario standby-hang --rounds 5             every PostgreSQL process of a standby stopped
#   --scenario primary-hang --rounds 5             every PostgreSQL process of the primary stopped
#   --scenario disk-full --rounds 5                the primary's disk filled to 32 MB free
#   --scenario disk-stall --rounds 5               the primary's disk frozen (fsfreeze)
#   --strict                                       strict durability: A never commits alone
#   (disk-full and disk-stall put each host's data directory on a 1 GB loop-mounted ext4)
#
# Needs: root, ip, nft, runuser, curl, PostgreSQL 15 server binaries (postgres,
# initdb, pg_ctl, pg_basebackup, pg_rewind, pg_isready, psql; Debian: postgresql-15) and
# haproxy; and `cargo build --release -p hale -p hale-demo-auth`.
# Exit status: 0 when the run completed (the figures say how it went), 1 when
# it could not, 2 for bad usage, 3 when something it needs is missing.
# Everything is cleaned up on exit: processes by namespace, then the namespaces.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HALE=${HALE:-$ROOT/target/release/hale}
DEMO=${DEMO:-$ROOT/target/release/hale-demo-auth}
FAULT=host-death; SENTRY=half-dead; TRANSPORT=concurrent; PRE=8; AFTER=15; RATE=200; QUIET=0; KEEP=0; SAVE=""
SCENARIO=""; ROUNDS=1; BACK=10; HOLD=60; STRICT=false
while [ $# -gt 0 ]; do
  case "$1" in
    --fault) FAULT=$2; shift 2 ;;
    --sentry) SENTRY=$2; shift 2 ;;
    --transport) TRANSPORT=$2; shift 2 ;;
    --pre) PRE=$2; shift 2 ;;
    --after) AFTER=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --quiet) QUIET=1; shift ;;
    --keep) KEEP=1; shift ;;
    --save) SAVE=$2; shift 2 ;;
    --scenario) SCENARIO=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --back) BACK=$2; shift 2 ;;
    --hold) HOLD=$2; shift 2 ;;
    --strict) STRICT=true; shift ;;
    -h|--help) sed -n '2,46p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$FAULT" in host-death|pg-hang|partition|sentry-half-dead) ;;
  *) echo "--fault is host-death, pg-hang, partition or sentry-half-dead" >&2; exit 2 ;; esac
case "$SENTRY" in half-dead|healthy) ;; *) echo "--sentry is half-dead or healthy" >&2; exit 2 ;; esac
case "$SCENARIO" in ""|failovers|lagging|switchover|pause|standby-hang|primary-hang|disk-full|disk-stall) ;;
  *) echo "--scenario is failovers, lagging, switchover, pause, standby-hang, primary-hang, disk-full or disk-stall" >&2; exit 2 ;; esac
DISKS=false
case "$SCENARIO" in disk-*) DISKS=true ;; esac
[ "$FAULT" = sentry-half-dead ] && SENTRY=healthy   # healthy until the fault

[ "$(id -u)" = 0 ] || { echo "run as root: the three hosts are network namespaces (ip netns) with nftables" >&2; exit 3; }
PGBIN=${PGBIN:-}
if [ -z "$PGBIN" ]; then
  if [ -x /usr/lib/postgresql/15/bin/postgres ]; then PGBIN=/usr/lib/postgresql/15/bin
  elif command -v postgres >/dev/null 2>&1; then PGBIN=$(dirname "$(command -v postgres)")
  else PGBIN=/usr/lib/postgresql/15/bin; fi
fi
missing=()
for t in postgres initdb pg_ctl pg_basebackup pg_rewind pg_isready psql; do [ -x "$PGBIN/$t" ] || missing+=("$t"); done
for t in haproxy ip nft runuser curl; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
if [ "$DISKS" = true ]; then
  for t in losetup mkfs.ext4 fsfreeze fallocate; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing: ${missing[*]} (looked for PostgreSQL in $PGBIN; Debian: apt-get install postgresql-15 haproxy iproute2 nftables util-linux curl)" >&2
  exit 3
fi
for b in "$HALE" "$DEMO"; do
  [ -x "$b" ] || { echo "missing: $b (cargo build --release -p hale -p hale-demo-auth)" >&2; exit 3; }
done
id postgres >/dev/null 2>&1 || { echo "missing: a 'postgres' user to run PostgreSQL as (it refuses root)" >&2; exit 3; }

say() { [ "$QUIET" = 1 ] || echo "$@"; }
now_ns() { date +%s%N; }
# Three servers, their WAL (wal_keep_size) and clones: with less room, a run fails somewhere
# in the middle (hale's check fails a server below min_free_bytes, pg_basebackup runs out).
free_kb=$(df -Pk /tmp | awk 'NR == 2 { print $4 }')
if [ "${free_kb:-0}" -lt $((1024 * 1024)) ]; then
  echo "FAILED: only $((${free_kb:-0} / 1024)) MB free in /tmp; this demo needs 1 GB" >&2
  exit 1
fi
DIR=$(mktemp -d /tmp/hale-pg.XXXXXX)
chmod 755 "$DIR"
EV=$DIR/events.log
: > "$EV"; chmod 666 "$EV"
event() { echo "$(now_ns) $*" >> "$EV"; }

# --- hosts: namespaces on a bridge -----------------------------------------------------------
TAG=hpg$$
BR=$TAG-br; NS_A=$TAG-a; NS_B=$TAG-b; NS_C=$TAG-c; NS_L=$TAG-l
SUB=10.214.$(( $$ % 200 + 20 ))
IP_A=$SUB.1; IP_B=$SUB.2; IP_C=$SUB.3; IP_L=$SUB.4
cleanup() {
  local ns p
  # Kill rounds until the namespaces are empty (a process may fork while it dies), then
  # delete them: only then is nothing left writing into the work directory.
  for _ in $(seq 1 50); do
    local left=0
    for ns in "$NS_A" "$NS_B" "$NS_C" "$NS_L" "$BR"; do
      for p in $(ip netns pids "$ns" 2>/dev/null); do left=1; kill -CONT "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true; done
    done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  for ns in "$NS_A" "$NS_B" "$NS_C" "$NS_L" "$BR"; do ip netns del "$ns" 2>/dev/null || true; done
  for h in a b c; do
    if mountpoint -q "$DIR/pg/$h" 2>/dev/null; then
      fsfreeze -u "$DIR/pg/$h" 2>/dev/null || true
      umount -l "$DIR/pg/$h" 2>/dev/null || true
    fi
  done
  if [ "$KEEP" = 1 ]; then echo "kept $DIR" >&2; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
as_pg() { local ns=$1; shift; ip netns exec "$ns" runuser -u postgres -- "$@"; }
link_up() { # host-namespace port-name ip
  ip -n "$BR" link add "$2" type veth peer name eth0 netns "$1"
  ip -n "$BR" link set "$2" master br0 up
  ip -n "$1" addr add "$3/24" dev eth0
  ip -n "$1" link set eth0 up
}
ip netns add "$BR"
ip -n "$BR" link add br0 type bridge
ip -n "$BR" link set br0 up
for h in a b c l; do
  ns=$TAG-$h
  ip netns add "$ns"
  ip -n "$ns" link set lo up
done
link_up "$NS_A" pa "$IP_A"; link_up "$NS_B" pb "$IP_B"; link_up "$NS_C" pc "$IP_C"; link_up "$NS_L" pl "$IP_L"

fail() { echo "FAILED: $*" >&2; for f in "$DIR"/*.log "$DIR"/pg/*.log; do echo "--- $f" >&2; tail -15 "$f" >&2; done; exit 1; }
# wait_for SECS WHAT CMD...: polls CMD every 100 ms until it succeeds, or fails after SECS.
wait_for() {
  local secs=$1 what=$2; shift 2
  local end=$(( $(date +%s%N) + secs * 1000000000 ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s%N)" -lt "$end" ] || fail "$what (waited ${secs} s)"
    sleep 0.1
  done
}

# --- PostgreSQL: A's primary from initdb; B's and C's data directories hold only their own ---
# settings, and hale clones them from the primary ([role.postgres]: pg_basebackup) -----------
install -d -o postgres -g postgres "$DIR/pg" "$DIR/sock-a" "$DIR/sock-b" "$DIR/sock-c"
PGA=$DIR/pg/a; PGB=$DIR/pg/b; PGC=$DIR/pg/c
# Every TCP connection (hale's sessions to the holder, pg_basebackup, pg_rewind, streaming, the
# auth service) authenticates with postgres's password (SCRAM), read from this 0600 file: hale's
# [role.postgres] password_file. Unix sockets stay trusted (this script's own psql).
PGPASSWORD_FILE=$DIR/pg/password
( umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$PGPASSWORD_FILE" )
chown postgres: "$PGPASSWORD_FILE"
as_pg "$NS_A" "$PGBIN/initdb" -D "$PGA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
  --pwfile="$PGPASSWORD_FILE" -E UTF8 >"$DIR/initdb.log" 2>&1 || fail "initdb"
DEFAULTS=$(cat "$PGA/postgresql.conf")
# Host $1's disk: with DISKS, its data directory is a 1 GB ext4 of its own (a sparse file,
# loop-mounted), which disk-full fills and disk-stall freezes.
disk_of() { echo "$DIR/pg/${1,,}"; }
mount_disks() {
  local h
  for h in a b c; do
    truncate -s 1G "$DIR/disk-$h.img"
    mkfs.ext4 -q "$DIR/disk-$h.img"
    install -d "$DIR/pg/$h"
    mount -o loop "$DIR/disk-$h.img" "$DIR/pg/$h"
    rmdir "$DIR/pg/$h/lost+found"
  done
}
if [ "$DISKS" = true ]; then
  # A's data directory must be empty for initdb: mounted only now, and initdb again.
  mount_disks
  chown postgres: "$PGA"; chmod 700 "$PGA"
  as_pg "$NS_A" "$PGBIN/initdb" -D "$PGA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --pwfile="$PGPASSWORD_FILE" -E UTF8 >"$DIR/initdb.log" 2>&1 || fail "initdb on A's disk"
fi
for h in a b c; do
  d=$DIR/pg/$h; ip=IP_${h^^}
  install -d -m 700 -o postgres -g postgres "$d"
  # Its own address only: on C, HAProxy listens on 127.0.0.1:5432.
  { echo "$DEFAULTS"; cat <<EOF; } > "$d/postgresql.conf"
listen_addresses = '${!ip}'
port = 5432
unix_socket_directories = '$DIR/sock-$h'
wal_level = replica
wal_log_hints = on
max_wal_senders = 10
max_replication_slots = 10
wal_keep_size = '256MB'
hot_standby = on
synchronous_commit = on
shared_buffers = 32MB
max_connections = 100
# In the data directory, not /dev/shm: the host this demo kills would
# leave its segments there until reboot.
dynamic_shared_memory_type = mmap
EOF
  cat > "$d/pg_hba.conf" <<EOF
local all all trust
host all all $SUB.0/24 scram-sha-256
host replication all $SUB.0/24 scram-sha-256
EOF
  chown postgres: "$d/postgresql.conf" "$d/pg_hba.conf"
done
as_pg "$NS_A" "$PGBIN/pg_ctl" -D "$PGA" -l "$DIR/pg/postgres-a.log" -w start >/dev/null || fail "starting PostgreSQL on A"
psql_a() { as_pg "$NS_A" "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DIR/sock-a" -d postgres "$@"; }
psql_on() { local h=${1,,}; shift; as_pg "$TAG-$h" "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DIR/sock-$h" -d postgres "$@"; }
# A write straight to host $1's PostgreSQL, past HAProxy: accepted, or refused(<reason>).
direct_write() {
  local out
  if out=$(psql_on "$1" -c "INSERT INTO logins (name) VALUES ('direct-write')" 2>&1); then echo accepted
  else echo "refused($(echo "$out" | sed -n 's/^ERROR: *//p' | head -1 | tr ' ' '_'))"; fi
}
psql_a -c "CREATE TABLE users (name text PRIMARY KEY, secret text NOT NULL);
  INSERT INTO users SELECT 'u' || i, 's' || i FROM generate_series(0, 999) i;
  CREATE TABLE logins (id bigserial PRIMARY KEY, name text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());" \
  >/dev/null || fail "schema on A"
# Synchronous replication is hale's ([role.postgres] synchronous, the default): the primary
# waits for one flush among the streaming standbys the lease table names, ANY 1 (B, C).
sync_state() { psql_a -Atc "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$1'"; }
is_sync() { [ "$(sync_state host-B)" = quorum ]; }

# --- Sentries: A's (primary upstream of the relay) and C's standby ----------------------------
setsid ip netns exec "$NS_A" "$DEMO" sink --listen "$IP_A:9000" --control "$IP_A:9100" --mode \
  "$([ "$SENTRY" = healthy ] && echo up || echo half-dead)" > "$DIR/sentry-a.log" 2>&1 & disown
setsid ip netns exec "$NS_C" "$DEMO" sink --listen 127.0.0.1:9001 --control 127.0.0.1:9101 --mode up \
  > "$DIR/sentry-c.log" 2>&1 & disown

# --- agents ---------------------------------------------------------------------------------
KEY=$("$HALE" keygen)
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
SERVERS="\"1=$IP_A:7948\", \"2=$IP_B:7948\", \"3=$IP_C:7948\""
agent_conf() { # name ip id seeds...
  local name=$1 ip=$2 id=$3
  cat <<EOF
[agent]
name = "host-$name"
bind = "$ip:7946"
http = "$ip:7947"
api_token = "$TOKEN"
seeds = ["$4:7946", "$5:7946"]
[cluster]
name = "pg-demo"
keys = ["$KEY"]
[control]
id = $id
bind = "$ip:7948"
servers = [$SERVERS]
bootstrap = $([ "$id" = 1 ] && echo true || echo false)
data_dir = "$DIR/control-$name"
EOF
}
db_conf() { # host-letter priority
  cat <<EOF
[[service]]
name = "postgres"
essential = true
# The server does its job: a primary commits a write, a replica answers, both have disk.
[[service.check]]
postgres = "db"
interval = "250ms"
timeout = "500ms"
[[role]]
name = "db"
service = "postgres"
priority = $2
hook_timeout = "40s"
fail_after = "1s"
# hale promotes, fences and rejoins this PostgreSQL itself (hale postgres promote|fence).
[role.postgres]
data_dir = "$DIR/pg/$1"
bin_dir = "$PGBIN"
host = "$DIR/sock-$1"
port = 5432
log_file = "$DIR/pg/postgres-$1.log"
strict = $STRICT
password_file = "$PGPASSWORD_FILE"
EOF
}
{ agent_conf A "$IP_A" 1 "$IP_B" "$IP_C"; db_conf a 100; } > "$DIR/A.toml"
{ agent_conf B "$IP_B" 2 "$IP_A" "$IP_C"; db_conf b 50; } > "$DIR/B.toml"
{ agent_conf C "$IP_C" 3 "$IP_A" "$IP_B"; db_conf c 10; cat <<EOF; } > "$DIR/C.toml"
[relay]
primary = { dsn = "http://public@$IP_A:9000/1", member = "host-A" }
standby = { dsn = "http://public@127.0.0.1:9001/1" }
EOF
start_agent() { HALE_LOG=warn setsid ip netns exec "$1" "$HALE" agent -c "$DIR/$2.toml" > "$DIR/agent-$2.log" 2>&1 & disown; }
http_ok() { in_ns "$NS_L" curl -fsS -o /dev/null -m 1 "$1"; }
# A and B first (two of the three control-plane servers): A's running primary takes db, and
# hale clones B from it; B, once the lease table names it, is in the quorum. Then C.
start_agent "$NS_A" A; start_agent "$NS_B" B
wait_for 60 "host A holding db (GET /v1/roles/db/primary on A)" http_ok "http://$IP_A:7947/v1/roles/db/primary"
wait_for 90 "host B cloned by hale and streaming (GET /v1/roles/db/replica on B)" http_ok "http://$IP_B:7947/v1/roles/db/replica"
wait_for 30 "B in A's synchronous quorum" is_sync
start_agent "$NS_C" C
wait_for 90 "host C cloned by hale and streaming (GET /v1/roles/db/replica on C)" http_ok "http://$IP_C:7947/v1/roles/db/replica"
say "Agents up: A holds db (epoch $(in_ns "$NS_L" curl -fsS "http://$IP_A:7947/v1/roles/db/primary" | sed 's/.*"epoch":\([0-9]*\).*/\1/')); B and C stream from it (quorum commit: ANY 1 of them)."

# --- HAProxy, the auth service and the load on L ----------------------------------------------
cat > "$DIR/haproxy.cfg" <<EOF
global
  maxconn 4000
defaults
  mode tcp
  # A refused connection is retried on another server (redispatch) after min(timeout connect,
  # 1 s): the old primary's refused connections wait 250 ms, not a second, per retry.
  timeout connect 250ms
  retries 3
  option redispatch 1
  timeout client 60s
  timeout server 60s
  timeout check 1s
listen postgres
  bind 127.0.0.1:5432
  # Patroni's convention: the primary is whichever server's agent answers 200.
  option httpchk GET /v1/roles/db/primary
  http-check expect status 200
  # Every 500 ms; 100 ms apart once a check fails (fastinter: the old primary leaves rotation
  # 0.1 s after its first failed check) and while a server is down (downinter: the new primary
  # takes traffic within 0.1 s of its agent saying so).
  default-server inter 500ms fastinter 100ms downinter 100ms fall 2 rise 1 on-marked-down shutdown-sessions
  server a $IP_A:5432 check port 7947
  server b $IP_B:5432 check port 7947
  server c $IP_C:5432 check port 7947
EOF
# HAProxy says when it marks a server up or down (on stderr): into the event log, timed.
setsid ip netns exec "$NS_L" bash -c "haproxy -db -f '$DIR/haproxy.cfg' 2>&1 | while IFS= read -r l; do
  case \"\$l\" in *Server*) echo \"\$(date +%s%N) haproxy: \${l#*: }\" >> '$EV' ;; esac; echo \"\$l\"; done" \
  > "$DIR/haproxy.log" 2>&1 & disown
# HAProxy counts a server as up until its first check: no traffic before B is marked down.
b_down() { grep -q "Server postgres/b is DOWN" "$EV"; }
wait_for 10 "HAProxy's first check of B (503: not the primary)" b_down
setsid ip netns exec "$NS_L" "$DEMO" serve --listen 127.0.0.1:8080 \
  --db "host=127.0.0.1 port=5432 user=postgres dbname=postgres" --db-password-file "$PGPASSWORD_FILE" --dsn "http://public@$IP_C:7947/1" --transport "$TRANSPORT" \
  > "$DIR/auth.log" 2>&1 & disown
login_ok() { in_ns "$NS_L" curl -fsS -m 2 -H 'Content-Type: application/json' -d '{"user":"u1","secret":"s1"}' http://127.0.0.1:8080/login; }
wait_for 30 "a login through HAProxy to A" login_ok
setsid ip netns exec "$NS_L" "$DEMO" load --url http://127.0.0.1:8080 --rate "$RATE" \
  --stop-file "$DIR/stop" --out "$DIR/attempts.csv" > "$DIR/load.log" 2>&1 &
LOAD_PID=$!
stop_load() {
  touch "$DIR/stop"
  for _ in $(seq 1 150); do kill -0 "$LOAD_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$LOAD_PID" 2>/dev/null && fail "the load generator did not stop"
  [ -s "$DIR/attempts.csv" ] || fail "the load generator wrote no attempts"
}
# Prints the report (or its RESULT line) and, with --save, copies it, the event log, the
# attempts, the committed ids and the files named to SAVE.
report_and_save() {
  if [ "$QUIET" = 1 ]; then grep '^RESULT ' "$DIR/report.txt"; else cat "$DIR/report.txt"; fi
  [ -n "$SAVE" ] || return 0
  mkdir -p "$SAVE"
  cp "$DIR/report.txt" "$DIR/events.log" "$DIR/haproxy.cfg" "$@" "$SAVE/"
  gzip -c "$DIR/attempts.csv" > "$SAVE/attempts.csv.gz"
  gzip -c "$DIR/committed.txt" > "$SAVE/committed.txt.gz"
}
say "Load: $RATE logins/s through HAProxy; Sentry on A: $SENTRY. Steady state for $PRE s..."
sleep "$PRE"
if [ -n "$SCENARIO" ]; then
  # shellcheck source=day-two.sh
  . "$(dirname "$0")/day-two.sh"
  exit 0
fi

# --- the fault -------------------------------------------------------------------------------
count() { in_ns "$NS_C" curl -fsS -m 2 "$1" | sed 's/.*"event_ids":\([0-9]*\).*/\1/'; }
A_RECEIVED_AT_FAULT=0
[ "$SENTRY" = healthy ] && A_RECEIVED_AT_FAULT=$(count "http://$IP_A:9100/count")
T0=$(now_ns)
NEW=B
case "$FAULT" in
  host-death)
    event "fault: host A dies (every process in its namespace killed, then its link)"
    for p in $(ip netns pids "$NS_A"); do kill -KILL "$p" 2>/dev/null || true; done
    ip -n "$BR" link del pa ;;
  pg-hang)
    event "fault: A's postmaster hangs (SIGSTOP)"
    kill -STOP "$(head -1 "$PGA/postmaster.pid")" ;;
  partition)
    event "fault: A cut off from B and C (nftables drops everything but loopback)"
    in_ns "$NS_A" nft -f - <<EOF
table inet hpg_partition {
  chain input { type filter hook input priority 0; policy drop; iif "lo" accept; }
  chain output { type filter hook output priority 0; policy drop; oif "lo" accept; }
}
EOF
    ;;
  sentry-half-dead)
    NEW=A
    event "fault: A's Sentry goes half-dead (accepts connections, never answers)"
    in_ns "$NS_C" curl -fsS -m 2 -X POST "http://$IP_A:9100/mode/half-dead" ;;
esac
# The new primary is B or C: the grantor takes the furthest synchronous copy first (quorum
# commit: only it surely holds every acknowledged login), then priority (B's is higher).
PROMOTED=A
promoted() {
  local h ip
  for h in B C; do
    ip=IP_$h
    if http_ok "http://${!ip}:7947/v1/roles/db/primary"; then echo "$h" > "$DIR/promoted"; return 0; fi
  done
  return 1
}
if [ "$NEW" = B ]; then
  wait_for 60 "B or C promoted and serving as primary" promoted
  PROMOTED=$(cat "$DIR/promoted")
  event "hale: $PROMOTED's agent answers 200 on /v1/roles/db/primary"
fi
sleep "$AFTER"
stop_load

# --- what was lost, what the old primary does, what Sentry got ---------------------------------
psql_on "$PROMOTED" -Atc "SELECT id FROM logins" > "$DIR/committed.txt"
OLD_WRITE=n/a; OLD_ROWS=n/a; KEPT=n/a; REJOIN_S=n/a
PROMOTED_IP=IP_$PROMOTED
if [ "$NEW" = B ]; then
  # Host A comes back: its network, then (after a host death) its agent, which finds its
  # PostgreSQL down or fenced and rejoins the new primary by itself (pg_rewind, or a fresh clone).
  case "$FAULT" in
    host-death) link_up "$NS_A" pa "$IP_A" ;;
    partition) in_ns "$NS_A" nft delete table inet hpg_partition ;;
    pg-hang) pid=$(head -1 "$PGA/postmaster.pid" 2>/dev/null || true); [ -n "$pid" ] && kill -CONT "$pid" 2>/dev/null || true ;;
  esac
  BACK_NS=$(now_ns)
  if [ "$FAULT" = host-death ]; then start_agent "$NS_A" A; event "host A back: its agent started again"; else event "host A back"; fi
  wait_for 90 "A's PostgreSQL streaming from $PROMOTED again (GET /v1/roles/db/replica on A)" http_ok "http://$IP_A:7947/v1/roles/db/replica"
  REJOIN_S=$(awk -v a="$BACK_NS" -v b="$(now_ns)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
  event "hale: A streams from $PROMOTED again, ${REJOIN_S} s after its return"
  # Rows on the returned old primary that the new one does not have: writes it took
  # after the promotion (must be none). A replays the new primary: wait until it has caught up.
  psql_a_ids() { as_pg "$NS_A" "$PGBIN/psql" -X -q -Atc "SELECT id FROM logins ORDER BY id" -h "$DIR/sock-a" -d postgres; }
  end=$(( $(date +%s) + 30 ))
  until [ "$(psql_a_ids | wc -l)" -ge "$(wc -l < "$DIR/committed.txt")" ] || [ "$(date +%s)" -ge "$end" ]; do sleep 0.2; done
  OLD_ROWS=$(comm -23 <(psql_a_ids | sort) <(sort "$DIR/committed.txt") | wc -l)
  OLD_WRITE=$(direct_write A)
  event "old primary A, direct INSERT: $OLD_WRITE"
  KEPT=yes
  end=$(( $(date +%s%N) + 5000000000 ))
  while [ "$(date +%s%N)" -lt "$end" ]; do
    http_ok "http://${!PROMOTED_IP}:7947/v1/roles/db/primary" || KEPT=no
    sleep 0.25
  done
  event "5 s after A returned: $PROMOTED kept db throughout: $KEPT"
fi
# The agents' role events, in the event log's form (`<ns> host-X promote|promoted|demote|demoted
# db <epoch>`, and the rejoin steps), for the timeline.
for h in A B C; do
  ip=IP_$h
  in_ns "$NS_L" curl -fsS -m 2 -H "Authorization: Bearer $TOKEN" "http://${!ip}:7947/v1/events" 2>/dev/null | python3 -c '
import json, sys
names = {"promoting": "promote", "promoted": "promoted", "demoting": "demote", "demoted": "demoted",
         "rejoining": "rejoining", "rewound": "rewound", "recloned": "recloned", "streaming": "streaming"}
for e in json.load(sys.stdin):
    k = e.get("kind")
    if k in names:
        d = e.get("detail") or {}
        print(e["unix_ms"] * 1000000, sys.argv[1], names[k], d.get("role", ""), d.get("epoch", d.get("upstream", "")))
' "host-$h" >> "$EV" || true
done
auth_stat() { in_ns "$NS_L" curl -fsS -m 2 http://127.0.0.1:8080/stats | sed "s/.*\"$1\":\([0-9]*\).*/\1/"; }
RAISED=$(auth_stat reported)
TRANSPORT_DROPPED=$(auth_stat transport_dropped)
received() {
  local c a=0; c=$(count http://127.0.0.1:9101/count)
  # A's Sentry: what it had acknowledged before the fault if it died with host A.
  if [ "$SENTRY" = healthy ]; then
    if [ "$FAULT" = host-death ]; then a=$A_RECEIVED_AT_FAULT; else a=$(count "http://$IP_A:9100/count" || echo 0); fi
  fi
  echo $(( c + a ))
}
# The SDK and the relay deliver in the background: wait (at most 30 s) until the counts agree.
end=$(( $(date +%s) + 30 ))
while [ "$(received)" -lt "$RAISED" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.2; done
RECEIVED=$(received); RECEIVED_STANDBY=$(count http://127.0.0.1:9101/count)
in_ns "$NS_C" curl -fsS -m 2 "http://$IP_C:7947/metrics" | grep '^hale_relay' > "$DIR/relay-metrics.txt" || true
SYNC=$([ "$FAULT" = sentry-half-dead ] && sync_state || echo "sync-before-fault")

"$DEMO" analyze --attempts "$DIR/attempts.csv" --t0 "$T0" --events "$EV" --committed "$DIR/committed.txt" \
  --fact "fault=$FAULT" --fact "sentry_a=$SENTRY" --fact "sentry_transport=$TRANSPORT" --fact "synchronous_replication=$SYNC" \
  --fact "old_primary_direct_write=$OLD_WRITE" --fact "old_primary_rows_after_promotion=$OLD_ROWS" --fact "new_primary=$PROMOTED" --fact "new_primary_kept_db_after_a_returned=$KEPT" --fact "old_primary_streaming_after_return_s=$REJOIN_S" \
  --fact "reports_raised=$RAISED" --fact "reports_received=$RECEIVED" --fact "reports_received_by_standby=$RECEIVED_STANDBY" \
  --fact "relay_accepted=$(awk '$1 == "hale_relay_accepted_total" { print $2 }' "$DIR/relay-metrics.txt")" \
  > "$DIR/report.txt"
report_and_save "$DIR/relay-metrics.txt"
