"""What one turn is asked to do (:class:`Plan`), and where (:class:`Target`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from .._arguments.output import OutputDecoder
from .._protocol.body import thinking_limit
from .._types.config import Config
from .._types.events import ChatEvent
from .._types.request import ChatRequest
from .._types.typed import OutputType
from .budget import Budget
from .history import History
from .known import Known

__all__ = ["Plan", "Processor", "Target"]

Processor = Callable[[list[ChatEvent]], list[ChatEvent]]
"""Something that sees each read's events and may add its own (the live argument decoders):
``events -> events``."""


class Target:
    """The server a turn goes to: its client's ``config``, the facts its client has learnt
    (``known``, shared by that client's turns), the request ``body`` built for it (None: a
    turn that reattaches to a conversation), and, in a pool, its index ``server`` and the
    ``request`` as it goes there (pinned to the slot the pool chose); ``limited``: a place
    under a shared concurrency limit is taken before the chat goes out."""

    __slots__ = ("body", "config", "known", "limited", "request", "server")

    def __init__(
        self,
        config: Config,
        known: Known,
        body: bytes | None,
        server: int | None = None,
        request: ChatRequest | None = None,
        limited: bool = False,
    ) -> None:
        self.config = config
        self.known = known
        self.body = body
        self.server = server
        self.request = request
        self.limited = limited  # its client shares a concurrency limit (a Limiter)


class Plan:
    """One turn: the ``request``; ``conversation_id`` (resume on: the stream's
    ``X-Conversation-Id``; None: off); ``offset`` (a reattached turn: the body bytes already
    seen); ``output`` (typed output: the answer is validated at the end); ``processors``
    (they see every read's events; the driver adds one when live arguments are first asked
    for, even mid-stream); ``media`` (the input modalities the messages need);
    ``pooled`` (a pool chooses the server first: ``Routed``); ``reattach`` (no chat is
    sent: the turn picks up ``conversation_id`` at ``offset``); ``jitter``, the source of the
    backoff's randomness (a test gives a seeded one: the machine has no hidden input);
    ``history``, its client's (or pool's) sessions' previous turns (the cache report)."""

    __slots__ = (
        "conversation_id",
        "decoder",
        "history",
        "jitter",
        "media",
        "offset",
        "output",
        "pooled",
        "processors",
        "reattach",
        "request",
    )

    def __init__(
        self,
        request: ChatRequest,
        *,
        conversation_id: str | None = None,
        offset: int = 0,
        output: OutputType[Any] | None = None,
        decoder: OutputDecoder | None = None,
        processors: Sequence[Processor] = (),
        media: frozenset[str] = frozenset(),
        pooled: bool = False,
        reattach: bool = False,
        jitter: random.Random | None = None,
        history: History | None = None,
    ) -> None:
        self.request = request
        self.conversation_id = conversation_id
        self.offset = offset
        self.output = output
        self.decoder = decoder  # the typed output decoded live (a processor too)
        self.processors: list[Processor] = list(processors)
        self.media = media
        self.pooled = pooled
        self.reattach = reattach
        self.jitter = jitter  # the backoff's randomness (None: the random module's)
        self.history = None if reattach else history  # a reattached turn has no request

    def budget(self, config: Config, proxied: bool) -> Budget | None:
        """The thinking budget at ``config`` (None: no cap); ``proxied``: through a proxy."""
        return Budget.of(thinking_limit(config, self.request), config.thinking_grace, proxied)
