#!/usr/bin/env bash
# Every simulator scenario's digest, on one thread and on two: the baseline a refactor of
# hale-core must leave unchanged (issue 42). `bash bench/digests.sh` prints "scenario threads
# digest" lines; `bash bench/digests.sh --check bench/digests.txt` compares with a saved list and
# exits 1 on any difference. soak-24h is cut to its first hour of virtual time (the whole day takes
# most of an hour of wall time); everything else runs in full, on its own seed. bench/digests.txt
# holds the list of the last commit that changed behaviour on purpose (update it with the
# commit that does, saying why); about 25 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
hale=${HALE:-target/release/hale}
check=""
if [[ ${1:-} == --check ]]; then check=$2; fi
out=$(mktemp)
trap 'rm -f "$out" "$out.json"' EXIT
for s in scenarios/*.toml; do
    name=$(basename "$s" .toml)
    extra=()
    [[ $name == soak-24h ]] && extra=(--duration 1h)
    for t in 1 2; do
        "$hale" sim "$s" --threads "$t" "${extra[@]}" --json "$out.json" > /dev/null
        d=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['runs'][0]['digest'])" "$out.json")
        echo "$name $t $d" | tee -a "$out"
    done
done
if [[ -n $check ]]; then
    if diff -u "$check" "$out"; then echo "digests unchanged"; else echo "DIGESTS CHANGED"; exit 1; fi
fi
