#!/usr/bin/env bash
# Installs what specula needs to build and run on Debian (12 "bookworm" or
# later): a C compiler, pkg-config and the libraries it links (PCRE2,
# jansson, libmicrohttpd), and Python with pip for scripts/fetch-models.sh.
# What only the tests need is scripts/setup-tests.sh (`make test` runs it).
# Idempotent: packages already present are not reinstalled.
set -euo pipefail
PKGS=(build-essential pkg-config libpcre2-dev libjansson-dev libmicrohttpd-dev python3 python3-pip ca-certificates)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "setup: installing ${missing[*]}" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: build and run dependencies present" >&2
