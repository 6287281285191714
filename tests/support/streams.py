"""Synthetic llama-server streams, shaped exactly as wire §1 describes (key order included)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llamaclient.testing import _wire as wire

ID = "chatcmpl-Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1d"
HEAD = wire.Head(ID, "tiny.gguf", 1760000000, "b1-515e855")
ROLE = wire.ROLE
USAGE = wire.usage(20, 7, 0)


def chunk(
    delta: Mapping[str, Any] | None = None, finish: str | None = None, **fields: Any
) -> dict[str, Any]:
    """One chunk of these streams (the testing kit's builder, with this module's head)."""
    return wire.chunk(delta, finish, head=HEAD, **fields)


def timings(n: int, cache: int = 0, prompt: int = 20) -> dict[str, Any]:
    """``n`` tokens in 2 ms each, after ``prompt`` tokens in 12.5 ms."""
    return wire.timings(cache, prompt, n, prompt_ms=12.5, speed=2.0)


def reasoning_answer() -> list[dict[str, Any]]:
    return [
        chunk(ROLE, prompt_progress=wire.progress(20, 0, 0, 0)),
        chunk(ROLE, prompt_progress=wire.progress(20, 0, 20, 3), timings=timings(0)),
        chunk(ROLE),
        chunk({"reasoning_content": "Let me "}, timings=timings(2)),
        chunk({"reasoning_content": "check é ✓."}, timings=timings(3)),
        chunk({"content": "Done"}, timings=timings(5)),
        chunk({"content": " — 好."}, timings=timings(6)),
        chunk({}, "stop"),
        chunk(None, usage=USAGE, timings=timings(7)),
    ]


def tool_calls() -> list[dict[str, Any]]:
    return [
        chunk(ROLE),
        chunk({"reasoning_content": "Files."}, timings=timings(1)),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "a" * 32,
                        "type": "function",
                        "function": {"name": "list_dir", "arguments": '{"path": "."}'},
                    }
                ]
            },
            timings=timings(9),
        ),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "b" * 32,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": "{"},
                    }
                ]
            },
            timings=timings(12),
        ),
        chunk(
            {"tool_calls": [{"index": 1, "function": {"arguments": '"path": '}}]},
            timings=timings(14),
        ),
        chunk(
            {"tool_calls": [{"index": 1, "function": {"arguments": '"notes.txt"}'}}]},
            timings=timings(16),
        ),
        chunk({}, "tool_calls", timings=timings(17)),
    ]


def answer_only() -> list[dict[str, Any]]:
    return [
        chunk(ROLE),
        chunk({"content": "Hi"}, timings=timings(1)),
        chunk({}),  # the "shrink" case: an empty delta mid-stream
        chunk({"content": "!\n"}, timings=timings(2)),
        chunk({}, "length", timings=timings(2)),
    ]


ALL = {"reasoning_answer": reasoning_answer, "tool_calls": tool_calls, "answer_only": answer_only}


def payloads(chunks: list[dict[str, Any]], done: bool = True) -> list[str]:
    out = [wire.dumps(c) for c in chunks]
    return [*out, "[DONE]"] if done else out


def sse_bytes(texts: list[str]) -> bytes:
    return b"".join(map(wire.sse, texts))
