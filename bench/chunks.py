"""Realistic llama-server chat chunks, as bytes on the wire.

Follows ``/work/shared/llama-server-wire.md`` §1.2 to §1.6 with ``timings_per_token`` and
``stream_options.include_usage`` on: compact JSON in the server's key order, ``timings`` on
every chunk, the role delta in the same HTTP chunk as the first token, then the finish and
usage chunks in one HTTP chunk, then ``data: [DONE]`` in its own. Each event is one HTTP chunk
(``Transfer-Encoding: chunked``), as one provider call of the real server.

A stream is described by a :class:`Spec`, which travels as the request's ``model`` field
(``"bench:mode=bulk,kind=content,n=20000"``) so that every contender, whatever it builds
the body with, can select it.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["Spec", "frame", "stream_chunks", "stamped_chunk", "DONE", "LAST"]

Mode = Literal["bulk", "paced", "hold"]
Kind = Literal["content", "reasoning", "tool"]

_ID = "chatcmpl-" + "".join(random.Random(7).choices("abcdefghijklmnopqrstuvwxyz0123456789", k=32))
_CHOICE = '[{"finish_reason":%s,"index":0,"delta":%s}]'
_TAIL = (
    f'"id":"{_ID}","model":"gemma-3-270m-it-Q4_K_M.gguf",'
    '"system_fingerprint":"b7000-515e85511","object":"chat.completion.chunk"'
)
_WORDS = (
    " the", " model", " writes", " one", " token", " at", " a", " time", ",", " and",
    " each", " piece", " is", " small", ".", " Ü", "ber", " naïve", " café", " 漢字",
    " 🦙", "\n", " \"quoted\"", " x", "1", "2", " =", " (", ")", ":",
)  # fmt: skip


@dataclass(frozen=True)
class Spec:
    """One fake stream: ``n`` main chunks of ``kind``, written per ``mode``.

    - ``bulk``: as fast as the socket takes them.
    - ``paced``: ``rate`` events/s, starting at a random phase; content is the send time.
    - ``hold``: the role delta and one content chunk, then nothing until the client leaves.
    """

    mode: Mode = "bulk"
    kind: Kind = "content"
    n: int = 1000
    rate: float = 50.0

    def model(self) -> str:
        return f"bench:mode={self.mode},kind={self.kind},n={self.n},rate={self.rate:g}"

    @classmethod
    def parse(cls, model: str) -> Spec:
        spec = cls()
        if not model.startswith("bench:"):
            return spec
        fields = dict(item.split("=", 1) for item in model[6:].split(",") if "=" in item)
        return replace(
            spec,
            mode=fields.get("mode", spec.mode),  # type: ignore[arg-type]
            kind=fields.get("kind", spec.kind),  # type: ignore[arg-type]
            n=int(fields.get("n", spec.n)),
            rate=float(fields.get("rate", spec.rate)),
        )


def _timings(i: int) -> str:
    ms = 8.0 * i + 0.37 * (i % 7)
    return (
        '"timings":{"cache_n":0,"prompt_n":24,"prompt_ms":12.617,"prompt_per_token_ms":0.525,'
        f'"prompt_per_second":1902.19,"predicted_n":{i},"predicted_ms":{ms:.3f},'
        f'"predicted_per_token_ms":{ms / max(i, 1):.6f},'
        f'"predicted_per_second":{1000.0 * i / max(ms, 1e-9):.6f}}}'
    )


def event(delta: str, i: int, finish: str = "null") -> bytes:
    """One SSE event: ``data: <chunk JSON>\\n\\n`` with ``timings`` for token ``i``."""
    return _event(_CHOICE % (finish, delta), "," + _timings(i))


def _event(choices: str, extra: str) -> bytes:
    text = '{"choices":' + choices + ',"created":1760000000,' + _TAIL + extra + "}"
    return b"data: " + text.encode() + b"\n\n"


def frame(payload: bytes) -> bytes:
    """One HTTP chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


DONE = frame(b"data: [DONE]\n\n")
LAST = b"0\r\n\r\n"
_ROLE = '{"role":"assistant","content":null}'


def _text_delta(key: str, text: str) -> str:
    return '{"' + key + '":' + json.dumps(text, ensure_ascii=False) + "}"


def _tool_fragments(n: int) -> Iterator[str]:
    """``n`` pieces of a ``write_file`` call's JSON arguments, cut mid-escape too."""
    body = "".join(_WORDS[i % len(_WORDS)] for i in range(n))
    text = json.dumps({"path": "src/app.py", "content": body}, ensure_ascii=False)
    step = max(1, len(text) // n)
    cuts = [min(i * step, len(text)) for i in range(n)] + [len(text)]
    for a, b in itertools.pairwise(cuts):
        yield text[a:b] if b > a else " "  # never empty: a real server sends no empty piece


def _main_deltas(spec: Spec) -> Iterator[str]:
    if spec.kind == "tool":
        pieces = _tool_fragments(spec.n)
        first = next(pieces)
        yield (
            '{"tool_calls":[{"index":0,"id":"Xk3b9QeR1mZ7tLp0aVw2sYc8uNf4hJd6","type":"function",'
            '"function":{"name":"write_file","arguments":'
            + json.dumps(first, ensure_ascii=False)
            + "}}]}"
        )
        for piece in pieces:
            args = json.dumps(piece, ensure_ascii=False)
            yield '{"tool_calls":[{"index":0,"function":{"arguments":' + args + "}}]}"
        return
    reasoning = spec.n // 2 if spec.kind == "reasoning" else 0
    for i in range(spec.n):
        key = "reasoning_content" if i < reasoning else "content"
        yield _text_delta(key, _WORDS[i % len(_WORDS)])


def final_chunk(spec: Spec) -> bytes:
    """The finish chunk and the usage chunk (with ``timings``), one HTTP chunk."""
    finish = '"tool_calls"' if spec.kind == "tool" else '"stop"'
    n = spec.n
    usage = (
        f',"usage":{{"completion_tokens":{n},"prompt_tokens":24,"total_tokens":{n + 24},'
        '"prompt_tokens_details":{"cached_tokens":0}}'
    )
    stop = _event(_CHOICE % (finish, "{}"), "")
    return frame(stop + _event("[]", usage + "," + _timings(n)))


def stream_chunks(spec: Spec) -> Iterator[bytes]:
    """The HTTP chunks of a whole stream (role + first token together, ..., final, DONE)."""
    deltas = _main_deltas(spec)
    first = next(deltas, None)
    role = event(_ROLE, 1)
    yield frame(role + event(first, 1)) if first is not None else frame(role)
    for i, delta in enumerate(deltas, start=2):
        yield frame(event(delta, i))
    yield final_chunk(spec)
    yield DONE


_STAMP = "@@stamp@@"


@functools.lru_cache(maxsize=8192)
def _stamped_parts(i: int, first: bool) -> tuple[bytes, bytes]:
    """The bytes of chunk ``i``'s SSE text before and after its send time (cached: the paced
    server writes tens of thousands of these per second)."""
    delta = f'{{"content":"{_STAMP} "}}'
    whole = event(_ROLE, 1) + event(delta, 1) if first else event(delta, i)
    head, tail = whole.split(_STAMP.encode())
    return head, tail


def stamped_chunk(i: int, now: float, first: bool) -> bytes:
    """A paced content chunk whose text is its send time (``time.time()``)."""
    head, tail = _stamped_parts(i, first)
    stamp = b"%.6f" % now
    return b"%x\r\n%s%s%s\r\n" % (len(head) + len(stamp) + len(tail), head, stamp, tail)
