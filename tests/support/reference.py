"""An independent reading of a chat stream, for expected results: stdlib json only, no code
shared with llamaclient. It folds ``data:`` payloads the simple, obvious way."""

from __future__ import annotations

import json
import math
from typing import Any


def fold(payloads: list[str]) -> dict[str, Any]:
    """Fold payload texts into the JSON the Completion should convert to."""
    out: dict[str, Any] = {
        "id": None,
        "model": None,
        "content": None,
        "reasoning_content": None,
        "tool_calls": [],
        "finish_reason": None,
        "timings": None,
        "usage": {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None},
        "reasoning_field": "reasoning_content",
        "logprobs": None,
    }
    calls: list[dict[str, Any]] = []
    pieces: list[list[tuple[int, int, list[float]]]] = []  # per call: pieces with tokens
    for text in payloads:
        if text.strip() == "[DONE]":
            break
        chunk = json.loads(text)
        out["id"] = out["id"] or chunk.get("id")
        out["model"] = chunk.get("model", out["model"])
        if chunk.get("timings") is not None:
            t = chunk["timings"]
            out["timings"] = {
                k: t.get(k)
                for k in (
                    "cache_n",
                    "prompt_n",
                    "predicted_n",
                    "prompt_ms",
                    "prompt_per_second",
                    "predicted_ms",
                    "predicted_per_second",
                    "draft_n",
                    "draft_n_accepted",
                )
            }
            for k in ("cache_n", "prompt_n", "predicted_n"):
                out["timings"][k] = out["timings"][k] or 0
        if chunk.get("usage") is not None:
            u = chunk["usage"]
            out["usage"] = {
                "prompt_tokens": u.get("prompt_tokens"),
                "completion_tokens": u.get("completion_tokens"),
                "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens"),
            }
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            _texts(delta, out)
            _logprobs(choice, out)
            tokens = (choice.get("logprobs") or {}).get("content") or []
            for n, piece in enumerate(delta.get("tool_calls") or []):
                i = piece["index"]
                if i == len(calls):
                    calls.append({"id": None, "name": None, "arguments": ""})
                    pieces.append([])
                fn = piece.get("function") or {}
                calls[i]["id"] = calls[i]["id"] or piece.get("id")
                calls[i]["name"] = fn.get("name") or calls[i]["name"]
                start = len(calls[i]["arguments"])
                calls[i]["arguments"] += fn.get("arguments") or ""
                end = len(calls[i]["arguments"])
                if tokens and end > start and n == len(delta["tool_calls"]) - 1:
                    pieces[i].append((start, end, [math.exp(t["logprob"]) for t in tokens]))
            if choice.get("finish_reason"):
                out["finish_reason"] = choice["finish_reason"]
    out["tool_calls"] = [
        dict(c, extra={}, confidence=_confidence(c["arguments"], p))
        for c, p in zip(calls, pieces, strict=True)
    ]
    t = out["timings"]
    out["cache"] = None
    if t is not None:  # the prompt in all, and what the cache gave of it
        out["cache"] = {
            "prompt": t["prompt_n"] + t["cache_n"],
            "reused": t["cache_n"],
            "expected": None,
            "reason": None,
            "detail": "",
        }
    return out


def _texts(delta: dict[str, Any], out: dict[str, Any]) -> None:
    """The thinking (``reasoning_content``, else ``reasoning``) and the answer of a delta."""
    thought = delta.get("reasoning_content")
    if thought is None and delta.get("reasoning") is not None:
        thought = delta["reasoning"]  # vLLM, Groq, OpenRouter
        out["reasoning_field"] = "reasoning"
    if thought:
        out["reasoning_content"] = (out["reasoning_content"] or "") + thought
    if delta.get("content"):
        out["content"] = (out["content"] or "") + delta["content"]


def _logprobs(choice: dict[str, Any], out: dict[str, Any]) -> None:
    """A choice's tokens, each with every field (what was not sent: None, or no
    alternatives)."""
    tokens = (choice.get("logprobs") or {}).get("content") or []
    for t in tokens:
        top = [
            {k: alt.get(k) for k in ("token", "logprob", "bytes", "id")}
            for alt in t.get("top_logprobs") or []
        ]
        entry = {k: t.get(k) for k in ("token", "logprob", "bytes")}
        out["logprobs"] = (out["logprobs"] or []) + [dict(entry, top_logprobs=top, id=t.get("id"))]


def _confidence(
    arguments: str, pieces: list[tuple[int, int, list[float]]]
) -> dict[str, Any] | None:
    """Each top-level field's min and mean token probability over the pieces that overlap
    its value (a character walk, not a decoder)."""
    if not pieces:
        return None
    out = {}
    for key, (start, end) in _spans(arguments).items():
        ps = [p for a, b, probs in pieces if a < end and b > start for p in probs]
        if ps:
            out[key] = {"min": min(ps), "mean": math.fsum(ps) / len(ps), "tokens": len(ps)}
    return out or None


def _spans(text: str) -> dict[str, tuple[int, int]]:
    """Top-level values of a JSON object text by walking its characters: a value starts
    at the first non-space after a depth-1 colon, and ends after its last non-space before
    the depth-1 comma or closing brace."""
    walk = _Walk(text)
    for i, c in enumerate(text):
        if walk.in_string:
            walk.string(i, c)
        elif not c.isspace():
            walk.structure(i, c)
    return walk.spans


class _Walk:
    def __init__(self, text: str) -> None:
        self.text = text
        self.spans: dict[str, tuple[int, int]] = {}
        self.depth, self.in_string, self.escaped = 0, False, False
        self.key_start, self.key, self.start, self.last = -1, "", -1, -1

    def string(self, i: int, c: str) -> None:
        if self.escaped:
            self.escaped = False
        elif c == "\\":
            self.escaped = True
        elif c == '"':
            self.in_string = False
            if self.depth == 1 and self.start < 0:
                self.key = json.loads(self.text[self.key_start : i + 1])
        self.last = i

    def structure(self, i: int, c: str) -> None:
        if self.depth == 1 and self.start < 0 and c == ":":
            self.start = -2  # the value starts at the next character that is not a space
            return
        if self.start == -2:
            self.start = i
        if c == '"':
            self.in_string = True
            self.key_start = i
        self.depth += (c in "{[") - (c in "}]")
        if (self.depth == 1 and c == ",") or (self.depth == 0 and c == "}"):
            if self.start >= 0:
                self.spans[self.key] = (self.start, self.last + 1)
            self.start = -1
            return
        self.last = i
