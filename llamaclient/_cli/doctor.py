"""``llamaclient doctor``: what a llama-server supports, one verdict per line.

Each check is one small request; the last one is a real one-token chat, the proof that the
server can serve chats. The exit code is non-zero when it cannot. On a router the checks
after the first look at one model: ``--model``, or the first loaded one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from .. import (
    AuthenticationError,
    ChatRequest,
    Client,
    Config,
    HTTPStatusError,
    InferError,
    ModelInfo,
    Props,
    Transport,
    UserMessage,
)
from .options import API_KEY_ENV

__all__ = ["Probe", "Verdict", "diagnose", "doctor_main", "http_probe"]

OK, WARN, BAD, INFO = "ok", "warn", "bad", "info"

Probe = Callable[[str, str, dict[str, Any]], Awaitable[int | None]]
"""A request the client has no method for (``method, path, JSON body``): its HTTP status, or
None when no answer came."""


@dataclass(frozen=True)
class Verdict:
    """One line: ``level`` is ok, warn, bad (the server cannot serve chats) or info."""

    name: str
    level: str
    detail: str


class _Doctor:
    """The client the checks use (on a router, for the chosen model) and what earlier checks
    saw."""

    def __init__(self, config: Config, transport: Transport | None, probe: Probe) -> None:
        self.wanted = config.model  # --model
        self.config = msgspec.structs.replace(config, model="")  # the server's own answers
        self.transport = transport
        self.probe = probe
        self.client = Client(self.config, transport=transport)
        self.health: int | None = None
        self.props: Props | None = None
        self.router = False
        self.models: list[ModelInfo] = []

    async def use_model(self, name: str) -> None:
        """From now on, ask about model ``name`` (``?model=``, the chat's ``model``)."""
        await self.client.aclose()
        self.config = msgspec.structs.replace(self.config, model=name)
        self.client = Client(self.config, transport=self.transport)


def _failed(name: str, exc: InferError, what: str) -> Verdict:
    """The verdict for a request that failed; a refused API key says so by name."""
    if isinstance(exc, AuthenticationError):
        return Verdict(
            "API key",
            BAD,
            f"no: wrong or missing API key (HTTP {exc.status}): "
            f"give it with --api-key KEY or ${API_KEY_ENV}",
        )
    if isinstance(exc, HTTPStatusError) and exc.status == 503:
        return Verdict(name, WARN, "loading (the client waits for it)")
    return Verdict(name, BAD, f"{what}: {type(exc).__name__}: {exc}")


async def _reachable(d: _Doctor) -> Verdict:
    try:
        await d.client.health()
        d.health = 200
    except AuthenticationError as exc:
        return _failed("reachable", exc, "/health")
    except HTTPStatusError as exc:  # it answered: 503 while the model loads
        d.health = exc.status
    except InferError as exc:
        return Verdict("reachable", BAD, f"no: {exc}")
    return Verdict("reachable", OK, f"yes: {d.config.base_url} (/health {d.health})")


def _loaded(d: _Doctor, props: Props, note: str = "") -> Verdict:
    d.props = props
    name = props.model_alias or props.model_path or "(unnamed)"
    if props.is_sleeping:
        return Verdict("model", WARN, f"{name}: sleeping (wakes on the next chat){note}")
    if d.health == 503:
        return Verdict("model", WARN, f"{name}: loading (the client waits for it){note}")
    return Verdict("model", OK, f"{name}: loaded{note}")


def _choose(models: list[ModelInfo], wanted: str) -> tuple[str | None, str]:
    """The router's model to check, and a note saying why (or, with None, why none)."""
    names = [m.id for m in models]
    if wanted:
        if any(wanted == m.id or wanted in m.aliases for m in models):
            return wanted, ""
        return None, f"{wanted}: the router has no such model (it has {', '.join(names)})"
    ready = [m.id for m in models if m.ready]
    if ready:
        return ready[0], " (the router's first loaded model; --model NAME checks another)"
    if names:
        return names[0], " (none was loaded: loaded now; --model NAME checks another)"
    return None, "the router lists no models"


async def _router_model(d: _Doctor) -> Verdict:
    d.router = True
    try:
        d.models = await d.client.models()
    except InferError as exc:
        return _failed("model", exc, "/models failed")
    chosen, note = _choose(d.models, d.wanted)
    if chosen is None:
        return Verdict("model", BAD, note)
    await d.use_model(chosen)
    try:
        return _loaded(d, await d.client.props(), note)
    except InferError as exc:
        return _failed("model", exc, f"{chosen}: /props failed")


async def _model(d: _Doctor) -> Verdict:
    try:
        props = await d.client.props()
    except InferError as exc:
        return _failed("model", exc, "/props failed")
    if props.get("role") == "router":
        return await _router_model(d)
    if d.wanted:
        await d.use_model(d.wanted)  # the chat names it, as `chat --model` would
    return _loaded(d, props)


async def _router(d: _Doctor) -> Verdict:
    if not d.router:
        return Verdict("router mode", INFO, "no: one model")
    listed = ", ".join(f"{m.id} ({'failed' if m.failed else m.status})" for m in d.models)
    return Verdict("router mode", INFO, f"yes: models {listed or '(none listed)'}")


async def _context(d: _Doctor) -> Verdict:
    props = d.props
    if props is None or not (props.n_ctx or props.total_slots):
        return Verdict("context", INFO, "unknown: /props does not say")
    size = f"{props.n_ctx} tokens per slot" if props.n_ctx else "size per slot not said"
    slots = f"{props.total_slots} slot(s)" if props.total_slots else "slots not said"
    return Verdict("context", OK, f"{size}, {slots}")


async def _tools(d: _Doctor) -> Verdict:
    props = d.props or Props()
    can = props.chat_template_caps.supports_tool_calls
    if can is not None:
        return Verdict("tools", OK if can else WARN, "yes" if can else "no: the template has none")
    if not props.chat_template:
        return Verdict("tools", WARN, "unknown: no chat template reported")
    return Verdict("tools", WARN, "no: the server runs without --jinja")


async def _thinking(d: _Doctor) -> Verdict:
    props = d.props or Props()
    template = props.chat_template or ""
    marks = ("enable_thinking", "reasoning_content", "<think>")
    if props.chat_template_caps.supports_preserve_reasoning or any(m in template for m in marks):
        return Verdict("thinking", OK, "yes: the template has reasoning")
    return Verdict("thinking", INFO, "no: the template shows no reasoning")


async def _resume(d: _Doctor) -> Verdict:
    status = await d.probe("POST", "/v1/streams/lookup", {"conversation_ids": []})
    if status is None:
        return Verdict("resumable streams", WARN, "unknown: no answer")
    if status == 200:
        return Verdict("resumable streams", OK, "yes: a broken stream is picked up")
    return Verdict("resumable streams", INFO, f"no (HTTP {status}): a broken stream is an error")


async def _multimodal(d: _Doctor) -> Verdict:
    modalities = (d.props or Props()).modalities
    kinds = [k for k in ("vision", "audio", "video") if getattr(modalities, k)]
    if kinds:
        return Verdict("multimodal", OK, f"yes: {', '.join(kinds)}")
    return Verdict("multimodal", INFO, "no: text only")


async def _slots(d: _Doctor) -> Verdict:
    try:
        slots = await d.client.slots()
    except HTTPStatusError as exc:
        return Verdict("/slots", INFO, f"no (HTTP {exc.status}): slot pinning cannot see busy")
    except InferError as exc:
        return Verdict("/slots", WARN, f"unknown: {exc}")
    busy = sum(1 for s in slots if s.is_processing)
    return Verdict("/slots", OK, f"yes: {len(slots)} slot(s), {busy} busy")


async def _control(d: _Doctor) -> Verdict:
    body = {"id": "chatcmpl-llamaclient-doctor", "action": "reasoning_end"}
    if d.router:  # a router routes a POST by the body's model
        body["model"] = d.config.model
    status = await d.probe("POST", "/v1/chat/completions/control", body)
    if status is None:
        return Verdict("control endpoint", WARN, "unknown: no answer")
    if status == 200:
        return Verdict("control endpoint", OK, "yes: the thinking budget can end reasoning")
    return Verdict("control endpoint", INFO, f"no (HTTP {status}): thinking budgets cannot cap")


async def _chat(d: _Doctor) -> Verdict:
    started = time.monotonic()
    request = ChatRequest([UserMessage("Say OK.")], max_tokens=1)
    try:
        completion = await d.client.complete(request)
    except InferError as exc:
        return _failed("chat", exc, "no")
    took = time.monotonic() - started
    finish = completion.finish_reason or "no finish reason"
    return Verdict("chat", OK, f"yes: answered ({finish}) in {took:.2f} s")


CHECKS: tuple[Callable[[_Doctor], Awaitable[Verdict]], ...] = (
    _reachable,
    _model,
    _router,
    _context,
    _tools,
    _thinking,
    _resume,
    _multimodal,
    _slots,
    _control,
    _chat,
)


@contextlib.asynccontextmanager
async def http_probe(config: Config) -> AsyncIterator[Probe]:
    """The requests ``Client`` has no method for (``/v1/streams/lookup``, the control
    endpoint), sent with httpx (a dependency of the library) to ``config.base_url`` with
    its API key and ``wait_timeout``. An error is None, never its text (a third-party
    message may quote the request)."""
    import httpx

    base = config.base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    async with httpx.AsyncClient(headers=headers, timeout=config.wait_timeout) as http:

        async def probe(method: str, path: str, body: dict[str, Any]) -> int | None:
            try:
                response = await http.request(method, base + path, json=body)
            except httpx.HTTPError:
                return None
            return response.status_code

        yield probe


async def diagnose(
    config: Config,
    report: Callable[[Verdict], None],
    *,
    transport: Transport | None = None,
    probe: Probe | None = None,
) -> bool:
    """Run the checks against ``config.base_url``, reporting each verdict as it comes; True
    if the server can serve chats. An unreachable server (or a refused API key) stops the
    checks at once. ``config.model``: on a router, the model to check (default: the first
    loaded one). ``transport`` and ``probe``: tests (a FakeLlama's)."""
    async with contextlib.AsyncExitStack() as stack:
        if probe is None:
            probe = await stack.enter_async_context(http_probe(config))
        doctor = _Doctor(config, transport, probe)
        stack.push_async_callback(lambda: doctor.client.aclose())
        for check in CHECKS:
            verdict = await check(doctor)
            report(verdict)
            if verdict.level == BAD:
                return False
    return True


def doctor_main(config: Config, report: Callable[[Verdict], None]) -> int:
    """Diagnose the server of ``config``: 0 if it can serve chats, else 3."""
    return 0 if asyncio.run(diagnose(config, report)) else 3
