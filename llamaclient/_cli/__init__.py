"""The ``llamaclient`` command (also ``python -m llamaclient``).

    llamaclient chat [PROMPT] [-i] [--json] [--url URL] [--thinking] [--max-tokens N]
                     [--system TEXT] [--model NAME]
    llamaclient doctor [--url URL]
    llamaclient replay FILE [--json]

Without ``--url``, ``chat`` starts the embedded default: a local llama-server with Gemma 3
270M (both from PyPI, built and written once into ``~/.cache/llamaclient``), stopped at the
end. Exit codes: 0 done; 1 the chat failed (a llamaclient error, shown with what had
arrived); 2 bad usage; 3 the server cannot serve chats (doctor) or cannot be reached;
4 the embedded llama-server could not be built or started, or died; 5 the CLI's extra is not
installed; 130 Ctrl-C (the turn was cancelled, the server freed the slot, what had arrived
was shown).

The console output needs rich: ``pip install 'llamaclient[cli]'``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["INSTALL_HINT", "main", "parser"]

INSTALL_HINT = (
    "the llamaclient command needs its extra: pip install 'llamaclient[cli]' (it adds rich)"
)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    top = argparse.ArgumentParser(
        prog="llamaclient",
        description="Chat with llama.cpp's llama-server, check what it supports, replay "
        "recorded streams.",
        epilog="Exit codes: 0 done, 1 chat failed, 2 usage, 3 server cannot serve chats, "
        "4 embedded server failed, 5 extra missing, 130 Ctrl-C.",
    )
    sub = top.add_subparsers(dest="command", required=True)
    chat = sub.add_parser("chat", help="stream a chat (default: an embedded Gemma 3 270M)")
    chat.add_argument("prompt", nargs="?", help="the prompt (default: read stdin, or -i)")
    chat.add_argument("-i", "--interactive", action="store_true", help="multi-turn session")
    chat.add_argument("--json", action="store_true", help="one JSON object per event line")
    chat.add_argument("--url", help="a running llama-server (default: start the embedded one)")
    chat.add_argument("--thinking", action="store_true", help="ask the model to think")
    chat.add_argument("--max-tokens", type=int, default=512, help="answer length cap (512)")
    chat.add_argument("--system", help="a system message")
    chat.add_argument(
        "--model",
        help="the model name sent to the server (router mode); without --url, a GGUF file "
        "for the embedded server instead of Gemma 3 270M",
    )
    doctor = sub.add_parser("doctor", help="what the server supports, one verdict per line")
    doctor.add_argument("--url", default="http://127.0.0.1:8080", help="the server")
    doctor.add_argument("--timeout", type=float, default=30.0, help="per check, seconds")
    replay = sub.add_parser("replay", help="render a recorded stream (recordings/*.http)")
    replay.add_argument("file", type=Path)
    replay.add_argument("--json", action="store_true", help="one JSON object per event line")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    args = parser().parse_args(argv)
    try:
        import rich  # noqa: F401
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 5
    from .app import run

    return run(args)
