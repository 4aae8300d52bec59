#!/usr/bin/env bash
# Builds the Debian bookworm root the systemd test boots (crates/hale/tests/it/systemd.rs):
# minbase with systemd, dbus and PostgreSQL 15's server, from Debian's packages. Built
# once into DIR (default target/systemd-root) and reused: a root whose stamp matches
# this script's version is left as it is. As root; needs debootstrap. About 3 minutes.
set -euo pipefail
VERSION=1
DIR=${1:-"$(dirname "$0")/../target/systemd-root"}
STAMP=.hale-systemd-root
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ "$(cat "$DIR/$STAMP" 2>/dev/null)" = "$VERSION" ]; then
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "systemd-root.sh: needs root (debootstrap)" >&2; exit 3; }
command -v debootstrap >/dev/null || { echo "systemd-root.sh: needs debootstrap" >&2; exit 3; }

# Built beside DIR and renamed into place once complete: an interrupted build
# leaves no root that looks usable.
tmp="$DIR.tmp-$$"
trap 'rm -rf --one-file-system "$tmp"' EXIT
rm -rf --one-file-system "$DIR"
mkdir -p "$(dirname "$DIR")"
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,procps,postgresql-15 \
  bookworm "$tmp" "$MIRROR" >"$tmp.log" 2>&1 || { tail -20 "$tmp.log" >&2; exit 1; }
rm -f "$tmp.log"
# The cluster Debian's package created is not hale's: PostgreSQL's own units stay
# off, hale starts its servers itself. Nothing else on the network either.
systemctl --root="$tmp" mask postgresql.service postgresql@15-main.service >/dev/null 2>&1
systemctl --root="$tmp" mask systemd-networkd.service systemd-resolved.service \
  systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1 || true
echo hale-test >"$tmp/etc/hostname"
echo "$VERSION" >"$tmp/$STAMP"
mv "$tmp" "$DIR"
trap - EXIT
