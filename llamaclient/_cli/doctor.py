"""``llamaclient doctor``: what a llama-server supports, one verdict per line.

Each check is one small request (the raw JSON of ``/props`` and ``/slots``, so every field the
server reports can be looked at); the last one is a real one-token chat, the proof that the
server can serve chats. The exit code is non-zero when it cannot.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import ChatRequest, Client, Config, InferError, UserMessage

__all__ = ["Verdict", "diagnose", "doctor_main"]

OK, WARN, BAD, INFO = "ok", "warn", "bad", "info"


@dataclass(frozen=True)
class Verdict:
    """One line: ``level`` is ok, warn, bad (the server cannot serve chats) or info."""

    name: str
    level: str
    detail: str


@dataclass
class _Seen:
    health: int | None = None
    props: dict[str, Any] | None = None


async def _status(client: Client, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    status, raw = await client._endpoint.call(method, path, data)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode("utf-8", "replace")


async def _reachable(client: Client, seen: _Seen) -> Verdict:
    try:
        status, _ = await _status(client, "GET", "/health")
    except InferError as exc:
        return Verdict("reachable", BAD, f"no: {exc}")
    seen.health = status
    return Verdict("reachable", OK, f"yes: {client.config.base_url} (/health {status})")


async def _model(client: Client, seen: _Seen) -> Verdict:
    try:
        status, props = await _status(client, "GET", "/props")
    except InferError as exc:
        return Verdict("model", BAD, f"/props failed: {exc}")
    if status == 503:
        return Verdict("model", WARN, "loading (the client waits for it)")
    if status >= 300 or not isinstance(props, dict):
        return Verdict("model", BAD, f"/props failed: HTTP {status}")
    seen.props = props
    if props.get("role") == "router":
        return Verdict("model", INFO, "chosen per request (router)")
    name = props.get("model_alias") or props.get("model_path") or "?"
    if props.get("is_sleeping"):
        return Verdict("model", WARN, f"{name}: sleeping (wakes on the next chat)")
    if seen.health == 503:
        return Verdict("model", WARN, f"{name}: loading (the client waits for it)")
    return Verdict("model", OK, f"{name}: loaded")


async def _router(client: Client, seen: _Seen) -> Verdict:
    props = seen.props or {}
    if props.get("role") != "router":
        return Verdict("router mode", INFO, "no: one model")
    try:
        _, body = await _status(client, "GET", "/models")
        names = [m.get("id", "?") for m in body.get("data", [])]
    except (InferError, AttributeError):
        names = []
    return Verdict("router mode", INFO, f"yes: models {', '.join(names) or '(none listed)'}")


async def _context(client: Client, seen: _Seen) -> Verdict:
    props = seen.props or {}
    n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
    slots = props.get("total_slots")
    if n_ctx is None and slots is None:
        return Verdict("context", INFO, "unknown (no /props)")
    return Verdict("context", OK, f"{n_ctx} tokens per slot, {slots} slot(s)")


def _template(seen: _Seen) -> tuple[dict[str, Any], str]:
    props = seen.props or {}
    return props.get("chat_template_caps") or {}, str(props.get("chat_template") or "")


async def _tools(client: Client, seen: _Seen) -> Verdict:
    caps, template = _template(seen)
    if "supports_tool_calls" in caps:
        yes = bool(caps.get("supports_tool_calls"))
        return Verdict("tools", OK if yes else WARN, "yes" if yes else "no: the template has none")
    if not template:
        return Verdict("tools", WARN, "unknown: no chat template reported")
    return Verdict("tools", WARN, "no: the server runs without --jinja")


async def _thinking(client: Client, seen: _Seen) -> Verdict:
    caps, template = _template(seen)
    marks = ("enable_thinking", "reasoning_content", "<think>")
    if caps.get("supports_preserve_reasoning") or any(m in template for m in marks):
        return Verdict("thinking", OK, "yes: the template has reasoning")
    return Verdict("thinking", INFO, "no: the template shows no reasoning")


async def _resume(client: Client, seen: _Seen) -> Verdict:
    try:
        status, _ = await _status(client, "POST", "/v1/streams/lookup", {"conversation_ids": []})
    except InferError as exc:
        return Verdict("resumable streams", WARN, f"unknown: {exc}")
    if status == 200:
        return Verdict("resumable streams", OK, "yes: a broken stream is picked up")
    return Verdict("resumable streams", INFO, f"no (HTTP {status}): a broken stream is an error")


async def _multimodal(client: Client, seen: _Seen) -> Verdict:
    modalities = (seen.props or {}).get("modalities") or {}
    kinds = [k for k, v in modalities.items() if v]
    if kinds:
        return Verdict("multimodal", OK, f"yes: {', '.join(kinds)}")
    return Verdict("multimodal", INFO, "no: text only")


async def _slots(client: Client, seen: _Seen) -> Verdict:
    try:
        status, slots = await _status(client, "GET", "/slots")
    except InferError as exc:
        return Verdict("/slots", WARN, f"unknown: {exc}")
    if status >= 300 or not isinstance(slots, list):
        return Verdict("/slots", INFO, f"no (HTTP {status}): slot pinning cannot see busy")
    busy = sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))
    return Verdict("/slots", OK, f"yes: {len(slots)} slot(s), {busy} busy")


async def _control(client: Client, seen: _Seen) -> Verdict:
    body = {"id": "chatcmpl-llamaclient-doctor", "action": "reasoning_end"}
    try:
        status, _ = await _status(client, "POST", "/v1/chat/completions/control", body)
    except InferError as exc:
        return Verdict("control endpoint", WARN, f"unknown: {exc}")
    if status == 200:
        return Verdict("control endpoint", OK, "yes: the thinking budget can end reasoning")
    return Verdict("control endpoint", INFO, f"no (HTTP {status}): thinking budgets cannot cap")


async def _chat(client: Client, seen: _Seen) -> Verdict:
    started = time.monotonic()
    request = ChatRequest([UserMessage("Say OK.")], max_tokens=1)
    try:
        completion = await client.complete(request)
    except InferError as exc:
        return Verdict("chat", BAD, f"no: {type(exc).__name__}: {exc}")
    took = time.monotonic() - started
    return Verdict("chat", OK, f"yes: answered ({completion.finish_reason}) in {took:.2f} s")


CHECKS: tuple[Callable[[Client, _Seen], Any], ...] = (
    _reachable, _model, _router, _context, _tools, _thinking, _resume, _multimodal, _slots,
    _control, _chat,
)


async def diagnose(client: Client, report: Callable[[Verdict], None]) -> bool:
    """Run the checks, reporting each verdict as it comes; True if the server can serve
    chats. An unreachable server stops the checks at once."""
    seen = _Seen()
    for check in CHECKS:
        verdict: Verdict = await check(client, seen)
        report(verdict)
        if verdict.level == BAD:
            return False
    return True


def doctor_main(url: str, report: Callable[[Verdict], None], timeout: float = 30.0) -> int:
    """Diagnose the server at ``url``: 0 if it can serve chats, else 3."""

    async def run() -> bool:
        config = Config(url, wait_timeout=timeout, load_timeout=timeout, max_retries=1,
                        connect_timeout=min(timeout, 5.0), retry_backoff=0.1)
        async with Client(config) as client:
            return await diagnose(client, report)

    return 0 if asyncio.run(run()) else 3
