"""The clients under test, each behind the same small interface.

- ``ours (httpx)``, ``ours (asyncio)``: ``llamaclient.Client.chat()``,
  every event and the final ``Completion``; ``ours+live`` also decodes the tool arguments
  field by field.
- ``openai raw``: ``AsyncOpenAI.chat.completions.create(stream=True)``, raw chunks.
- ``openai helper``: ``AsyncOpenAI.chat.completions.stream()``, events + final completion.
- ``floor httpx``: httpx + httpx-sse + one msgspec decoder for the delta text only.
- ``floor asyncio``: ``asyncio.open_connection``, hand-written HTTP/1.1, de-chunking and SSE
  split + the same msgspec decoder; no HTTP library at all.

Over ``https://`` (``make(name, url, tls=TLS(...))``, the ``https`` scenario): ``floor httpx``
and ``ours (httpx)`` get an ``httpx.AsyncClient(verify=<context>)``, ``floor asyncio`` opens
its connections with ``ssl=<context>``, and ``ours (asyncio)`` passes
``Config(tls=<CA file>)`` (``Unavailable`` while ``Config`` has no ``tls`` field).

Variants (``VARIANTS``): ``ours (asyncio)`` with ``Config`` fields overridden, one line each,
e.g. ``"ours (asyncio) resume=off": (Ours, {"resume": False})``; ``Unavailable`` while
``Config`` lacks such a field.

``run(spec, sink)`` consumes one whole stream, passing each delta text (content, reasoning
or tool arguments) to ``sink`` when given; ``hold(spec)`` yields texts and is used to keep
streams open (memory). Every contender extracts the text even without a sink, so all do the
same work.
"""

from __future__ import annotations

import asyncio
import inspect
import ssl
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
from httpx_sse import aconnect_sse

from bench.chunks import Spec

__all__ = ["CONTENDERS", "TLS", "VARIANTS", "Contender", "Sink", "Unavailable", "make"]

Sink = Callable[[str], None]
MESSAGES = [{"role": "user", "content": "hi"}]


class Unavailable(Exception):
    """This contender cannot run here (the API it needs is not there yet)."""


@dataclass(frozen=True)
class TLS:
    """How to trust an ``https://`` server: its CA as a PEM file and as a client context."""

    ca_file: str
    context: ssl.SSLContext


class Contender:
    """One client, opened once per scenario (``async with``) and reused for every stream."""

    name = ""

    def __init__(self, url: str, tls: TLS | None = None) -> None:
        self.url = url
        self.tls = tls

    async def __aenter__(self) -> Contender:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        return None

    async def run(self, spec: Spec, sink: Sink | None = None) -> None:
        raise NotImplementedError

    def hold(self, spec: Spec) -> AsyncGenerator[str, None]:
        raise NotImplementedError


# --- the floors -----------------------------------------------------------------------------


class _Function(msgspec.Struct):
    arguments: str = ""


class _ToolCall(msgspec.Struct):
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta


class _Chunk(msgspec.Struct):
    choices: list[_Choice]


_decode = msgspec.json.Decoder(_Chunk).decode


def _text(data: bytes | str) -> str | None:
    """The delta text of one chunk: content, reasoning or tool-call arguments."""
    for choice in _decode(data).choices:
        delta = choice.delta
        if delta.content is not None:
            return delta.content
        if delta.reasoning_content is not None:
            return delta.reasoning_content
        if delta.tool_calls and delta.tool_calls[0].function is not None:
            return delta.tool_calls[0].function.arguments
    return None


def _body(spec: Spec) -> bytes:
    return msgspec.json.encode({"model": spec.model(), "messages": MESSAGES, "stream": True})


