"""What a client asks its server beside chats: a router's models, health, ``/props``,
``/slots``, ``/metrics``, token counts and tokenizing, and slots saved to disk. A mixin of
:class:`~llamaclient.Client` (its endpoint, config and shared state)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypeVar, overload

import msgspec

from ._driver.embeddings import BATCH, embed
from ._driver.endpoint import Endpoint
from ._driver.models import list_models, load_model, unload_model
from ._driver.observe import Instrument
from ._driver.rerank import rerank
from ._driver.shared import Shared
from ._driver.tokens import count_tokens, detokenize, tokenize
from ._driver.tracing import embeddings_span
from ._protocol.body import build_body
from ._protocol.info import metrics_from, props_from, slots_from
from ._types.config import Config
from ._types.errors import ProtocolError
from ._types.models import ModelInfo
from ._types.ranking import RerankResult
from ._types.request import ChatRequest
from ._types.server import Props, Slot, SlotErased, SlotRestored, SlotSaved, TokenPiece

__all__ = ["ServerCalls"]

T = TypeVar("T")


class ServerCalls:
    """The server's endpoints beside chat, typed (see each method)."""

    config: Config
    instruments: list[Instrument]
    _endpoint: Endpoint
    _shared: Shared

    async def models(self) -> list[ModelInfo]:
        """``GET /models``: a router's models with their status (``loaded``, ``loading``,
        ``unloaded``, ...; ``failed`` and ``exit_code`` after a failed load). A plain
        llama-server lists its one model as ``loaded``."""
        return await list_models(self._endpoint, self._shared.known)

    async def load_model(self, name: str, *, wait: bool = True) -> bool:
        """Ask a router to load model ``name`` (``POST /models/load``). With ``wait`` (the
        default) return once it is ready: ``ModelLoadError`` (with the exit code) if the load
        fails, ``LoadTimeoutError`` past ``load_timeout``. False if it was already running;
        ``ModelNotFoundError`` for a name the router does not know, ``ModelLimitError`` when
        it is at ``--models-max`` and cannot unload one."""
        return await load_model(self._endpoint, name, wait=wait)

    async def unload_model(self, name: str, *, wait: bool = True) -> bool:
        """Ask a router to stop model ``name`` (``POST /models/unload``); False if it was not
        running. With ``wait`` (the default) return once its process has exited.
        ``ModelNotFoundError`` for a name the router does not know."""
        return await unload_model(self._endpoint, name, wait=wait)

    async def health(self) -> dict[str, Any]:
        """``GET /health``: ``{"status": "ok"}`` once the model is loaded (with
        ``Config.model`` set, ``?model=`` names it to a router)."""
        result: dict[str, Any] = await self._endpoint.get_json("/health")
        return result

    async def props(self) -> Props:
        """``GET /props``: the slot context size, the slot count, the model, the chat template
        and its capabilities, the input modalities. ``.raw`` holds the whole answer."""
        props = props_from(await self._endpoint.get_json("/props"))
        known = self._shared.known
        known.modalities = props.modalities if "modalities" in props.raw else None
        known.reasoning_effort = props.chat_template_caps.supports_reasoning_effort
        known.media_known = True
        return props

    async def metrics(self) -> dict[str, float]:
        """``GET /metrics`` (a server started with ``--metrics``; else an
        ``HTTPStatusError``, 501): its Prometheus samples by name, ``llamacpp:`` included
        (``metrics["llamacpp:requests_deferred"]``)."""
        return metrics_from(await self._endpoint.get_bytes("/metrics"))

    async def count_tokens(self, request: ChatRequest) -> int:
        """The prompt tokens of ``request`` as the server will see it: its template applied,
        with the tools, images and ``thinking``; counted by the server
        (``/v1/chat/completions/input_tokens``, or ``/apply-template`` then ``/tokenize`` on
        an older build), so it is exactly the chat's own ``prompt_n``."""
        body = build_body(self.config, request)
        return await count_tokens(self._endpoint, self._shared.known, body)

    @overload
    async def tokenize(
        self,
        text: str,
        *,
        add_special: bool = ...,
        parse_special: bool = ...,
        pieces: Literal[False] = ...,
    ) -> list[int]: ...
    @overload
    async def tokenize(
        self,
        text: str,
        *,
        add_special: bool = ...,
        parse_special: bool = ...,
        pieces: Literal[True],
    ) -> list[TokenPiece]: ...
    @overload
    async def tokenize(
        self, text: str, *, add_special: bool = ..., parse_special: bool = ..., pieces: bool
    ) -> list[int] | list[TokenPiece]: ...
    async def tokenize(
        self,
        text: str,
        *,
        add_special: bool = False,
        parse_special: bool = False,
        pieces: bool = False,
    ) -> list[int] | list[TokenPiece]:
        """``text``'s token ids (``pieces=True``: :class:`TokenPiece`s, each id with its
        text). ``add_special`` adds the model's BOS; ``parse_special`` reads special-token
        text (``<|im_start|>``) as those tokens, as a chat template's is read."""
        return await tokenize(self._endpoint, text, add_special, parse_special, pieces)

    async def detokenize(self, ids: Sequence[int]) -> str:
        """The text of the token ``ids``."""
        return await detokenize(self._endpoint, ids)

    async def embed(
        self, inputs: str | Sequence[str], *, normalize: bool = False, batch: int = BATCH
    ) -> list[list[float]]:
        """The embedding of each input (a server with ``--embeddings``, and ``--pooling``
        for a decoder model), in order: ``POST /v1/embeddings``, ``batch`` inputs a request,
        with ``Config.model`` for a router. The vectors are as the server sends them, or of
        length 1 with ``normalize``. A refused connection or a busy answer is retried, a
        loading server waited for, as before a chat."""
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        if type(batch) is not int or batch < 1:
            raise ValueError(f"batch must be an int >= 1, not {batch!r}")
        span = embeddings_span(self.instruments, self.config, len(texts))
        if span is None:
            return await embed(self._endpoint, texts, normalize, batch)
        with span:
            vectors = await embed(self._endpoint, texts, normalize, batch, span.counted)
            span.dimension = len(vectors[0]) if vectors else None
            return vectors

    async def rerank(
        self, query: str, documents: Sequence[str], *, top_n: int | None = None
    ) -> list[RerankResult]:
        """The ``documents`` by relevance to ``query``, most relevant first (``top_n`` of
        them): ``POST /v1/rerank`` on a server started with ``--reranking`` (a reranker
        model), with ``Config.model`` for a router. Each :class:`RerankResult` has the
        document's index in ``documents``, its score and its text. Retries and waits as
        :meth:`embed` does; traced as a ``rerank`` span."""
        if isinstance(documents, str):
            raise ValueError("documents must be a sequence of texts, not one string")
        if top_n is not None and (type(top_n) is not int or top_n < 1):
            raise ValueError(f"top_n must be an int >= 1, not {top_n!r}")
        texts = list(documents)
        span = embeddings_span(self.instruments, self.config, len(texts), "rerank")
        if span is None:
            return await rerank(self._endpoint, query, texts, top_n)
        with span:
            return await rerank(self._endpoint, query, texts, top_n, span.counted)

    async def save_slot(self, slot: int, filename: str) -> SlotSaved:
        """Write slot ``slot``'s prompt cache to ``filename`` in the server's
        ``--slot-save-path`` (a plain name: no directories). Without that flag the server
        answers 501 (``HTTPStatusError``)."""
        return await self._slot_action(slot, "save", {"filename": filename}, SlotSaved)

    async def restore_slot(self, slot: int, filename: str) -> SlotRestored:
        """Read ``filename`` (saved by :meth:`save_slot`) back into slot ``slot``: a turn
        whose prompt starts with it reuses it instead of evaluating it. A file that is not
        there, or does not fit, is a 400 ``HTTPStatusError``."""
        return await self._slot_action(slot, "restore", {"filename": filename}, SlotRestored)

    async def erase_slot(self, slot: int) -> SlotErased:
        """Drop slot ``slot``'s prompt cache."""
        return await self._slot_action(slot, "erase", {}, SlotErased)

    async def _slot_action(self, slot: int, action: str, body: Any, kind: type[T]) -> T:
        path = f"/slots/{slot}?action={action}"
        answer = await self._endpoint.post_json(path, body)
        if isinstance(answer, dict) and isinstance(answer.get("timings"), dict):
            answer = {**answer, **answer["timings"]}
        try:
            return msgspec.convert(answer, kind)
        except msgspec.ValidationError as exc:
            raw = msgspec.json.encode(answer)
            raise ProtocolError(f"POST {path}: not a slot answer ({exc})", raw) from None

    async def slots(self) -> list[Slot]:
        """``GET /slots``: one :class:`Slot` per slot (``id``, ``is_processing``, ``n_ctx``,
        ...); each keeps its whole entry in ``.raw``."""
        return slots_from(await self._endpoint.get_json("/slots"))
