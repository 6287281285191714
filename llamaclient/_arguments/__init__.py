"""Live tool arguments: the incremental JSON scanner (``scanner``), the repair of truncated
JSON (``repair``), the async handles a task awaits (``handles``), the stream that feeds the
scanner and fills the handles (``stream``), and the routing of a chat stream's tool-call pieces
to streams (``routing``)."""

from .handles import FieldHandle, FieldText
from .stream import ArgumentStream

__all__ = ["ArgumentStream", "FieldHandle", "FieldText"]
