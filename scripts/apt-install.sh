#!/usr/bin/env bash
# Installs the Debian packages named as arguments that are not installed
# yet (with sudo when not root); the shared step of scripts/setup.sh and
# scripts/setup-tests.sh.  Usage: scripts/apt-install.sh TAG PKG...
set -euo pipefail
tag=$1; shift
missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "$tag: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
