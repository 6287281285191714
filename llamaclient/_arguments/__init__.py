"""Live tool arguments: the incremental JSON scanner (``scanner``), the repair of truncated
JSON (``repair``), the stream and the async handles a task awaits (``handles``), and the routing
of a chat stream's tool-call pieces to them (``routing``)."""

from .handles import ArgumentStream, FieldHandle, FieldText

__all__ = ["ArgumentStream", "FieldHandle", "FieldText"]
