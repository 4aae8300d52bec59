#!/usr/bin/env bash
# Builds the previous release pinned in dist/previous-release.toml, once:
# its source from `git archive` (the repository must hold the commit: a full
# clone) into target/previous-release/<commit>/src, built there in its own
# target directory. Prints the path of its `hale`. The mixed-version tests
# (crates/hale/tests/it/versions.rs) and bench/rolling-upgrade.py use it;
# CI runs it before the tests so that no test waits for it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
field() { sed -n "s/^$1 *= *\"\(.*\)\"/\1/p" "$root/dist/previous-release.toml"; }
commit="$(field commit)"
[ -n "$commit" ] || { echo "dist/previous-release.toml names no commit" >&2; exit 1; }
home="${CARGO_TARGET_DIR:-$root/target}/previous-release/$commit"
exe="$home/target/debug/hale"
if [ ! -x "$exe" ]; then
  if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "the previous release's commit $commit is not in this repository (a shallow clone?): git fetch --unshallow" >&2
    exit 1
  fi
  if [ ! -f "$home/src/Cargo.toml" ]; then
    tmp="$home/src.tmp-$$"
    rm -rf "$tmp" && mkdir -p "$tmp"
    git -C "$root" archive --format=tar "$commit" | tar -x -C "$tmp"
    mv -T "$tmp" "$home/src" 2>/dev/null || rm -rf "$tmp"  # another run extracted it meanwhile
  fi
  echo "building the previous release ($commit) in $home" >&2
  (cd "$home/src" && env -u RUSTFLAGS CARGO_TARGET_DIR="$home/target" \
    cargo build --locked -p hale --bin hale >&2)
fi
echo "$exe"
