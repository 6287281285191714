"""Where a chat stream is: pending, streaming, finished, stopped or failed."""

from __future__ import annotations

import enum

__all__ = ["StreamState", "why_unfinished"]


class StreamState(enum.StrEnum):
    """Where a :class:`ChatStream` is (``stream.state``)."""

    PENDING = "pending"
    """Not iterated yet: no request was sent."""
    STREAMING = "streaming"
    """Iterated, not ended yet."""
    FINISHED = "finished"
    """Ended with a finish reason: ``stream.completion`` is the answer."""
    STOPPED = "stopped"
    """Ended early by you: ``aclose()``, leaving ``async with``, or cancelling the task."""
    FAILED = "failed"
    """Ended by an error (``stream.error``)."""


def why_unfinished(state: StreamState, error: BaseException | None) -> str:
    """Why a stream in ``state`` has no Completion (``stream.completion`` says it)."""
    if state is StreamState.PENDING:
        return "the stream has not been iterated yet: iterate it to the end first"
    if state is StreamState.STREAMING:
        return "the stream has not finished yet: iterate it to the end first"
    if state is StreamState.STOPPED:
        return (
            "the stream has not finished: it was stopped (closed or cancelled); "
            "stream.partial has what arrived"
        )
    return (
        f"the stream has not finished: it failed with {type(error).__name__}: {error}; "
        "stream.partial has what arrived"
    )
