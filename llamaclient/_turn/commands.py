"""What a :class:`~llamaclient._turn.machine.ChatTurn` asks its driver to do next.

Each command is a small frozen value; the driver performs it and feeds the result back as
one input of the machine (the input each command expects is named below). Commands that
report nothing (``Close``, ``Arm``, ``Leave``) are performed and the driver asks again.

The driver holds at most one response at a time: ``Send`` opens it, ``Read``, ``ReadAll``
and ``Drain`` read it, ``Close`` releases it.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .._types.completion import Completion
from .._types.errors import InferError

__all__ = [
    "READ",
    "Admit",
    "Arm",
    "Call",
    "Close",
    "Command",
    "Done",
    "Drain",
    "Free",
    "Leave",
    "Line",
    "Read",
    "ReadAll",
    "Route",
    "Send",
    "Sleep",
    "Timer",
]

Timer = Literal["wait", "load"]
"""The timers a turn arms: ``load`` bounds a wait for a loading model (``load_timeout``);
``wait`` is the head timeout of a ``Send`` (``wait_timeout``), enforced by the transport."""


class Send(msgspec.Struct, frozen=True, gc=False):
    """Send a request and wait for its head: ``opened(status, header)``, or ``failed(kind,
    message)``. ``wait`` bounds the wait for the head (``failed("timeout", ...)`` past it);
    ``stall`` bounds each later body read (``failed("stall", ...)``). ``headers`` are added
    to the endpoint's own."""

    method: str
    path: str
    body: bytes | None
    headers: tuple[tuple[str, str], ...]
    wait: float | None
    stall: float | None


class Read(msgspec.Struct, frozen=True, gc=False):
    """Read the next piece of the open response's body: ``data(chunk)`` (``b""`` at its
    end), or ``failed(kind, message)``."""


READ = Read()  # the one Read: the driver's hot path compares by identity


class ReadAll(msgspec.Struct, frozen=True, gc=False):
    """Read the whole body of the open response, at most ``limit`` bytes, then release it:
    ``body(data, truncated)`` (``truncated``: the body was longer; ``data`` is its first
    ``limit`` bytes), or ``failed(kind, message)``."""

    limit: int


class Drain(msgspec.Struct, frozen=True, gc=False):
    """The stream is over (``[DONE]``): take the rest of the body for at most ``seconds``
    (so the HTTP stack can pool the connection), ignoring what comes or fails, then
    release the response. Reports nothing: the driver then asks again."""

    seconds: float


class Call(msgspec.Struct, frozen=True, gc=False):
    """A small exchange (``/health``, ``/slots``, ``/props``, ``/models``, a control call,
    a resume lookup, a cancel): ``answered(status, data)``, or ``failed(kind, message)``,
    or ``fired(timer)`` when the armed ``bound`` timer ran out first. ``headers`` are added
    to the endpoint's own (the turn's affinity). ``shared``: calls of one client with the
    same method and path that overlap share one exchange (lookups whose answer is the same
    for every turn: they carry no ``headers``). ``limit``: the body's size bound.
    ``quiet``: bounded by ``seconds`` and shielded; any outcome is fine (a cancel in the
    cleanup)."""

    method: str
    path: str
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    shared: bool = False
    bound: Timer | None = None
    limit: int = 0
    quiet: float | None = None


class Sleep(msgspec.Struct, frozen=True, gc=False):
    """Wait ``seconds``: ``woke()``, or ``fired(timer)`` when the armed ``bound`` timer ran
    out first."""

    seconds: float
    bound: Timer | None = None


class Arm(msgspec.Struct, frozen=True, gc=False):
    """Start the timer ``timer``: it fires ``seconds`` from now, ending the ``Call`` or
    ``Sleep`` it bounds. Reports nothing."""

    timer: Timer
    seconds: float


class Line(msgspec.Struct, frozen=True, gc=False):
    """Wait in this client's line for ``slot`` until the number of requests ahead differs
    from ``ahead`` (the first ``Line`` joins it): ``line(ahead, released_ago)``, where
    ``released_ago`` is how many seconds ago this client's last request on the slot ended
    (None: never, or long ago)."""

    slot: int
    ahead: int


class Admit(msgspec.Struct, frozen=True, gc=False):
    """Wait for a place under the shared concurrency limit (the ``Limiter``: the first
    ``Admit`` joins its line, with ``priority``) until the number of requests ahead differs
    from ``ahead``: ``admitted(ahead)`` (0: the turn has its place), or ``failed("timeout",
    ...)`` past the limiter's ``wait_timeout``."""

    priority: int
    ahead: int


class Free(msgspec.Struct, frozen=True, gc=False):
    """Give the place under the concurrency limit back. Reports nothing."""


class Leave(msgspec.Struct, frozen=True, gc=False):
    """Leave the slot line (the next in line may go). Reports nothing."""

    slot: int


class Route(msgspec.Struct, frozen=True, gc=False):
    """A pool's turn: choose the server (leaving out ``failed``, the index of one that
    could not be reached): ``routed(target, event)``."""

    failed: int | None = None


class Close(msgspec.Struct, frozen=True, gc=False):
    """Release the open response now (its connection is closed unless the body was read
    to its end). Reports nothing."""


class Done(msgspec.Struct, frozen=True, gc=False):
    """The turn is over: ``completion`` (it finished), ``error`` (it failed), or neither
    (the user stopped it). The driver asks nothing more."""

    completion: Completion | None = None
    error: InferError | None = None


Command = (
    Send
    | Read
    | ReadAll
    | Drain
    | Call
    | Sleep
    | Arm
    | Line
    | Leave
    | Admit
    | Free
    | Route
    | Close
    | Done
)
