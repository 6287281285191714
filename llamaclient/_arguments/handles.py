"""The consumer side of live tool arguments: :class:`FieldHandle`, awaited with anyio (so under
asyncio or trio), and the :class:`FieldText` pieces ``ArgumentStream.feed`` returns."""

from __future__ import annotations

from asyncio import InvalidStateError
from typing import Any, NamedTuple

import anyio

from .._types.errors import ProtocolError

__all__ = ["FieldHandle", "FieldText"]


class FieldText(NamedTuple):
    """Decoded text of the top-level string field ``field`` that became available.

    ``done`` marks the field's last piece; ``text`` may then be ``""``.
    """

    field: str
    text: str
    done: bool


_UNSET: Any = object()  # the value of a string field: joined from the parts when asked


class FieldHandle:
    """The consumer side of one top-level argument field, from :meth:`ArgumentStream.field`.

    Consume it live with :meth:`delta` (or :meth:`take` from synchronous code), or all at once
    with :meth:`wait` (or :attr:`value` once :attr:`done`). Both work for any field.
    """

    __slots__ = (
        "_done",
        "_error",
        "_event",
        "_name",
        "_parts",
        "_path",
        "_read",
        "_value",
        "_waiter",
    )

    def __init__(self, name: str, path: tuple[str | int, ...] = ()) -> None:
        self._path = (name, *path)
        self._name = name + "".join(f"[{step!r}]" for step in path)
        self._parts: list[str] = []  # decoded text so far (string fields)
        self._read = 0  # how many of _parts delta()/take() handed out
        self._done = False
        self._value: Any = _UNSET
        self._error: ProtocolError | None = None
        # The event a waiting task sleeps on: created only when someone waits, dropped when
        # set (an anyio Event cannot be cleared). anyio.Event() finds the running async
        # library each time (3.3 µs, against 0.9 µs for another event of the same class, and
        # 0.4 µs for an asyncio.Event; measured): later waits reuse the class.
        self._waiter: anyio.Event | None = None
        self._event: type[anyio.Event] = anyio.Event

    def __repr__(self) -> str:
        state = "failed" if self._error else "done" if self._done else "streaming"
        return f"<FieldHandle {self._name!r} {state}>"

    @property
    def name(self) -> str:
        """The field's name (with ``['key']``/``[0]`` steps for a value inside it)."""
        return self._name

    @property
    def path(self) -> tuple[str | int, ...]:
        """Where the value is: the field's name, then object keys and array indices."""
        return self._path

    @property
    def done(self) -> bool:
        """True once nothing more will arrive: the value is complete, or the field failed."""
        return self._done

    @property
    def value(self) -> Any:
        """The complete value (decoded string, or parsed JSON for other fields).

        Raises :class:`ProtocolError` if the field never arrived or the stream failed first,
        and :class:`asyncio.InvalidStateError` if it is not :attr:`done` yet.
        """
        if not self._done:
            raise InvalidStateError(f"field {self._name!r} is not complete yet")
        if self._error is not None:
            raise self._error
        if self._value is _UNSET:
            self._value = "".join(self._parts)
        return self._value

    def take(self) -> str:
        """Decoded text that arrived since the last :meth:`take`/:meth:`delta` (``""`` if
        none), without waiting. Non-string fields never have text."""
        parts = self._parts
        start = self._read
        if start == len(parts):
            return ""
        self._read = len(parts)
        return parts[start] if len(parts) - start == 1 else "".join(parts[start:])

    async def delta(self) -> str | None:
        """The next piece of decoded text, waiting for it; ``None`` once the field is complete.
        Raises :class:`ProtocolError` (after the text received) if the field fails."""
        while True:
            if self._read < len(self._parts):
                return self.take()
            if self._done:
                if self._error is not None:
                    raise self._error
                return None
            await self._changed()

    async def wait(self) -> Any:
        """The complete value, like :attr:`value` once it is there."""
        while not self._done:
            await self._changed()
        return self.value

    async def _changed(self) -> None:
        waiter = self._waiter
        if waiter is None:
            waiter = self._waiter = self._event()
            self._event = type(waiter)
        await waiter.wait()

    def _notify(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            waiter.set()

    def _complete(self, value: Any = _UNSET) -> None:
        self._done = True
        self._value = value
        self._notify()

    def _close(self, error: ProtocolError) -> None:
        if not self._done:
            self._done = True
            self._error = error
            self._notify()
