#!/usr/bin/env bash
# Idle bytes on the wire, hale against HashiCorp memberlist, side by side:
# N `hale agent`s and N memberlist nodes (bench/memberlist, LAN defaults,
# 1 s probe interval) run on loopback at the same time, and one nftables
# table counts both the same way.
#
# Usage: bench/bytes-side-by-side.sh [N] [SECS] [RUNS]     (defaults: 10, 60, 5)
#   as root (nft). Environment:
#   HALE=path        the hale binary (default: $CARGO_TARGET_DIR or target, release)
#   HALE_PLAIN=1     run hale unsealed (`insecure_plaintext`), like memberlist's default
#   ML_KEY=1         give memberlist a 32-byte key (AES-GCM), like hale's default sealing
#   LOSS=P           drop P% of the packets to both fleets' ports (nft, random)
#   HALE_TOML=TEXT   more of hale's configuration file (printf %b: "\n" is a newline),
#                    e.g. '[membership]\nwalk_interval = "5s"'
#   SETTLE=S         seconds between "everyone sees everyone" and the first window (20)
#   PORTS=P          port base (21000): hale gossip P+i, its API P+1000+i, memberlist
#                    P+2000+i; give concurrent runs bases 3000 apart, below 30000
#
# What is counted: every IPv4 packet leaving through `lo` (nft `output`
# hook, so each packet once) whose UDP destination port, TCP destination
# port or TCP source port is in a fleet's port range: the gossip
# datagrams, and the stream (TCP) syncs with their handshakes, ACKs and
# FINs. Bytes are whole IP packets: IP and UDP/TCP headers included (28
# bytes a datagram; 52 a TCP segment with timestamps), for both fleets.
# hale's HTTP API ports and the harness's own calls are outside the ranges.
#
# Windows: RUNS consecutive windows of SECS on the same two clusters,
# nobody probing the API during them. Per window and fleet: bytes and
# packets per node per second (total / N / SECS); then the medians and the
# ratio hale / memberlist of each window (measured in the same window).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
secs=${2:-60}
runs=${3:-5}
settle=${SETTLE:-20}
loss=${LOSS:-0}
target=${CARGO_TARGET_DIR:-target}
hale=${HALE:-$target/release/hale}
[ -x "$hale" ] || { echo "no hale binary at $hale (cargo build --release -p hale)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (nftables counters)" >&2; exit 1; }

# memberlist-node, built offline from Debian's packages
# (apt-get install golang-go golang-github-hashicorp-memberlist-dev).
mlnode=${MLNODE:-$target/memberlist-node}
if [ ! -x "$mlnode" ]; then
  (cd bench/memberlist && GOPATH=/usr/share/gocode GO111MODULE=off GOFLAGS= \
    GOCACHE=${GOCACHE:-/tmp/hale-bench-gocache} go build -o "$OLDPWD/$mlnode" .)
fi

# Port ranges: hale gossip P+i (its API P+1000+i), memberlist P+2000+i,
# all below the ephemeral range (where the TCP syncs' client ports are).
base=${PORTS:-21000}
HG=$base; HA=$((base + 1000)); MG=$((base + 2000))
hr="$HG-$((HG + n - 1))"; mr="$MG-$((MG + n - 1))"
work=$(mktemp -d /tmp/bytes-side-by-side.XXXXXX)
table=halebytes$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  nft delete table inet "$table" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

nft -f - <<EOF
table inet $table {
  chain out {
    type filter hook output priority 0; policy accept;
    oifname "lo" udp dport $hr counter comment "hale udp"
    oifname "lo" tcp dport $hr counter comment "hale tcp-in"
    oifname "lo" tcp sport $hr counter comment "hale tcp-out"
    oifname "lo" udp dport $mr counter comment "memberlist udp"
    oifname "lo" tcp dport $mr counter comment "memberlist tcp-in"
    oifname "lo" tcp sport $mr counter comment "memberlist tcp-out"
  }
}
EOF
if [ "$loss" -gt 0 ]; then
  nft add chain inet "$table" in "{ type filter hook input priority -10; policy accept; }"
  for r in "$hr" "$mr"; do
    nft add rule inet "$table" in iifname lo udp dport "$r" numgen random mod 100 "<" "$loss" drop
    nft add rule inet "$table" in iifname lo tcp dport "$r" numgen random mod 100 "<" "$loss" drop
  done
fi

