"""llama-server's chat chunks, the one builder of them: FakeLlama's streams and the tests'
scripted ones (``tests/support``) are all made here, shaped as the wire notes (§1.3, key
order included) and the recordings show.

- :func:`chunk` is one ``chat.completion.chunk``: ``choices``, ``created``, ``id``,
  ``model``, ``system_fingerprint``, ``object``, then ``usage``, ``timings`` and
  ``prompt_progress`` when given; :func:`timings`, :func:`usage` and :func:`progress` are
  its objects, :func:`error_envelope` the error body, :func:`sse` one ``data:`` event.
- :class:`Layout` lays a whole answer out, HTTP chunk by HTTP chunk, as llama-server
  streams it:

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
  prefill's progress events spread over it, then each token (and the finish chunk) its
  ``pace`` after the one before.
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._types.messages import ToolCall

__all__ = [
    "DONE",
    "FINGERPRINT",
    "PREFILL_BATCHES",
    "ROLE",
    "Answer",
    "Head",
    "Layout",
    "Piece",
    "chunk",
    "dumps",
    "error_body",
    "error_envelope",
    "fake_id",
    "pieces",
    "progress",
    "prompt_tokens",
    "sse",
    "stream_chunks",
    "timings",
    "usage",
    "whole_answer",
]

_WORD = re.compile(r"\s*\S+")
_ALNUM = string.ascii_letters + string.digits
FINGERPRINT = "b0-fakellama"
PREFILL_BATCHES = 4  # a slow prefill's progress events: 0, 25, 50, 75 and 100 % of the prompt
ROLE: Mapping[str, Any] = {"role": "assistant", "content": None}  # the role delta (§1.4)

# -- one event --------------------------------------------------------------------------


def dumps(obj: Any) -> str:
    """JSON as llama-server writes it: compact, one line, raw UTF-8."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def sse(obj: Any) -> bytes:
    """One ``data:`` event: ``obj`` as compact JSON (a ``str`` as it is)."""
    return f"data: {obj if isinstance(obj, str) else dumps(obj)}\n\n".encode()


DONE = sse("[DONE]")  # the end of a stream, in an HTTP chunk of its own

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    500: "server_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


def error_envelope(code: int, message: str, type: str | None = None) -> dict[str, Any]:
    """llama-server's error body ``{"error":{"code","message","type"}}``; ``type`` defaults
    to the one llama-server uses for ``code``."""
    kind = type if type is not None else _ERROR_TYPES.get(code, "server_error")
    return {"error": {"code": code, "message": message, "type": kind}}


def error_body(code: int, message: str, type: str | None = None) -> bytes:
    """:func:`error_envelope` as the bytes llama-server sends."""
    return dumps(error_envelope(code, message, type)).encode()


def _rates(kind: str, ms: float, n: int, per_token: float) -> dict[str, float]:
    """``<kind>_per_token_ms`` and ``<kind>_per_second`` for ``n`` tokens in ``ms`` (at
    ``per_token`` ms a token when there are none)."""
    if n and ms:
        per_token = ms / n
    return {f"{kind}_per_token_ms": per_token, f"{kind}_per_second": 1000 / per_token}


