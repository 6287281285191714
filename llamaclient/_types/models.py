"""The models a llama-server router offers (``GET /models``)."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["ModelInfo", "ModelStatus"]

ModelStatus = Literal["unloaded", "loading", "loaded", "sleeping", "downloading", "downloaded"]


class ModelInfo(msgspec.Struct, frozen=True):
    """One model of a router: its ``id``, its ``aliases`` and its ``status``.

    ``failed`` is True (with the child process's ``exit_code``) when its last load failed;
    the status is then ``"unloaded"``. ``ready`` is True once chats go straight to it
    (``loaded``, or ``sleeping``: a sleeping model wakes on the request).
    """

    id: str
    aliases: tuple[str, ...] = ()
    status: str = "unloaded"
    failed: bool = False
    exit_code: int | None = None

    @property
    def ready(self) -> bool:
        return self.status in ("loaded", "sleeping")
