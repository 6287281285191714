"""Images and audio only go to a server that takes them: its ``/props`` ``modalities``,
asked once per client, say so before the request is sent."""

from __future__ import annotations

import anyio

from .._protocol.info import props_from
from .._types.errors import InferError, UnsupportedInputError
from .._types.server import Modalities, Props
from .endpoint import Endpoint

__all__ = ["MediaCheck"]

_NAMES = {"vision": "image", "audio": "audio", "video": "video"}


class MediaCheck:
    """The server's input modalities, learnt from ``/props`` on the first request that needs
    them (or from any ``Client.props()`` call), then kept for the client's life. Concurrent
    first requests share one ``/props`` call."""

    __slots__ = ("_endpoint", "_known", "_lock", "modalities")

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self.modalities: Modalities | None = None
        self._known = False  # /props was asked (None modalities: it could not say)
        self._lock: anyio.Lock | None = None  # made in the event loop, on first use

    def remember(self, props: Props) -> None:
        """Keep what ``props`` says (None when it has no ``modalities``: nothing is checked)."""
        self.modalities = props.modalities if "modalities" in props.raw else None
        self._known = True

    async def check(self, needed: frozenset[str]) -> None:
        """``UnsupportedInputError`` when the server says it cannot take one of ``needed``.
        A server whose ``/props`` cannot be read is not judged (and not asked again): the
        request goes, and the server's own refusal is mapped instead."""
        if not needed:
            return
        if not self._known:
            await self._ask()
        modalities = self.modalities
        if modalities is None:
            return
        for kind in sorted(needed):
            if not getattr(modalities, kind, True):
                raise UnsupportedInputError(
                    kind,
                    f"{_NAMES[kind]} input is not supported by this server: its /props "
                    f"modalities say {kind} is false (start llama-server with a --mmproj "
                    "projector that takes it)",
                )

    async def _ask(self) -> None:
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._known:
                return  # another request asked while this one waited
            try:
                self.remember(props_from(await self._endpoint.get_json("/props")))
            except InferError:  # cannot say (old server, proxy, timeout): not asked again
                self.modalities = None
                self._known = True