class FloorHttpx(Contender):
    """httpx + httpx-sse + msgspec, nothing else."""

    name = "floor httpx"

    def __init__(self, url: str, tls: TLS | None = None) -> None:
        super().__init__(url, tls)
        self.client = _httpx_client(tls, base_url=url)

    async def aclose(self) -> None:
        await self.client.aclose()

    def _connect(self, spec: Spec) -> Any:
        headers = {"content-type": "application/json"}
        return aconnect_sse(
            self.client, "POST", "/v1/chat/completions", content=_body(spec), headers=headers
        )

    async def run(self, spec: Spec, sink: Sink | None = None) -> None:
        async with self._connect(spec) as source:
            async for sse in source.aiter_sse():
                data = sse.data
                if data != "[DONE]":
                    text = _text(data)
                    if sink is not None and text is not None:
                        sink(text)

    async def hold(self, spec: Spec) -> AsyncGenerator[str, None]:
        async with self._connect(spec) as source:
            async for sse in source.aiter_sse():
                text = _text(sse.data) if sse.data != "[DONE]" else None
                if text is not None:
                    yield text


def _httpx_client(tls: TLS | None, base_url: str = "") -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    verify: ssl.SSLContext | bool = tls.context if tls is not None else True
    return httpx.AsyncClient(base_url=base_url, timeout=None, limits=limits, verify=verify)


class _Dechunker:
    """Undo ``Transfer-Encoding: chunked``: ``feed(bytes) -> (body bytes, ended)``."""

    def __init__(self) -> None:
        self.buf = b""
        self.left = 0  # bytes of chunk data still to come
        self.skip = 0  # bytes of the CRLF after the chunk data still to come

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        buf = self.buf + data if self.buf else data
        i, n = 0, len(buf)
        pieces = []
        left, skip = self.left, self.skip
        while i < n:
            if skip:
                step = min(skip, n - i)
                i += step
                skip -= step
            elif left:
                step = min(left, n - i)
                pieces.append(buf[i : i + step])
                i += step
                left -= step
                if not left:
                    skip = 2
            else:
                eol = buf.find(b"\r\n", i)
                if eol < 0:
                    break
                left = int(buf[i:eol], 16)
                i = eol + 2
                if not left:  # the last chunk: only the final CRLF is left
                    self.buf = buf[i:]
                    return b"".join(pieces), True
        self.buf = buf[i:]
        self.left, self.skip = left, skip
        return b"".join(pieces), False


