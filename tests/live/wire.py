"""Plain-httpx helpers for the live tests: read one SSE chat stream into its events."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["Stream", "read_stream"]

TIMEOUT = httpx.Timeout(30.0)


@dataclass
class Stream:
    """What one streaming request produced, as seen on the wire."""

    status: int
    headers: httpx.Headers
    raw: bytes
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """Events that carry a ``choices`` list (everything but in-band errors)."""
        return [e for e in self.events if "choices" in e]

    @property
    def deltas(self) -> list[dict[str, Any]]:
        """``choices[0].delta`` of every chunk that has a choice."""
        return [e["choices"][0]["delta"] for e in self.chunks if e["choices"]]

    def text(self, key: str) -> str:
        """Concatenation of ``delta[key]`` (``"content"`` or ``"reasoning_content"``)."""
        return "".join(d[key] for d in self.deltas if isinstance(d.get(key), str))

    @property
    def finish_reasons(self) -> list[str]:
        """The non-null ``finish_reason`` values, in order."""
        return [
            c["finish_reason"]
            for e in self.chunks
            for c in e["choices"]
            if c["finish_reason"] is not None
        ]

    def tool_deltas(self) -> list[dict[str, Any]]:
        """Every ``tool_calls`` entry, in order."""
        return [tc for d in self.deltas for tc in d.get("tool_calls", [])]

    def tool_calls(self) -> dict[int, dict[str, str]]:
        """Tool calls assembled by index: ``{"id", "name", "arguments"}``."""
        calls: dict[int, dict[str, str]] = {}
        for tc in self.tool_deltas():
            call = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
            call["id"] = tc.get("id", call["id"])
            fn = tc.get("function", {})
            call["name"] = fn.get("name", call["name"])
            call["arguments"] += fn.get("arguments", "")
        return calls

    @property
    def last_timings(self) -> dict[str, Any]:
        """``timings`` of the last event that has them."""
        return next(e["timings"] for e in reversed(self.events) if "timings" in e)

    @property
    def usage(self) -> dict[str, Any]:
        """``usage`` of the usage chunk (needs ``stream_options.include_usage``)."""
        return next(e["usage"] for e in self.events if "usage" in e)


OnEvent = Callable[[dict[str, Any]], Awaitable[None]]


async def read_stream(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    *,
    on_event: OnEvent | None = None,
    path: str = "/v1/chat/completions",
) -> Stream:
    """POST ``body`` and read the whole response; ``on_event`` sees each event as it arrives."""
    async with client.stream("POST", path, json=body, timeout=TIMEOUT) as resp:
        raw = bytearray()
        stream = Stream(resp.status_code, resp.headers, b"")
        buf = b""
        async for data in resp.aiter_raw():
            raw += data
            buf += data
            while b"\n\n" in buf:
                line, buf = buf.split(b"\n\n", 1)
                if line == b"data: [DONE]":
                    stream.done = True
                elif line.startswith(b"data: "):
                    event = json.loads(line[len(b"data: ") :])
                    stream.events.append(event)
                    if on_event is not None:
                        await on_event(event)
        stream.raw = bytes(raw)
    return stream
