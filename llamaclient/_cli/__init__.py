"""The ``llamaclient`` command (also ``python -m llamaclient``).

    llamaclient chat [PROMPT ...] [-i] [--json] [--url URL] [--api-key KEY] [--thinking]
                     [--max-tokens N] [--system TEXT] [--model NAME]
    llamaclient doctor [--url URL] [--api-key KEY] [--model NAME] [--timeout S]
    llamaclient replay FILE [--json]

Without ``--url``, ``chat`` starts the embedded default: a local llama-server with Gemma 3
270M (both from PyPI, built and written once into ``~/.cache/llamaclient``), stopped at the
end. Several prompts are several turns of one conversation. Exit codes: 0 done; 1 the chat
failed (a llamaclient error, shown with what had arrived); 2 bad usage (every bad value is
one line, as argparse says it); 3 the server cannot serve chats (doctor) or cannot be
reached; 4 the embedded llama-server could not be built or started, or died; 5 the CLI's
extra is not installed; 130 Ctrl-C (the turn was cancelled, the server freed the slot, what
had arrived was shown).

The console output needs rich: ``pip install 'llamaclient[cli]'``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import options

__all__ = ["INSTALL_HINT", "main", "parser"]

INSTALL_HINT = (
    "the llamaclient command needs its extra: pip install 'llamaclient[cli]' (it adds rich)"
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors never show an API key (``secrets``: every key on the
    command line or in the environment), and which knows its subcommands' parsers."""

    def __init__(self, *args: Any, secrets: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.secrets = tuple(secrets)
        self.commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:
        for secret in self.secrets:
            message = message.replace(secret, "***")
        super().error(message)


def _api_key_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--api-key",
        type=options.api_key,
        metavar="KEY",
        help=f"sent as 'Authorization: Bearer KEY' (default: ${options.API_KEY_ENV}); "
        "never printed",
    )


def parser(secrets: Sequence[str] = ()) -> _Parser:
    """The command line (``secrets``: API keys its errors must not show)."""
    top = _Parser(
        prog="llamaclient",
        description="Chat with llama.cpp's llama-server, check what it supports, replay "
        "recorded streams.",
        epilog="Exit codes: 0 done, 1 chat failed, 2 usage, 3 server cannot serve chats, "
        "4 embedded server failed, 5 extra missing, 130 Ctrl-C.",
        secrets=secrets,
    )
    sub = top.add_subparsers(dest="command", required=True)
    chat = sub.add_parser(
        "chat", help="stream a chat (default: an embedded Gemma 3 270M)", secrets=secrets
    )
    chat.add_argument(
        "prompts",
        nargs="*",
        metavar="PROMPT",
        help="the prompt; several are the turns of one conversation (default: read stdin, or -i)",
    )
    chat.add_argument("-i", "--interactive", action="store_true", help="multi-turn session")
    chat.add_argument("--json", action="store_true", help="one JSON object per event line")
    chat.add_argument(
        "--url", type=options.url, help="a running llama-server (default: start the embedded one)"
    )
    _api_key_option(chat)
    chat.add_argument("--thinking", action="store_true", help="ask the model to think")
    chat.add_argument(
        "--max-tokens",
        type=options.max_tokens,
        default=512,
        metavar="N",
        help="answer length cap (512; -1: none)",
    )
    chat.add_argument("--system", help="a system message")
    chat.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log to stderr: -v one line per turn (INFO), -vv each request and decision (DEBUG)",
    )
    chat.add_argument(
        "--model",
        help="the model name sent to the server (router mode); without --url, a GGUF file "
        "for the embedded server instead of Gemma 3 270M",
    )
    doctor = sub.add_parser(
        "doctor", help="what the server supports, one verdict per line", secrets=secrets
    )
    doctor.add_argument(
        "--url", type=options.url, default="http://127.0.0.1:8080", help="the server"
    )
    _api_key_option(doctor)
    doctor.add_argument(
        "--model", help="on a router: the model to check (default: the first loaded one)"
    )
    doctor.add_argument(
        "--timeout", type=options.seconds, default=30.0, metavar="S", help="per check, seconds (30)"
    )
    replay = sub.add_parser(
        "replay", help="render a recorded stream (recordings/*.http)", secrets=secrets
    )
    replay.add_argument("file", type=Path)
    replay.add_argument("--json", action="store_true", help="one JSON object per event line")
    top.commands.update(chat=chat, doctor=doctor, replay=replay)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    words = sys.argv[1:] if argv is None else list(argv)
    top = parser(options.secrets(words))
    args = top.parse_args(words)
    try:
        options.check(args)
    except ValueError as exc:
        top.commands[args.command].error(str(exc))
    try:
        import rich  # noqa: F401
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 5
    from .app import run

    return run(args)
