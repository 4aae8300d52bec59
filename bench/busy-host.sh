#!/usr/bin/env bash
# Issue 41: a control plane that holds when the host is busy. Runs, one after
# another (as root, loopback only; results in BENCHMARKS.md, "Roles at scale"):
set -u
cd "$(dirname "$0")/.."
H=${HALE_BIN:-target/release/hale}
OUT=bench/results/roles-$(date -u +%Y%m%d)
mkdir -p $OUT
run() { name=$1; shift; echo "== $name: $*" ; python3 bench/roles.py --hale $H "$@" 2>&1 | tee $OUT/$name.txt; }
cargo build --release --locked -p hale
run python-200-600s --roles 200 --hook python3 --secs 600 --kill
run python-200-busy2-600s --roles 200 --hook python3 --secs 600 --kill --busy 2
run sh-1000-600s --roles 1000 --hook sh --secs 600 --kill
run leader-kill-200-python-busy2-20 --roles 200 --hook python3 --leader-trials 20 --busy 2
run leader-freeze-200-python-busy2-20 --roles 200 --hook python3 --leader-trials 20 --busy 2 --freeze
echo ALL DONE
