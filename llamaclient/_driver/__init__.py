"""The driver's side of a turn: the I/O a ``ChatTurn`` asks for, performed through one
server's endpoint (the transport, the slot lines, the lookups a client's turns share)."""