class FloorAsyncio(Contender):
    """asyncio streams, hand-written HTTP/1.1 and SSE split, msgspec; pooled connections."""

    name = "floor asyncio"

    def __init__(self, url: str, tls: TLS | None = None) -> None:
        super().__init__(url, tls)
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = tls.context if parts.scheme == "https" and tls is not None else None
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def aclose(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()

    async def _open(self, spec: Spec) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.ssl)
        body = _body(spec)
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\n"
            b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (self.host.encode(), self.port, len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200") or b"chunked" not in head.lower():
            raise RuntimeError(f"unexpected response: {head[:200]!r}")
        return reader, writer

    async def _finish(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dechunker: _Dechunker
    ) -> None:
        if len(dechunker.buf) < 2:
            await reader.readexactly(2 - len(dechunker.buf))
        self.idle.append((reader, writer))

    async def run(self, spec: Spec, sink: Sink | None = None) -> None:
        reader, writer = await self._open(spec)
        dechunker = _Dechunker()
        feed = dechunker.feed
        read = reader.read
        sse = b""
        end = False
        while not end:
            data = await read(65536)
            if not data:
                raise ConnectionError("the body ended early")
            body, end = feed(data)
            events = (sse + body).split(b"\n\n")
            sse = events.pop()
            for event in events:
                if event.startswith(b"data: ") and event != b"data: [DONE]":
                    text = _text(event[6:])
                    if sink is not None and text is not None:
                        sink(text)
        await self._finish(reader, writer, dechunker)

    async def hold(self, spec: Spec) -> AsyncGenerator[str, None]:
        reader, writer = await self._open(spec)
        dechunker = _Dechunker()
        sse = b""
        end = False
        try:
            while not end:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("the body ended early")
                body, end = dechunker.feed(data)
                events = (sse + body).split(b"\n\n")
                sse = events.pop()
                for event in events:
                    if event.startswith(b"data: ") and event != b"data: [DONE]":
                        text = _text(event[6:])
                        if text is not None:
                            yield text
        finally:
            writer.close()


# --- the OpenAI SDK ----------------------------------------------------------------------------


def _openai(url: str) -> Any:
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


class OpenAIRaw(Contender):
    """``chat.completions.create(stream=True)``: iterate the raw chunks."""

    name = "openai raw"

    def __init__(self, url: str, tls: TLS | None = None) -> None:
        super().__init__(url, tls)
        if tls is not None:
            raise Unavailable("not measured over https://")
        self.client = _openai(url)

    async def aclose(self) -> None:
        await self.client.close()

    async def run(self, spec: Spec, sink: Sink | None = None) -> None:
        stream = await self.client.chat.completions.create(
            model=spec.model(), messages=MESSAGES, stream=True
        )
        async for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                text = delta.content or getattr(delta, "reasoning_content", None)
                if text is None and delta.tool_calls:
                    function = delta.tool_calls[0].function
                    text = function.arguments if function is not None else None
                if sink is not None and text is not None:
                    sink(text)

    async def hold(self, spec: Spec) -> AsyncGenerator[str, None]:
        stream = await self.client.chat.completions.create(
            model=spec.model(), messages=MESSAGES, stream=True
        )
        try:
            async for chunk in stream:
                for choice in chunk.choices:
                    delta = choice.delta
                    text = delta.content or getattr(delta, "reasoning_content", None)
                    if text is None and delta.tool_calls:
                        function = delta.tool_calls[0].function
                        text = function.arguments if function is not None else None
                    if text is not None:
                        yield text
        finally:
            await stream.close()


class OpenAIHelper(Contender):
    """``chat.completions.stream()``: its events, then ``get_final_completion()``."""

    name = "openai helper"

    def __init__(self, url: str, tls: TLS | None = None) -> None:
        super().__init__(url, tls)
        if tls is not None:
            raise Unavailable("not measured over https://")
        self.client = _openai(url)

    async def aclose(self) -> None:
        await self.client.close()

    async def run(self, spec: Spec, sink: Sink | None = None) -> None:
        async with self.client.chat.completions.stream(
            model=spec.model(), messages=MESSAGES
        ) as stream:
            async for event in stream:
                kind = event.type
                if kind == "content.delta":
                    text = event.delta
                elif kind == "tool_calls.function.arguments.delta":
                    text = event.arguments_delta
                elif kind == "chunk":
                    delta = event.chunk.choices[0].delta if event.chunk.choices else None
                    text = getattr(delta, "reasoning_content", None)
                else:
                    continue
                if sink is not None and text is not None:
                    sink(text)
            await stream.get_final_completion()

    async def hold(self, spec: Spec) -> AsyncGenerator[str, None]:
        async with self.client.chat.completions.stream(
            model=spec.model(), messages=MESSAGES
        ) as stream:
            async for event in stream:
                if event.type == "content.delta":
                    yield event.delta


# --- ours ---------------------------------------------------------------------------------------


class Ours(Contender):
    """``llamaclient.Client.chat()``: every event, then ``stream.completion``. The default
    ``Client(Config(base_url=...))`` for an ``http://`` URL runs on ``asyncio``."""

    transport = "asyncio"
    live = False

    def __init__(
        self, url: str, tls: TLS | None = None, overrides: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(url, tls)
        try:
            import llamaclient as lc
            from llamaclient import ChatRequest, Client, Config, UserMessage
        except ImportError as exc:  # the client is being written
            raise Unavailable(f"llamaclient.Client is not there yet: {exc}") from exc
        self.lc = lc
        fields = set(Config.__struct_fields__)
        config: dict[str, Any] = {"base_url": url, "transport": self.transport}
        for key, value in (overrides or {}).items():
            if key not in fields:
                raise Unavailable(f"llamaclient.Config has no {key!r} field yet")
            config[key] = value
        self.http_client: httpx.AsyncClient | None = None
        if tls is not None and self.transport == "httpx":
            self.http_client = _httpx_client(tls)
        elif tls is not None:
            if "tls" not in fields:
                raise Unavailable(
                    "llamaclient.Config has no 'tls' field yet (our transport speaks http:// only)"
                )
            config["tls"] = tls.ca_file
        try:
            self.client = Client(Config(**config), http_client=self.http_client)
        except ValueError as exc:
            if tls is None:
                raise
            raise Unavailable(f"llamaclient.Client refuses https:// here: {exc}") from exc
        self.request = ChatRequest
        self.messages = [UserMessage("hi")]
        self.name = f"ours ({self.transport})" + (" +live" if self.live else "")
        self.chat_kwargs: dict[str, Any] = {}
        if self.live:
            self.chat_kwargs = _live_arguments_hook(lc, self.client)

    async def aclose(self) -> None:
        await self.client.aclose()
        if self.http_client is not None:  # passed in: the client does not close it
            await self.http_client.aclose()

    def _chat(self, spec: Spec) -> Any:
        request = self.request(messages=self.messages, extra={"model": spec.model()})
        return self.client.chat(request, **self.chat_kwargs)

    async def run(self, spec: Spec, sink: Sink | None = None) -> None:
        lc = self.lc
        content, reasoning, tool = lc.Content, lc.Reasoning, lc.ToolCallDelta
        async with self._chat(spec) as stream:
            async for event in stream:
                kind = type(event)
                if kind is content or kind is reasoning:
                    text = event.text
                elif kind is tool:
                    text = event.arguments
                else:
                    continue
                if sink is not None:
                    sink(text)
        stream.completion  # noqa: B018 - the final Completion is part of the work

    async def hold(self, spec: Spec) -> AsyncGenerator[str, None]:
        content = self.lc.Content
        async with self._chat(spec) as stream:
            async for event in stream:
                if type(event) is content:
                    yield event.text


def _live_arguments_hook(lc: Any, client: Any) -> dict[str, Any]:
    """HOOK(ArgumentStream): how ``ours +live`` turns on live field decoding.

    Today: ``client.chat(request, live_arguments=True)``, which decodes every tool call with a
    ``llamaclient.ArgumentStream`` and yields ``ArgumentDelta`` events. Change this function
    if that API changes; raise ``Unavailable`` while it does not exist.
    """
    if not hasattr(lc, "ArgumentStream"):
        raise Unavailable("llamaclient.ArgumentStream is not there yet")
    if "live_arguments" not in inspect.signature(client.chat).parameters:
        raise Unavailable("Client.chat(live_arguments=...) is not there yet")
    return {"live_arguments": True}


class OursHttpx(Ours):
    transport = "httpx"


class OursLive(Ours):
    live = True


CONTENDERS: dict[str, type[Contender]] = {
    "ours (asyncio)": Ours,
    "ours (httpx)": OursHttpx,
    "openai raw": OpenAIRaw,
    "openai helper": OpenAIHelper,
    "floor httpx": FloorHttpx,
    "floor asyncio": FloorAsyncio,
}
class OursTraced(Ours):
    """Ours traced by the OpenTelemetry SDK (spans and metrics) into exporters that drop
    everything: the cost of tracing itself, without an exporter's I/O."""

    def __init__(
        self, url: str, tls: TLS | None = None, overrides: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(url, tls, overrides)
        try:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import InMemoryMetricReader
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import (
                SimpleSpanProcessor,
                SpanExporter,
                SpanExportResult,
            )

            from llamaclient.otel import instrument
        except ImportError as exc:
            raise Unavailable(f"the otel extra and the SDK are not installed: {exc}") from exc

        class Dropped(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(Dropped()))
        meter = MeterProvider(metric_readers=[InMemoryMetricReader()])  # never collected
        instrument(self.client, tracer_provider=tracer, meter_provider=meter)


EXTRA: dict[str, type[Contender]] = {
    "ours (asyncio) +live": OursLive,
    "ours (asyncio) traced": OursTraced,
}
# Ours with Config fields overridden: one line per variant. Run by the paced scenario.
VARIANTS: dict[str, tuple[type[Ours], dict[str, Any]]] = {
    "ours (asyncio) resume=off": (Ours, {"resume": False}),
    # A config naming its model: the first chats look at GET /models (a router?).
    "ours (asyncio) model=": (Ours, {"model": "m"}),
}


def make(name: str, url: str, tls: TLS | None = None) -> Contender:
    """The contender ``name`` for the server at ``url`` (``https://`` needs ``tls``);
    ``Unavailable`` if it cannot run."""
    contender: Contender
    if name in VARIANTS:
        cls, overrides = VARIANTS[name]
        contender = cls(url, tls, overrides)
    else:
        contender = (CONTENDERS.get(name) or EXTRA[name])(url, tls)
    contender.name = name
    return contender
