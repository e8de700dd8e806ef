#!/usr/bin/env bash
# Installs what specula needs to build and run on Debian (12 "bookworm" or
# later): a C compiler, pkg-config and the libraries it links (PCRE2,
# jansson, libmicrohttpd), and Python with pip for scripts/fetch-models.sh.
# What only the tests need is scripts/setup-tests.sh (`make test` runs it).
# Idempotent: packages already present are not reinstalled.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt-install.sh setup build-essential pkg-config libpcre2-dev libjansson-dev libmicrohttpd-dev \
    python3 python3-pip ca-certificates
echo "setup: build and run dependencies present" >&2
