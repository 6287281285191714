"""The command line's values, checked before anything runs: each option's value by the
library's own rule (``Config`` and ``ChatRequest`` raise a ``ValueError`` naming the field),
so a bad one is a one-line usage error (exit 2) and never a traceback; and what ``chat`` and
``doctor`` build from them. Imports no rich."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import ChatMessage, ChatRequest, Config, SystemMessage, Transport, UserMessage

__all__ = [
    "API_KEY_ENV",
    "ChatOptions",
    "api_key",
    "chat_options",
    "check",
    "doctor_config",
    "max_tokens",
    "secrets",
    "seconds",
    "url",
]

API_KEY_ENV = "LLAMA_API_KEY"  # the variable llama-server itself reads for --api-key
_SOMEWHERE = "http://127.0.0.1"  # stands in for the embedded server's URL while checking
_FIELD = re.compile(r"^\w+\.\w+ ")  # "Config.max_tokens must be ..." -> "must be ..."


def _by_library(make: Callable[[], object]) -> None:
    """Run ``make``; its ``ValueError`` becomes argparse's error for the option at hand."""
    try:
        make()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(_FIELD.sub("", str(exc), count=1)) from None


def url(text: str) -> str:
    """``--url``: an ``http://`` or ``https://`` URL with a host (and a port that is a
    number up to 65535)."""
    _by_library(lambda: Config(text))
    return text


def max_tokens(text: str) -> int:
    """``--max-tokens``: an int, -1 (no limit) or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    _by_library(lambda: ChatRequest([UserMessage("")], max_tokens=value))
    return value


def seconds(text: str) -> float:
    """``--timeout``: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    _by_library(lambda: Config(_SOMEWHERE, wait_timeout=value))
    return value


def api_key(text: str) -> str:
    """``--api-key``: printable ASCII (the library's rule; its message never shows it)."""
    _by_library(lambda: Config(_SOMEWHERE, api_key=text))
    return text


def secrets(argv: Sequence[str]) -> list[str]:
    """Every API key on the command line (``--api-key K``, ``--api-key=K`` and argparse's
    abbreviations such as ``--api K``) or in ``LLAMA_API_KEY``: what no error may show."""
    found = [os.environ.get(API_KEY_ENV, "")]
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if len(name) > 2 and "--api-key".startswith(name):
            found.append(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    return [s for s in found if s]


def _key(args: argparse.Namespace) -> str | None:
    key: str | None = args.api_key
    return key if key is not None else os.environ.get(API_KEY_ENV) or None


@dataclass
class ChatOptions:
    """What every turn of ``chat`` sends; ``url`` None: the embedded server."""

    url: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    system: str | None = None
    thinking: bool = False
    max_tokens: int | None = 512
    history: list[ChatMessage] = field(default_factory=list)
    transport: Transport | None = None  # tests: a FakeLlama's

    def config(self, url: str) -> Config:
        """The client's ``Config`` for the server at ``url``. The key goes to the embedded
        server too: it inherits ``LLAMA_API_KEY`` and then demands it."""
        return Config(base_url=url, model=self.model or "", api_key=self.api_key, load_timeout=300)

    def request(self, prompt: str) -> ChatRequest:
        """The next turn: the system message, the history (exact echo), ``prompt``."""
        messages: list[ChatMessage] = []
        if self.system:
            messages.append(SystemMessage(self.system))
        messages += [*self.history, UserMessage(prompt)]
        return ChatRequest(messages, thinking=self.thinking, max_tokens=self.max_tokens)


def chat_options(args: argparse.Namespace) -> ChatOptions:
    """``chat``'s options (``--model`` is a model name only with ``--url``)."""
    return ChatOptions(
        url=args.url,
        model=args.model if args.url else None,
        api_key=_key(args),
        system=args.system,
        thinking=args.thinking,
        max_tokens=args.max_tokens,
    )


def doctor_config(args: argparse.Namespace) -> Config:
    """``doctor``'s ``Config``: every check bounded by ``--timeout``, one retry."""
    timeout: float = args.timeout
    return Config(
        args.url,
        model=args.model or "",
        api_key=_key(args),
        wait_timeout=timeout,
        load_timeout=timeout,
        max_retries=1,
        connect_timeout=min(timeout, 5.0),
        retry_backoff=0.1,
    )


def check(args: argparse.Namespace) -> None:
    """Build what the command will build, so any value the library refuses is a
    ``ValueError`` now (a usage error), before a server is started or asked."""
    key = os.environ.get(API_KEY_ENV)
    if getattr(args, "api_key", None) is None and key:
        try:
            Config(_SOMEWHERE, api_key=key)
        except ValueError as exc:
            raise ValueError(f"{API_KEY_ENV}: {exc}") from None
    if args.command == "chat":
        options = chat_options(args)
        options.config(options.url or _SOMEWHERE)
        options.request("")
        if args.model and not args.url and not Path(args.model).is_file():
            raise ValueError(
                f"argument --model: no such file: {args.model!r} (without --url, --model is "
                "a GGUF file for the embedded server; with --url, a model name)"
            )
    elif args.command == "doctor":
        doctor_config(args)
