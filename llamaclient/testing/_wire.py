"""What FakeLlama sends: a scripted answer turned into llama-server's stream, HTTP chunk by
HTTP chunk, shaped as the wire notes (§1) and the recordings show:

- with ``return_progress``: a 0 % and a 100 % progress event, each with the role delta
  (with a slow prefill: 0, 25, 50, 75 and 100 %, spread over the prefill's seconds);
- the first token's HTTP chunk carries the role delta and the token's delta; every later
  token is one HTTP chunk with one delta (reasoning, then content, then tool calls);
- a tool call's first delta carries its id, type, name and first argument fragment, the
  later ones only argument fragments;
- with ``timings_per_token``: ``timings`` on the last event of every chunk;
- the final chunk: the finish chunk and, with ``stream_options.include_usage``, the usage
  chunk (``choices: []``), ``timings`` on the last of them; then ``data: [DONE]`` alone.

Each HTTP chunk carries the time it is due, in seconds after the response headers: the
prefill's progress events spread over it, then each token (and the finish chunk) ``pace``
seconds after the one before.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._types.messages import ToolCall

__all__ = [
    "PREFILL_BATCHES",
    "Answer",
    "Piece",
    "error_body",
    "pieces",
    "prompt_tokens",
    "stream_chunks",
]

_WORD = re.compile(r"\s*\S+")
_ALNUM = string.ascii_letters + string.digits
FINGERPRINT = "b0-fakellama"
PREFILL_BATCHES = 4  # a slow prefill's progress events: 0, 25, 50, 75 and 100 % of the prompt


def pieces(text: str, chunk: int | None) -> list[str]:
    """``text`` cut the way tokens arrive: ``chunk`` characters each, or word by word (each
    word with the spaces before it) when ``chunk`` is None."""
    if not text:
        return []
    if chunk is not None:
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, not {chunk}")
        return [text[i : i + chunk] for i in range(0, len(text), chunk)]
    out = _WORD.findall(text)
    rest = text[sum(map(len, out)) :]
    return [*out, rest] if rest else out


def prompt_tokens(message: Mapping[str, Any]) -> int:
    """A stand-in token count for one message: about four characters a token."""
    return len(json.dumps(message, ensure_ascii=False)) // 4 + 1


def fake_id(n: int, length: int = 32) -> str:
    """A deterministic id of ``length`` characters from ``[0-9A-Za-z]`` (llama-server's
    alphabet), the ``n``-th of a sequence."""
    out = []
    x = n * 2654435761 + 12345
    for _ in range(length):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(_ALNUM[(x >> 33) % len(_ALNUM)])
    return "".join(out)


@dataclass(frozen=True)
class Answer:
    """One scripted answer: what ``FakeLlama.reply`` queued."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    chunk: int | None = None
    finish: str | None = None
    pace: float | tuple[float, ...] = 0.0

    def delay(self, n: int) -> float:
        """Seconds between the ``n``-th chunk of the answer (from 1: the tokens, then the
        finish chunk) and the one before it."""
        if isinstance(self.pace, tuple):
            return self.pace[n - 1] if n <= len(self.pace) else 0.0
        return self.pace

    def deltas(self, max_tokens: int | None) -> tuple[list[dict[str, Any]], str]:
        """The token deltas in order, and the finish reason (``length`` when ``max_tokens``
        cut them)."""
        out: list[dict[str, Any]] = [
            {"reasoning_content": p} for p in pieces(self.reasoning or "", self.chunk)
        ]
        out += [{"content": p} for p in pieces(self.content or "", self.chunk)]
        for index, call in enumerate(self.tool_calls):
            out += _call_deltas(index, call, self.chunk)
        finish = self.finish or ("tool_calls" if self.tool_calls else "stop")
        if max_tokens is not None and 0 <= max_tokens < len(out):
            return out[:max_tokens], self.finish or "length"
        return out, finish

    def echo(self) -> dict[str, Any]:
        """The assistant message exactly as ``Completion.message()`` sends it back."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                    **c.extra,
                }
                for c in self.tool_calls
            ]
        return message


def _call_deltas(index: int, call: ToolCall, chunk: int | None) -> list[dict[str, Any]]:
    fragments = pieces(call.arguments, chunk) or [""]
    first = {
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": fragments[0]},
    }
    rest = [{"index": index, "function": {"arguments": f}} for f in fragments[1:]]
    return [{"tool_calls": [d]} for d in (first, *rest)]


@dataclass
class Piece:
    """One HTTP chunk of the body, how many token deltas the body holds up to it, and when
    it is due (seconds after the response headers)."""

    data: bytes
    tokens: int
    at: float = 0.0


@dataclass
class _Stream:
    base: dict[str, Any]
    total: int
    cache: int
    per_token: bool
    prefill: float = 0.0
    out: list[Piece] = field(default_factory=list)
    at: float = 0.0  # when the chunk emitted next is due
    generating: float = 0.0  # seconds the tokens took (paced answers)

    def timings(self, predicted: int) -> dict[str, Any]:
        prompt_n = self.total - self.cache
        prompt_ms = self.prefill * 1000 if self.prefill else prompt_n * 0.5
        predicted_ms = round(self.generating * 1000, 6) if self.generating else predicted * 5.0
        return {
            "cache_n": self.cache,
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            **_rates("prompt", prompt_ms, prompt_n, 0.5),
            "predicted_n": predicted,
            "predicted_ms": predicted_ms,
            **_rates("predicted", predicted_ms, predicted, 5.0),
        }

    def chunk(
        self, delta: dict[str, Any] | None, finish: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        choices = [] if delta is None else [{"finish_reason": finish, "index": 0, "delta": delta}]
        return {"choices": choices, **self.base, **extra}

    def emit(self, events: Sequence[dict[str, Any]], tokens: int, timed: bool) -> None:
        events = list(events)
        if timed:
            events[-1] = {**events[-1], "timings": self.timings(tokens)}
        data = b"".join(sse(e) for e in events)
        self.out.append(Piece(data, tokens, self.at))

    def progress(self) -> None:
        """The prompt's progress events: 0 and 100 %, or, with a prefill, one per batch
        spread over it (each due when its batch is in)."""
        batches = PREFILL_BATCHES if self.prefill else 1
        for i in range(batches + 1):
            processed = self.cache + -(-(self.total - self.cache) * i // batches)
            self.at = self.prefill * i / batches
            ms = round(self.at * 1000, 3) if self.prefill else (processed - self.cache) * 0.5
            progress = {"total": self.total, "cache": self.cache, "processed": processed,
                        "time_ms": ms}
            self.emit([self.chunk(ROLE, prompt_progress=progress)], 0,
                      self.per_token and processed > 0)


def _rates(kind: str, ms: float, n: int, per_token: float) -> dict[str, float]:
    """``<kind>_per_token_ms`` and ``<kind>_per_second`` for ``n`` tokens in ``ms``."""
    if n and ms:
        per_token = ms / n
    return {f"{kind}_per_token_ms": per_token, f"{kind}_per_second": 1000 / per_token}


def sse(obj: Any) -> bytes:
    """One ``data:`` event, compact JSON as llama-server writes it."""
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False,
                                                        separators=(",", ":"))
    return f"data: {text}\n\n".encode()


ROLE = {"role": "assistant", "content": None}


def stream_chunks(
    answer: Answer,
    body: Mapping[str, Any],
    *,
    completion_id: str,
    model: str,
    total: int,
    cache: int,
    created: int,
    prefill: float = 0.0,
) -> list[Piece]:
    """The body of a streamed answer to ``body``, HTTP chunk by HTTP chunk; the prompt takes
    ``prefill`` seconds."""
    base = {
        "created": created,
        "id": completion_id,
        "model": model,
        "system_fingerprint": FINGERPRINT,
        "object": "chat.completion.chunk",
    }
    s = _Stream(base, total, cache, bool(body.get("timings_per_token")), prefill)
    if body.get("return_progress"):
        s.progress()
    s.at = prefill
    max_tokens = body.get("max_tokens", body.get("n_predict"))
    deltas, finish = answer.deltas(max_tokens if isinstance(max_tokens, int) else None)
    for n, delta in enumerate(deltas, start=1):
        s.at += answer.delay(n)
        s.generating = s.at - prefill
        events = [s.chunk(ROLE), s.chunk(delta)] if n == 1 else [s.chunk(delta)]
        s.emit(events, n, s.per_token)
    if not deltas:  # nothing generated: the role delta alone
        s.emit([s.chunk(ROLE)], 0, False)
    s.at += answer.delay(len(deltas) + 1)
    final = [s.chunk({}, finish)]
    options = body.get("stream_options")
    if isinstance(options, Mapping) and options.get("include_usage"):
        usage = {
            "completion_tokens": len(deltas),
            "prompt_tokens": total,
            "total_tokens": total + len(deltas),
            "prompt_tokens_details": {"cached_tokens": cache},
        }
        final.append(s.chunk(None, usage=usage))
    s.emit(final, len(deltas), True)
    s.out.append(Piece(sse("[DONE]"), len(deltas), s.at))
    return s.out


def whole_answer(
    answer: Answer,
    body: Mapping[str, Any],
    *,
    completion_id: str,
    model: str,
    total: int,
    cache: int,
    created: int,
    prefill: float = 0.0,
) -> bytes:
    """The JSON body of a non-streamed answer (``"stream": false``)."""
    max_tokens = body.get("max_tokens")
    deltas, finish = answer.deltas(max_tokens if isinstance(max_tokens, int) else None)
    message: dict[str, Any] = {"role": "assistant"}
    message["content"] = "".join(d.get("content", "") for d in deltas) or None
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    if reasoning:
        message["reasoning_content"] = reasoning
    if answer.tool_calls:
        message["tool_calls"] = answer.echo()["tool_calls"]
    s = _Stream({}, total, cache, False, prefill)
    out = {
        "choices": [{"finish_reason": finish, "index": 0, "message": message}],
        "created": created,
        "model": model,
        "system_fingerprint": FINGERPRINT,
        "object": "chat.completion",
        "usage": {"completion_tokens": len(deltas), "prompt_tokens": total,
                  "total_tokens": total + len(deltas),
                  "prompt_tokens_details": {"cached_tokens": cache}},
        "id": completion_id,
        "timings": s.timings(len(deltas)),
    }
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()


def error_body(code: int, message: str, type: str) -> bytes:
    """llama-server's error envelope."""
    return json.dumps({"error": {"code": code, "message": message, "type": type}}).encode()
