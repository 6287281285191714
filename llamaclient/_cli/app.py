"""The commands behind ``llamaclient`` (imported once rich is known to be there)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.text import Text

from .chat import chat_main, replay_main
from .doctor import Verdict, doctor_main
from .options import chat_options, doctor_config
from .view import ConsoleView, JsonView, View

__all__ = ["run", "verdict_line"]

_MARKS = {
    "ok": ("✓", "green"),
    "warn": ("!", "yellow"),
    "bad": ("✗", "bold red"),
    "info": ("·", "cyan"),
}


def verdict_line(verdict: Verdict) -> Text:
    """``✓ name  detail``, coloured by level."""
    mark, style = _MARKS[verdict.level]
    line = Text(f"{mark} ", style=style)
    line.append(f"{verdict.name:<18}", style="bold")
    line.append(verdict.detail)
    return line


def _view(json: bool) -> tuple[View, Console]:
    console = Console(highlight=False, stderr=json)
    return (JsonView() if json else ConsoleView(console)), console


def _logs(verbose: int) -> None:
    """``-v``: the ``llamaclient`` logger's INFO lines on stderr; ``-vv``: DEBUG too."""
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger = logging.getLogger("llamaclient")
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)


def _chat(args: argparse.Namespace) -> int:
    _logs(args.verbose)
    view, console = _view(args.json)
    prompts: list[str] = args.prompts
    interactive: bool = args.interactive
    if not prompts and not interactive:
        if sys.stdin.isatty():
            interactive = True
        else:
            prompts = [sys.stdin.read().strip()]
    ask: Callable[[], str] = input
    if not args.json:

        def ask() -> str:
            return console.input("\n[bold blue]you>[/] ")

    embedded_model = Path(args.model) if args.model and not args.url else None
    return chat_main(chat_options(args), prompts, interactive, view, ask, embedded_model)


def run(args: argparse.Namespace) -> int:
    """Run the parsed command; returns the exit code."""
    if args.command == "chat":
        return _chat(args)
    if args.command == "replay":
        view, _ = _view(args.json)
        return replay_main(args.file, view)
    console = Console(highlight=False)
    return doctor_main(
        doctor_config(args), lambda v: console.print(verdict_line(v), soft_wrap=True)
    )
