"""llama-server's resumable streams, on the fault server.

``Sessions(server)`` routes ``POST /v1/chat/completions`` to a scripted stream that can be
cut at any body byte, and serves what llama-server serves around it (``../shared/
llama-server-wire.md`` §5.4, checked against the server source):

- ``GET /v1/stream?conv_id=<id>&from=<n>``: the session's body bytes from ``n`` (one HTTP
  chunk per event, like the original), or 404 ``File Not Found`` for an unknown id (the
  real server's 404 body is the same for a missing route and an expired session);
- ``DELETE /v1/stream?conv_id=<id>``: 204, and the session is forgotten;
- ``POST /v1/streams/lookup``: the sessions' state.

``cut_at`` is the body offset where the chat connection breaks (``close``, ``reset`` or
``hold``: silence, for the stall watch); ``None`` streams it whole.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qs

from tests.support.faultserver import (
    Chunk,
    Close,
    End,
    FaultServer,
    Hold,
    Json,
    Raw,
    Request,
    Reset,
    Response,
    Status,
    Step,
    error_body,
)

CHAT = "/v1/chat/completions"
STREAM = "/v1/stream"
LOOKUP = "/v1/streams/lookup"
Cut = Literal["close", "reset", "hold"]
NOT_FOUND = error_body(404, "File Not Found", "not_found_error")


def cut_script(events: Sequence[bytes], cut_at: int | None, how: Cut = "close") -> list[Step]:
    """The chat response as one HTTP chunk per event, broken after ``cut_at`` body bytes
    (inside a chunk when the offset falls there: the chunk's size line promises more)."""
    steps: list[Step] = [Status(200)]
    sent = 0
    for event in events:
        if cut_at is not None and sent + len(event) > cut_at:
            keep = cut_at - sent
            if keep:
                steps.append(Raw(b"%x\r\n" % len(event) + event[:keep]))
            end: Step = Close() if how == "close" else Reset() if how == "reset" else Hold()
            steps.append(end)
            return steps
        steps.append(Chunk(event))
        sent += len(event)
    steps.append(End())
    return steps


@dataclass
class Sessions:
    """The fault server's resumable-stream routes; ``events`` is the chat body, one item per
    HTTP chunk. ``cuts`` are applied to successive connections (the POST, then each GET)."""

    server: FaultServer
    events: Sequence[bytes]
    cuts: list[tuple[int | None, Cut]] = field(default_factory=list)
    expired: bool = False  # GET answers 404 (the session is gone), lookup still works
    known: dict[str, bytes] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    gets: list[tuple[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.server.route("POST", CHAT, self._chat)
        self.server.route("GET", STREAM, self._get)
        self.server.route("DELETE", STREAM, self._delete)
        self.server.route("POST", LOOKUP, self._lookup)

    @property
    def body(self) -> bytes:
        return b"".join(self.events)

    def _next_cut(self) -> tuple[int | None, Cut]:
        return self.cuts.pop(0) if self.cuts else (None, "close")

    def _chat(self, request: Request) -> list[Step]:
        conv = request.headers.get("x-conversation-id")
        if conv:
            self.known[conv] = self.body
        cut_at, how = self._next_cut()
        return cut_script(self.events, cut_at, how)

    def _get(self, request: Request) -> list[Step]:
        query = parse_qs(request.query)
        conv = query.get("conv_id", [""])[0]
        offset = int(query.get("from", ["0"])[0])
        self.gets.append((conv, offset))
        if self.expired or conv not in self.known:
            return [Json(404, NOT_FOUND)]
        rest = self.known[conv][offset:]
        cut_at, how = self._next_cut()
        return cut_script(_rechunk(self.events, offset), cut_at, how) if rest else [
            Status(200),
            End(),
        ]

    def _delete(self, request: Request) -> list[Step]:
        conv = parse_qs(request.query).get("conv_id", [""])[0]
        self.deleted.append(conv)
        self.known.pop(conv, None)
        return [Response(204, b"", content_type="application/json")]

    def _lookup(self, request: Request) -> list[Step]:
        ids = json.loads(request.body or b"{}").get("conversation_ids", [])
        found = [
            {"conversation_id": c, "is_done": True, "total_bytes": len(self.known[c]),
             "started_at": 1, "completed_at": 2}
            for c in ids if c in self.known
        ]
        return [Json(200, found)]


def _rechunk(events: Sequence[bytes], offset: int) -> list[bytes]:
    """The body from ``offset``, one chunk per (rest of an) event."""
    out: list[bytes] = []
    start = 0
    for event in events:
        end = start + len(event)
        if end > offset:
            out.append(event[max(0, offset - start):])
        start = end
    return out
