"""Live tool arguments: the incremental JSON scanner, the repair of truncated JSON, the async
handles a task awaits, and the routing of a stream's tool-call pieces to them."""
