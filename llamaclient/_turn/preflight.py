"""The pre-flight (``Config.preflight``, ``ChatRequest.preflight``): before the chat, the
server counts its prompt (the template applied, tools and all), and a prompt that with
``max_tokens`` does not fit a slot's context is a ``ContextOverflowError`` at once, with the
numbers, instead of after its prefill.

The count is ``POST /v1/chat/completions/input_tokens`` with the chat's own body, or, on a
build without it (learnt once per client), ``POST /apply-template`` then ``POST /tokenize``
(with the special tokens the template writes, as the chat counts them). A slot's context is
``/props``' ``n_ctx``, asked once per client. A count that fails leaves the chat to go, as
without the pre-flight: its own answer decides.
"""

from __future__ import annotations

import msgspec

from .._protocol.info import props_from
from .._protocol.wire import ANY_DECODER
from .._types.errors import ContextOverflowError, InferError
from .commands import Call
from .phase import Context, Next, Phase

__all__ = ["INPUT_TOKENS_PATH", "count_body", "preflight", "tokens_counted"]

INPUT_TOKENS_PATH = "/v1/chat/completions/input_tokens"
_MISSING = frozenset({404, 405, 501})  # an older build: no input_tokens route


def preflight(ctx: Context, then: Next) -> Phase:
    """The count and the check, when the request (else its config) asks for them."""
    asked = ctx.request.preflight
    if not (ctx.config.preflight if asked is None else asked):
        return then()
    if not ctx.known.n_ctx:
        return _Context(ctx, then)
    return _Count(ctx, then)


def count_body(prompt: str) -> bytes:
    """``POST /tokenize``'s body for a templated prompt: its special tokens parsed, as the
    chat parses them (measured: the chat's own ``prompt_n``, exactly)."""
    return msgspec.json.encode({"content": prompt, "add_special": True, "parse_special": True})


def tokens_counted(data: bytes) -> int | None:
    """The count in an ``input_tokens`` or a ``/tokenize`` answer (None: neither)."""
    try:
        answer = ANY_DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    if isinstance(answer, dict):
        count = answer.get("input_tokens")
        if type(count) is int:
            return count
        tokens = answer.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
    return None


def _call(
    ctx: Context, method: str, path: str, body: bytes | None = None, *, shared: bool
) -> Call:
    headers = () if shared else ctx.affinity
    return Call(method, path, body, headers, shared=shared, limit=ctx.config.max_body_bytes)


class _Context(Phase):
    """``GET /props`` for a slot's context (shared by the client's turns that overlap)."""

    __slots__ = ("_then",)
    name = "asking the slot's context"

    def __init__(self, ctx: Context, then: Next) -> None:
        super().__init__(ctx, _call(ctx, "GET", ctx.path("/props"), shared=True))
        self._then = then

    def answered(self, status: int, data: bytes) -> Phase:
        try:
            n_ctx = props_from(ANY_DECODER.decode(data)).n_ctx if status < 300 else None
        except (msgspec.DecodeError, RecursionError, InferError):
            n_ctx = None
        if not n_ctx:
            return self._then()  # it cannot say: no pre-flight
        self.ctx.known.n_ctx = n_ctx
        return _Count(self.ctx, self._then)

    def failed(self, kind: str, message: str) -> Phase:
        return self._then()


class _Count(Phase):
    """The prompt counted by the server (``input_tokens``; or ``apply-template`` then
    ``tokenize``), then judged against the slot's context."""

    __slots__ = ("_step", "_then")
    name = "counting the prompt"

    def __init__(self, ctx: Context, then: Next) -> None:
        self._step = "template" if ctx.known.input_tokens is False else "count"
        path = "/apply-template" if self._step == "template" else INPUT_TOKENS_PATH
        super().__init__(ctx, _call(ctx, "POST", path, ctx.body, shared=False))
        self._then = then

    def answered(self, status: int, data: bytes) -> Phase:
        ctx, step = self.ctx, self._step
        if step == "count" and status in _MISSING:
            ctx.known.input_tokens = False
            return _Count(ctx, self._then)
        if status >= 300:
            return self._then()
        if step == "count":
            ctx.known.input_tokens = True
        if step == "template":
            return self._tokenize(data)
        count = tokens_counted(data)
        return self._then() if count is None else self._judge(count)

    def _tokenize(self, data: bytes) -> Phase:
        try:
            answer = ANY_DECODER.decode(data)
        except (msgspec.DecodeError, RecursionError):
            answer = None
        prompt = answer.get("prompt") if isinstance(answer, dict) else None
        if not isinstance(prompt, str):
            return self._then()
        self._step = "tokenize"
        self.command = _call(self.ctx, "POST", "/tokenize", count_body(prompt), shared=False)
        return self

    def failed(self, kind: str, message: str) -> Phase:
        return self._then()  # no count: the chat's own answer decides

    def _judge(self, count: int) -> Phase:
        ctx = self.ctx
        n_ctx = ctx.known.n_ctx
        max_tokens = ctx.request.max_tokens
        if max_tokens is None:
            max_tokens = ctx.config.max_tokens
        room = max_tokens if max_tokens is not None and max_tokens > 0 else 0
        if count + room <= n_ctx:
            return self._then()
        why = (
            f"the prompt ({count} tokens) and max_tokens ({room}) do not fit the slot's "
            f"context ({n_ctx} tokens): counted before sending"
        )
        error = ContextOverflowError(400, "", count, n_ctx, message=why, type="preflight")
        error.args = (why,)
        error.max_tokens, error.preflight = max_tokens, True
        return ctx.fail(error)
