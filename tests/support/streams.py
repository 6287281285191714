"""Synthetic llama-server streams, shaped exactly as wire §1 describes (key order included)."""

from __future__ import annotations

import json
from typing import Any

ID = "chatcmpl-Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1d"
BASE = {
    "created": 1760000000,
    "id": ID,
    "model": "tiny.gguf",
    "system_fingerprint": "b1-515e855",
    "object": "chat.completion.chunk",
}


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    choices = [] if delta is None else [{"finish_reason": finish, "index": 0, "delta": delta}]
    return {"choices": choices, **BASE, **extra}


def timings(n: int, cache: int = 0, prompt: int = 20) -> dict[str, Any]:
    return {
        "cache_n": cache,
        "prompt_n": prompt,
        "prompt_ms": 12.5,
        "prompt_per_token_ms": 0.6,
        "prompt_per_second": 1600.0,
        "predicted_n": n,
        "predicted_ms": 2.0 * n,
        "predicted_per_token_ms": 2.0,
        "predicted_per_second": 500.0,
    }


ROLE = {"role": "assistant", "content": None}
USAGE = {
    "completion_tokens": 7,
    "prompt_tokens": 20,
    "total_tokens": 27,
    "prompt_tokens_details": {"cached_tokens": 0},
}


def reasoning_answer() -> list[dict[str, Any]]:
    progress = {"total": 20, "cache": 0, "processed": 0, "time_ms": 0}
    return [
        chunk(ROLE, prompt_progress=progress),
        chunk(ROLE, prompt_progress=dict(progress, processed=20, time_ms=3), timings=timings(0)),
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
    out = [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in chunks]
    return [*out, "[DONE]"] if done else out


def sse_bytes(texts: list[str]) -> bytes:
    return b"".join(b"data: " + t.encode() + b"\n\n" for t in texts)