def timings(
    cache_n: int,
    prompt_n: int,
    predicted_n: int,
    *,
    prompt_ms: float | None = None,
    predicted_ms: float | None = None,
    prompt_speed: float = 0.5,
    speed: float = 5.0,
) -> dict[str, Any]:
    """The ``timings`` object, in llama-server's key order. The milliseconds default to
    ``prompt_speed`` a prompt token and ``speed`` a generated one; the rates follow."""
    prompt = prompt_n * prompt_speed if prompt_ms is None else prompt_ms
    predicted = predicted_n * speed if predicted_ms is None else predicted_ms
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": prompt,
        **_rates("prompt", prompt, prompt_n, prompt_speed),
        "predicted_n": predicted_n,
        "predicted_ms": predicted,
        **_rates("predicted", predicted, predicted_n, speed),
    }


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """The ``usage`` object of the usage chunk (``prompt_tokens`` counts the cached ones)."""
    return {
        "completion_tokens": completion_tokens,
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def progress(total: int, cache: int, processed: int, time_ms: float) -> dict[str, Any]:
    """The ``prompt_progress`` object (``processed`` counts the cached tokens)."""
    return {"total": total, "cache": cache, "processed": processed, "time_ms": time_ms}


@dataclass(frozen=True)
class Head:
    """What every chunk of one answer carries besides its choice."""

    id: str
    model: str
    created: int
    fingerprint: str = FINGERPRINT


def chunk(
    delta: Mapping[str, Any] | None,
    finish: str | None = None,
    *,
    head: Head,
    index: int = 0,
    usage: Mapping[str, Any] | None = None,
    timings: Mapping[str, Any] | None = None,
    prompt_progress: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` in llama-server's key order. ``delta=None`` gives
    ``"choices":[]`` (the usage chunk); ``usage``, ``timings``, ``prompt_progress`` and then
    ``extra`` come last, each only when given."""
    choices = (
        [] if delta is None else [{"finish_reason": finish, "index": index, "delta": dict(delta)}]
    )
    out: dict[str, Any] = {
        "choices": choices,
        "created": head.created,
        "id": head.id,
        "model": head.model,
        "system_fingerprint": head.fingerprint,
        "object": "chat.completion.chunk",
    }
    for key, value in (
        ("usage", usage),
        ("timings", timings),
        ("prompt_progress", prompt_progress),
    ):
        if value is not None:
            out[key] = value
    out.update(extra)
    return out


# -- a whole answer ---------------------------------------------------------------------


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
    confidence: float | tuple[float, ...] = 1.0

    def probability(self, n: int) -> float:
        """The probability of the ``n``-th token (from 1)."""
        return _nth(self.confidence, n, 1.0)

    def delay(self, n: int) -> float:
        """Seconds between the ``n``-th chunk of the answer (from 1: the tokens, then the
        finish chunk) and the one before it."""
        return _nth(self.pace, n, 0.0)

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


def _nth(value: float | tuple[float, ...], n: int, past: float) -> float:
    """The ``n``-th (from 1) of one number for all, or of one each (``past`` after them)."""
    if isinstance(value, tuple):
        return value[n - 1] if n <= len(value) else past
    return value


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


def _no_pace(n: int) -> float:
    return 0.0


@dataclass
class Layout:
    """How one streamed answer goes on the wire (see the module doc): its :class:`Head`,
    the prompt (``total`` tokens, ``cache`` of them reused), whether every token's chunk
    carries ``timings`` (``per_token``) and the usage chunk comes (``usage``), the speeds
    the timings report (ms a token: ``prompt_speed``, ``speed``) and the ``prefill``'s
    seconds."""

    head: Head
    total: int
    cache: int
    per_token: bool = False
    usage: bool = False
    prompt_speed: float = 0.5
    speed: float = 5.0
    prefill: float = 0.0
    top: int | None = None  # the alternatives asked for with log-probabilities; None: none
    probability: Callable[[int], float] = lambda n: 1.0
    out: list[Piece] = field(default_factory=list)
    at: float = 0.0  # when the chunk emitted next is due
    generating: float = 0.0  # seconds the tokens took (paced answers)

    def timings(self, predicted: int) -> dict[str, Any]:
        return timings(
            self.cache,
            self.total - self.cache,
            predicted,
            prompt_ms=self.prefill * 1000 if self.prefill else None,
            predicted_ms=round(self.generating * 1000, 6) if self.generating else None,
            prompt_speed=self.prompt_speed,
            speed=self.speed,
        )

    def chunk(
        self, delta: Mapping[str, Any] | None, finish: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        return chunk(delta, finish, head=self.head, **extra)

    def emit(self, events: Sequence[dict[str, Any]], tokens: int, timed: bool) -> None:
        """One HTTP chunk of ``events``, ``timings`` on the last one when ``timed``."""
        events = list(events)
        if timed:
            events[-1] = _with_timings(events[-1], self.timings(tokens))
        self.out.append(Piece(b"".join(sse(e) for e in events), tokens, self.at))

    def progress(self) -> None:
        """The prompt's progress events: 0 and 100 %, or, with a prefill, one per batch
        spread over it (each due when its batch is in)."""
        batches = PREFILL_BATCHES if self.prefill else 1
        for i in range(batches + 1):
            processed = self.cache + -(-(self.total - self.cache) * i // batches)
            self.at = self.prefill * i / batches
            ms = (
                round(self.at * 1000, 3)
                if self.prefill
                else (processed - self.cache) * self.prompt_speed
            )
            done = progress(self.total, self.cache, processed, ms)
            self.emit([self.chunk(ROLE, prompt_progress=done)], 0, self.per_token and processed > 0)

    def pieces(
        self,
        deltas: Sequence[Mapping[str, Any]],
        finish: str | None,
        *,
        pace: Callable[[int], float] = _no_pace,
        role: bool = True,
        done: bool = True,
    ) -> list[Piece]:
        """The body after the progress events: ``deltas`` one per HTTP chunk (the role
        delta with the first, unless ``role`` is False), the final chunk with ``finish``
        (none when it is None: a truncated generation), then ``[DONE]`` (unless ``done`` is
        False). ``pace(n)`` is the seconds before the ``n``-th chunk (from 1)."""
        self.at = self.prefill
        for n, delta in enumerate(deltas, start=1):
            self.at += pace(n)
            self.generating = self.at - self.prefill
            first = [self.chunk(ROLE)] if n == 1 and role else []
            self.emit([*first, self._token(delta, n)], n, self.per_token)
        if not deltas and role:  # nothing generated: the role delta alone
            self.emit([self.chunk(ROLE)], 0, False)
        if finish is not None:
            self.at += pace(len(deltas) + 1)
            final = [self.chunk({}, finish)]
            if self.usage:
                final.append(self.chunk(None, usage=usage(self.total, len(deltas), self.cache)))
            self.emit(final, len(deltas), True)
        if done:
            self.out.append(Piece(DONE, len(deltas), self.at))
        return self.out

    def _token(self, delta: Mapping[str, Any], n: int) -> dict[str, Any]:
        """The chunk of the ``n``-th token, with its log-probability when they were asked
        for (the token's text is the delta's)."""
        out = self.chunk(delta)
        if self.top is not None:
            entry = logprob(_text(delta), self.probability(n), self.top)
            out["choices"][0]["logprobs"] = {"content": [entry]}
        return out


def _text(delta: Mapping[str, Any]) -> str:
    calls = delta.get("tool_calls")
    if calls:
        return str(calls[0].get("function", {}).get("arguments", ""))
    return str(delta.get("content") or delta.get("reasoning_content") or "")


def logprob(text: str, p: float, top: int) -> dict[str, Any]:
    """One token's log-probability entry as llama-server sends it: ``top`` alternatives,
    the token first, then one more (id 0, the rest of the probability) when there is room."""
    raw = list(text.encode())
    entry = {"id": 1, "token": text, "bytes": raw, "logprob": math.log(p)}
    alternatives = [dict(entry)]
    if p < 1:
        alternatives.append({"id": 0, "token": "", "bytes": [], "logprob": math.log(1 - p)})
    return {**entry, "top_logprobs": alternatives[:top]}


def asked_top(body: Mapping[str, Any]) -> int | None:
    """The alternatives a request asks for with log-probabilities (llama-server reads
    ``n_probs``, and ``logprobs: true`` as ``top_logprobs``, 20 by default); None: none."""
    n_probs = body.get("n_probs")
    if isinstance(n_probs, int) and n_probs > 0:
        return n_probs
    if body.get("logprobs") is True:
        top = body.get("top_logprobs", 20)
        return top if isinstance(top, int) and top > 0 else None
    return None


def _with_timings(event: Mapping[str, Any], times: dict[str, Any]) -> dict[str, Any]:
    """``event`` with ``timings``, in its place in the key order (before
    ``prompt_progress``)."""
    out = {k: v for k, v in event.items() if k != "prompt_progress"}
    out["timings"] = times
    if "prompt_progress" in event:
        out["prompt_progress"] = event["prompt_progress"]
    return out


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
    """The body of a streamed answer to the request ``body``, HTTP chunk by HTTP chunk; the
    prompt takes ``prefill`` seconds."""
    options = body.get("stream_options")
    with_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
    layout = Layout(
        Head(completion_id, model, created),
        total,
        cache,
        per_token=bool(body.get("timings_per_token")),
        usage=with_usage,
        prefill=prefill,
        top=asked_top(body),
        probability=answer.probability,
    )
    if body.get("return_progress"):
        layout.progress()
    max_tokens = body.get("max_tokens", body.get("n_predict"))
    deltas, finish = answer.deltas(max_tokens if isinstance(max_tokens, int) else None)
    return layout.pieces(deltas, finish, pace=answer.delay)


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
    layout = Layout(Head(completion_id, model, created), total, cache, prefill=prefill)
    out = {
        "choices": [{"finish_reason": finish, "index": 0, "message": message}],
        "created": created,
        "model": model,
        "system_fingerprint": FINGERPRINT,
        "object": "chat.completion",
        "usage": usage(total, len(deltas), cache),
        "id": completion_id,
        "timings": layout.timings(len(deltas)),
    }
    return dumps(out).encode()