# Sums of (packets, bytes) per fleet.
counters() {
  nft list table inet "$table" | awk '
    /counter packets/ {
      for (i = 1; i <= NF; i++) { if ($i == "packets") p = $(i+1); if ($i == "bytes") b = $(i+1) }
      fleet = ($0 ~ /comment "hale/) ? "hale" : "memberlist"
      P[fleet] += p; B[fleet] += b
    }
    END { printf "%d %d %d %d\n", P["hale"], B["hale"], P["memberlist"], B["memberlist"] }'
}

# The fleets. hale: sealed with one cluster key unless HALE_PLAIN=1.
conf=$work/hale.toml
: >"$conf"
if [ "${HALE_PLAIN:-0}" = 1 ]; then
  printf '[cluster]\ninsecure_plaintext = true\n' >>"$conf"
  key=""
else
  key=$("$hale" keygen | tail -n 1)
fi
[ -n "${HALE_TOML:-}" ] && printf '%b\n' "$HALE_TOML" >>"$conf"
mlkey=""
[ "${ML_KEY:-0}" = 1 ] && mlkey=$(head -c 32 /dev/urandom | base64)
for i in $(seq 0 $((n - 1))); do
  seeds=""; [ "$i" -gt 0 ] && seeds=127.0.0.1:$HG
  env -u HALE_SEEDS HALE_NAME=h$i HALE_BIND=127.0.0.1:$((HG + i)) HALE_HTTP=127.0.0.1:$((HA + i)) \
    HALE_CLUSTER=bytes-$base HALE_PROFILE=lan HALE_LOG=warn NO_COLOR=1 \
    ${key:+HALE_KEYS=$key} ${seeds:+HALE_SEEDS=$seeds} \
    "$hale" agent ${conf:+--config "$conf"} >"$work/h$i.log" 2>&1 &
  pids+=($!)
  join=""; [ "$i" -gt 0 ] && join=127.0.0.1:$MG
  "$mlnode" -name m$i -port $((MG + i)) ${join:+-join "$join"} ${mlkey:+-key "$mlkey"} \
    -expect "$n" >"$work/m$i.log" 2>&1 &
  pids+=($!)
  sleep 0.1
done

formed() {
  for i in $(seq 0 $((n - 1))); do
    grep -q "^joined" "$work/m$i.log" 2>/dev/null || return 1
    alive=$(curl -sf "http://127.0.0.1:$((HA + i))/v1/health" | jq -r '.members.alive' 2>/dev/null || echo 0)
    [ "${alive:-0}" -ge $((n - 1)) ] || return 1
  done
}
start=$(date +%s)
until formed; do
  if [ $(($(date +%s) - start)) -gt 120 ]; then
    echo "the clusters did not form in 120 s; logs in $work" >&2
    tail -n 3 "$work"/h0.log "$work"/m0.log >&2
    trap - EXIT; exit 1
  fi
  sleep 1
done
sleep "$settle"

echo "# $(date -u) $(uname -srm), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)"
[ -n "${HALE_TOML:-}" ] && echo "# hale configuration: $(tr '\n' ' ' <"$conf")"
echo "# N=$n, $runs windows of $secs s, loss $loss%, hale $([ "${HALE_PLAIN:-0}" = 1 ] && echo plaintext || echo sealed), memberlist $([ -n "$mlkey" ] && echo encrypted || echo 'plaintext (LAN defaults)')"
echo "# bytes: IP packets on lo (headers included), per node per second"
printf '%-4s %12s %12s %12s %12s %8s\n' run hale_B/s hale_pkt/s ml_B/s ml_pkt/s ratio
hb=(); mb=(); rt=()
for r in $(seq 1 "$runs"); do
  read -r hp0 hb0 mp0 mb0 < <(counters)
  t0=$(date +%s.%N)
  sleep "$secs"
  read -r hp1 hb1 mp1 mb1 < <(counters)
  t1=$(date +%s.%N)
  line=$(awk -v n="$n" -v t0="$t0" -v t1="$t1" -v hp="$((hp1 - hp0))" -v hb="$((hb1 - hb0))" \
    -v mp="$((mp1 - mp0))" -v mb="$((mb1 - mb0))" -v r="$r" 'BEGIN {
      el = t1 - t0; h = hb / n / el; m = mb / n / el
      printf "%-4d %12.1f %12.2f %12.1f %12.2f %8.3f\n", r, h, hp / n / el, m, mp / n / el, h / m }')
  echo "$line"
  read -r _ h _ m _ x <<<"$line"
  hb+=("$h"); mb+=("$m"); rt+=("$x")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "RESULT N=$n hale $(median "${hb[@]}") B/s per node, memberlist $(median "${mb[@]}") B/s per node, ratio hale/memberlist median $(median "${rt[@]}") (max $(printf '%s\n' "${rt[@]}" | sort -g | tail -n 1))"
for i in 0 $((n - 1)); do
  curl -sf "http://127.0.0.1:$((HA + i))/metrics" | grep -E '^hale_(suspicions|deaths_declared|deaths_accepted)_total' | sed "s/^/# h$i /" || true
done
