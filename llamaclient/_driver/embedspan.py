"""OpenTelemetry for ``Client.embed`` and ``Client.rerank``: one span, kind CLIENT, named
``embeddings {model}`` (or ``rerank {model}``), after the GenAI semantic conventions
(operation ``embeddings``; ``rerank`` is ours, the conventions name none), and the GenAI
client metrics of the call: its duration and its input tokens. Imported only when
``opentelemetry`` is (``telemetry.py``)."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from .._types.config import Config
from .spans import PROVIDER, Instruments

__all__ = ["EmbeddingsSpan"]


class EmbeddingsSpan:
    """The span of one ``embed`` call (all its batches): ``with`` it around the call, count
    each batch's tokens with :meth:`counted`, and set the vectors' ``dimension``. An error
    that leaves the block is the span's ``error.type`` and status."""

    def __init__(
        self,
        tracer: Tracer,
        instruments: Instruments | None,
        config: Config,
        inputs: int,
        operation: str = "embeddings",
    ) -> None:
        url = urlsplit(config.base_url)
        self._attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": config.model or "",
            "server.address": url.hostname or "",
            "server.port": url.port or (443 if url.scheme == "https" else 80),
        }
        name = f"{operation} {config.model}" if config.model else operation
        attributes = {**self._attributes, f"llamaclient.{operation}.inputs": inputs}
        self._span = tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        self._instruments = instruments
        self._started = time.monotonic()
        self.tokens = 0
        self.dimension: int | None = None

    def counted(self, tokens: int) -> None:
        """A batch's input tokens, as the server counted them."""
        self.tokens += tokens

    def __enter__(self) -> EmbeddingsSpan:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        span, attributes = self._span, dict(self._attributes)
        if error is not None:
            attributes["error.type"] = type(error).__name__
            span.set_attribute("error.type", attributes["error.type"])
            span.set_status(Status(StatusCode.ERROR, str(error)))
        if self.tokens:
            span.set_attribute("gen_ai.usage.input_tokens", self.tokens)
        if self.dimension is not None:
            span.set_attribute("gen_ai.embeddings.dimension.count", self.dimension)
        span.end()
        meters = self._instruments
        if meters is not None:
            meters.duration.record(time.monotonic() - self._started, attributes)
            if self.tokens:
                meters.tokens.record(self.tokens, {**attributes, "gen_ai.token.type": "input"})
