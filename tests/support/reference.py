"""An independent reading of a chat stream, for expected results: stdlib json only, no code
shared with llamaclient. It folds ``data:`` payloads the simple, obvious way."""

from __future__ import annotations

import json
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
    }
    calls: list[dict[str, Any]] = []
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
            for piece in delta.get("tool_calls") or []:
                i = piece["index"]
                if i == len(calls):
                    calls.append({"id": None, "name": None, "arguments": ""})
                fn = piece.get("function") or {}
                calls[i]["id"] = calls[i]["id"] or piece.get("id")
                calls[i]["name"] = fn.get("name") or calls[i]["name"]
                calls[i]["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                out["finish_reason"] = choice["finish_reason"]
    out["tool_calls"] = [dict(c, extra={}) for c in calls]
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
