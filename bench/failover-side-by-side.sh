#!/usr/bin/env bash
# Side by side, one trial each in turn: host death -> standby promote hook with
# instant hooks, for two hale binaries (OLD and NEW), so that the machine's
# load affects both alike. Prints one line per trial: "<label> db=<s> auth=<s>".
#   OLD=/path/to/old/hale NEW=target/release/hale bench/failover-side-by-side.sh [ROUNDS] [extra run.sh args]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-10}; shift || true
: "${OLD:?set OLD to the baseline hale binary}"; NEW=${NEW:-target/release/hale}
for _ in $(seq "$ROUNDS"); do
  echo "old $(HALE=$OLD examples/host-loss/run.sh --trials 1 --quiet "$@")"
  echo "new $(HALE=$NEW examples/host-loss/run.sh --trials 1 --quiet "$@")"
done
