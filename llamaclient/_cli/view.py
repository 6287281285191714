"""How ``llamaclient chat`` shows a stream: on a console with rich, or as JSON lines.

Both views take, for each turn, the events as they arrive (``show``) and then exactly one of
``finished`` (the Completion), ``stopped`` (Ctrl-C: what had arrived) or ``failed`` (the error
and what had arrived); before a turn after the first whose prompt was given on the command
line, ``asked`` (the prompt).
"""

from __future__ import annotations

import sys
from typing import IO, Any, Protocol

import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.text import Text

from .. import (
    ArgumentDelta,
    ChatEvent,
    Completion,
    Content,
    Proxied,
    Queued,
    Reasoning,
    Resuming,
    Retrying,
    ThinkingCapped,
    ToolCallDelta,
    ToolCallDone,
    Waiting,
)
from .. import Progress as PromptProgress

__all__ = ["ConsoleView", "JsonView", "View", "event_json", "summary"]


class View(Protocol):
    def asked(self, prompt: str) -> None: ...

    def show(self, event: ChatEvent) -> None: ...

    def finished(self, completion: Completion) -> None: ...

    def stopped(self, partial: Completion) -> None: ...

    def failed(self, error: Exception, partial: Completion) -> None: ...


_PIECES = (Content, Reasoning, ToolCallDelta)  # what llama-server streams a token at a time


def summary(completion: Completion, *, stopped: str | None = None, shown: int = 0) -> str:
    """The last line: finish reason (or why it stopped), tokens, tokens/s, the draft model's
    acceptance (speculative decoding) and how much of the prompt came from the prompt cache.

    The tokens are the server's count (``timings``, else ``usage``); without either (a
    stream that ended in an error before any timings, e.g. a recording made without
    ``timings_per_token``) the ``shown`` pieces: llama-server streams one per token that
    produced text."""
    t = completion.timings
    head = stopped or f"finish: {completion.finish_reason or 'none'}"
    tokens = t.predicted_n if t is not None else completion.usage.completion_tokens
    parts = [head, f"{shown if tokens is None else tokens} tokens"]
    if t is None:
        return " · ".join(parts)
    if t.predicted_per_second:
        parts.append(f"{t.predicted_per_second:.1f} tokens/s")
    if t.draft_acceptance is not None:
        parts.append(
            f"draft {t.draft_n_accepted}/{t.draft_n} accepted ({100 * t.draft_acceptance:.0f} %)"
        )
    prompt = t.prompt_n + t.cache_n
    share = 100 * t.cache_n / prompt if prompt else 0.0
    parts.append(f"prompt {prompt}, {t.cache_n} cached ({share:.0f} %)")
    return " · ".join(parts)


