#!/usr/bin/env bash
# Usage: bench/digests.sh HALE_BINARY [--threads 2]
# Runs the 20 scenarios under 10,000 members and compares each digest with
# bench/results/churn10k-20261203b/scenarios-10ada6d.txt (the reference:
# every later change that claims "behaviour unchanged" is held to it).
set -u
bin=$(realpath "$1"); shift
root=$(cd "$(dirname "$0")" && pwd)
ref=bench/results/churn10k-20261203b/scenarios-10ada6d.txt
cd "$root/.."
fail=0
while read -r name _ _ want _; do
  [ "$name" = DONE ] && continue
  want=$(echo "$want" | tr -d '",')
  out=$(mktemp)
  "$bin" sim "scenarios/$name.toml" --json "$out" "$@" >/dev/null 2>&1
  got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["digest"])' "$out" 2>/dev/null)
  rm -f "$out"
  if [ "$got" = "$want" ]; then echo "same $name $got"; else echo "DIFF $name want $want got $got"; fail=1; fi
done < "$ref"
exit $fail
