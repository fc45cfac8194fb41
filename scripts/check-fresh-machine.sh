#!/usr/bin/env bash
# Proves the README's two commands on a pristine Debian 12 root filesystem:
# debootstrap (minimal variant: no compiler, no cmake, nothing the project's
# scripts do not install themselves) into a temporary directory, a clean clone
# of this repository's HEAD inside it, then `scripts/demo.sh` and
# `scripts/test.sh` run under chroot as root, exactly as the README says.
# Run it (as root) whenever the dependencies, the install scripts or the build
# change.
#
#   scripts/check-fresh-machine.sh                    # both commands, in full
#   DEMO_ARGS="--steps 20" scripts/check-fresh-machine.sh   # a shorter main job
#   ONLY=demo scripts/check-fresh-machine.sh          # or ONLY=test
#   KEEP=1 ...                                        # leave the root for inspection
#   TEST_ENV="STRATA_SANITIZERS=0 STRATA_FUZZ=0" ...  # variables for the test command
#
# The base system is cached as a tarball (BASE_TAR, default
# /var/cache/strata/bookworm-minbase.tar) so reruns skip debootstrap; every
# run unpacks it into a new directory, so no run sees another's installs.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
BASE_TAR=${BASE_TAR:-/var/cache/strata/bookworm-minbase.tar}
ONLY=${ONLY:-}
DEMO_ARGS=${DEMO_ARGS:-}
TEST_ENV=${TEST_ENV:-}
if [ "$(id -u)" -ne 0 ]; then echo "check-fresh-machine: run as root (debootstrap, chroot)" >&2; exit 2; fi
if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
fi

if [ ! -s "$BASE_TAR" ]; then
  mkdir -p "$(dirname "$BASE_TAR")"
  tmp=$(mktemp -d /var/tmp/strata-base.XXXXXX)
  echo "== debootstrap bookworm (minbase) into $tmp"
  debootstrap --variant=minbase bookworm "$tmp" "$MIRROR" >/dev/null
  tar -C "$tmp" -cf "$BASE_TAR.part" . && mv "$BASE_TAR.part" "$BASE_TAR"
  rm -rf "$tmp"
fi

root=$(mktemp -d /var/tmp/strata-fresh.XXXXXX)
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  if [ -z "${KEEP:-}" ]; then rm -rf "$root"; else echo "root left at $root"; fi
}
trap cleanup EXIT
tar -C "$root" -xf "$BASE_TAR"
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
cp /etc/resolv.conf "$root/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod +x "$root/usr/sbin/policy-rc.d"
for m in proc sys dev dev/pts; do
  mkdir -p "$root/$m"
  mount --bind "/$m" "$root/$m"
  mounted+=("$root/$m")
done

# The clone carries only what is committed, as a new user's checkout would.
git clone -q "$repo" "$root/src/strata"
# Pass through the environment CI and developers have (OPENBLAS_CORETYPE is
# set on these machines and the project never unsets it).
run_in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 ${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE} \
    /bin/bash -c "cd /src/strata && $1"
}
status=0
# check NAME COMMAND: runs COMMAND in the root, timed.
check() {
  echo "== $2 (fresh root $root)"
  local start
  start=$(date +%s)
  if run_in_root "$2"; then
    echo "== $1: passed in $(($(date +%s) - start)) s"
  else
    echo "== $1: FAILED"; status=1
  fi
}
if [ "$ONLY" != test ]; then check demo "scripts/demo.sh $DEMO_ARGS"; fi
if [ "$ONLY" != demo ]; then check test "${TEST_ENV:+env $TEST_ENV }scripts/test.sh"; fi
exit $status
