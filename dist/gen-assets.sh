#!/bin/sh
# Generates what the Debian package ships beside the binary, from the built
# binary's own CLI definition: the man page and shell completions.
#   cargo build --release -p hale && dist/gen-assets.sh && cargo deb -p hale --no-build
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
hale=${HALE:-$root/target/release/hale}
out=$root/target/assets
mkdir -p "$out"
"$hale" man | gzip -9n > "$out/hale.1.gz"
"$hale" completions bash > "$out/hale.bash"
"$hale" completions zsh > "$out/_hale"
"$hale" completions fish > "$out/hale.fish"
echo "man page and completions in $out"