class ConsoleView:
    """The stream on a console: a prompt-processing bar with tokens/s, the reasoning dimmed,
    the answer as it streams, each tool call with its arguments as they arrive, then a last
    line with the finish reason, tokens, tokens/s, the draft acceptance and the prompt-cache
    reuse (see :func:`summary`)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self._section = ""
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._shown = 0  # pieces of this turn shown (see summary)

    # -- events --------------------------------------------------------------------------
    def asked(self, prompt: str) -> None:
        """A turn whose prompt came from the command line (after the first): shown as if
        typed at ``you>``."""
        self.console.print(Text.assemble("\n", ("you> ", "bold blue"), prompt), soft_wrap=True)

    def show(self, event: ChatEvent) -> None:
        if isinstance(event, PromptProgress):
            self._progress(event)
            return
        self._end_bar()
        if isinstance(event, _PIECES):
            self._shown += 1
        if isinstance(event, Reasoning):
            self._write(event.text, "reasoning", "dim italic")
        elif isinstance(event, Content):
            self._write(event.text, "answer", None)
        elif isinstance(event, ToolCallDelta):
            self._tool_piece(event)
        elif isinstance(event, ToolCallDone):
            self._section = "tool-done"
        elif not isinstance(event, ArgumentDelta):
            self._note(event)

    def _write(self, text: str, section: str, style: str | None) -> None:
        if self._section != section:
            if self._section:
                self._out("\n\n")
            self._section = section
        self._out(text, style)

    def _tool_piece(self, event: ToolCallDelta) -> None:
        if event.name is not None or self._section != "tool":
            self._out("\n\n" if self._section else "")
            self._out(f"⚙ {event.name or '?'} ", "bold cyan")
            self._section = "tool"
        self._out(event.arguments, "cyan")

    def _note(self, event: ChatEvent) -> None:
        text = _note_text(event)
        if text:
            if self._section:
                self._out("\n")
            self.console.print(Text(text, style="yellow"))
            self._section = ""

    def _out(self, text: str, style: str | None = None) -> None:
        self.console.print(Text(text, style=style or ""), end="", soft_wrap=True, highlight=False)

    def _progress(self, event: PromptProgress) -> None:
        if self._bar is None:
            self._bar = Progress(
                TextColumn("prompt"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("tokens{task.fields[rate]}"),
                console=self.console,
                auto_refresh=False,
            )
            self._bar.start()
            self._task = self._bar.add_task("prompt", total=event.total, rate="")
        assert self._task is not None
        self._bar.update(
            self._task, total=event.total, completed=event.processed, rate=_rate(event)
        )
        self._bar.refresh()

    def _end_bar(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    # -- the end -------------------------------------------------------------------------
    def _last_line(self, text: str, style: str) -> None:
        self._end_bar()
        if self._section:
            self._out("\n")
        self.console.print(Text(f"\n── {text}", style=style))
        self._section = ""
        self._shown = 0

    def finished(self, completion: Completion) -> None:
        self._last_line(summary(completion, shown=self._shown), "bold green")

    def stopped(self, partial: Completion) -> None:
        self._last_line(
            summary(partial, stopped="stopped (Ctrl-C)", shown=self._shown), "bold yellow"
        )

    def failed(self, error: Exception, partial: Completion) -> None:
        why = f"{type(error).__name__}: {error}"
        self._last_line(summary(partial, stopped=why, shown=self._shown), "bold red")


def _rate(event: PromptProgress) -> str:
    """`` · 1,234 tokens/s · 20 from cache``: the prompt tokens evaluated per second (cached
    ones cost nothing; ``in <1 ms`` when the server timed them at 0 ms) and the cache reuse,
    each when known."""
    parts = []
    new = event.processed - event.cache
    if event.time_ms is not None and new > 0:  # 0 ms: the server's clock said under 1 ms
        rate = f"{new / (event.time_ms / 1000):,.0f} tokens/s" if event.time_ms else "in <1 ms"
        parts.append(rate)
    if event.cache:
        parts.append(f"{event.cache} from cache")
    return "".join(f" · {p}" for p in parts)


def _note_text(event: ChatEvent) -> str:
    if isinstance(event, Waiting):
        return "… the slot is busy: waiting" if event.slot_busy else "… the model is loading"
    if isinstance(event, Queued):
        return f"… queued behind {event.ahead} request(s)"
    if isinstance(event, Retrying):
        return f"↻ retry {event.attempt} in {event.after_ms} ms ({event.error})"
    if isinstance(event, Resuming):
        return f"↻ the connection broke; resuming at byte {event.offset} ({event.error})"
    if isinstance(event, ThinkingCapped):
        return f"✂ thinking capped at {event.tokens} tokens"
    if isinstance(event, Proxied):
        return f"⚠ through {event.proxy}: no {', '.join(event.lost)}"
    return ""


_ENCODER = msgspec.json.Encoder()


def event_json(kind: str, value: object, **extra: object) -> bytes:
    """One JSON line: ``{"type": kind, **fields of value, **extra}``; the confidence fields
    only when the request asked for them (``top_logprobs``)."""
    fields = _asked(msgspec.to_builtins(value)) if value is not None else {}
    if not isinstance(fields, dict):
        fields = {"value": fields}
    return _ENCODER.encode({"type": kind, **fields, **_asked(extra)}) + b"\n"


_UNASKED = ("logprobs", "confidence")  # None unless the request asked for top_logprobs


def _asked(value: Any) -> Any:
    """``value`` without the confidence fields that are None, at any depth."""
    if isinstance(value, dict):
        return {
            k: _asked(v) for k, v in value.items() if not (v is None and k in _UNASKED)
        }
    if isinstance(value, list):
        return [_asked(v) for v in value]
    return value


class JsonView:
    """One JSON object per line: ``{"type": "<EventName>", ...fields}`` per event, then
    ``{"type": "Completion", ...}``; or ``{"type": "Stopped", "partial": ...}`` after Ctrl-C,
    or ``{"type": "Error", "error": "<ErrorName>", "message": ..., "partial": ...}``."""

    def __init__(self, out: IO[bytes] | None = None) -> None:
        self._out = out or sys.stdout.buffer

    def _line(self, data: bytes) -> None:
        self._out.write(data)
        self._out.flush()

    def asked(self, prompt: str) -> None:
        """Nothing: each turn's lines end with its own last line."""

    def show(self, event: ChatEvent) -> None:
        self._line(event_json(type(event).__name__, event))

    def finished(self, completion: Completion) -> None:
        self._line(event_json("Completion", completion))

    def stopped(self, partial: Completion) -> None:
        self._line(event_json("Stopped", None, partial=msgspec.to_builtins(partial)))

    def failed(self, error: Exception, partial: Completion) -> None:
        self._line(
            event_json(
                "Error",
                None,
                error=type(error).__name__,
                message=str(error),
                partial=msgspec.to_builtins(partial),
            )
        )
