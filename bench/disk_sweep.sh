#!/bin/sh
# How slow or stalled the control plane's disks may be before a healthy
# holder loses its role: runs the suite's slow-disk test (3 real agents,
# crates/hale/tests/it/slow_hooks.rs) RUNS times per value and counts passes.
# Usage: bench/disk_sweep.sh slow|stall RUNS VALUE_MS...
#   slow:  every durable log write on every server takes VALUE_MS longer
#          (the test's 0.8 s stall phase keeps its default)
#   stall: every server's disk stops for VALUE_MS at once
set -eu
kind=$1; runs=$2; shift 2
cd "$(dirname "$0")/.."
cargo test -p hale --test it --locked --no-run -q 2>/dev/null
for v in "$@"; do
    ok=0
    i=0
    while [ $i -lt "$runs" ]; do
        i=$((i + 1))
        if [ "$kind" = slow ]; then var=HALE_TEST_SLOW_MS; else var=HALE_TEST_STALL_MS; fi
        if env $var="$v" cargo test -p hale --test it --locked -q disk_slow_or_stalled >/dev/null 2>&1; then
            ok=$((ok + 1))
        fi
    done
    echo "$kind $v ms: $ok/$runs held"
done
