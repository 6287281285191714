"""A raw-socket HTTP/1.1 client that keeps the response bytes exactly as received.

Used by :mod:`devtools.record`: the request is written by hand, and the response (status line,
headers, chunked framing and all) is kept verbatim. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

__all__ = ["RawExchange", "build_request", "response_complete"]

HOST = "127.0.0.1"


def build_request(
    method: str,
    path: str,
    port: int,
    body: dict[str, Any] | bytes | None = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    """The request bytes: request line, headers (CRLF), blank line, body."""
    if isinstance(body, dict):
        payload = json.dumps(body, ensure_ascii=False).encode()
    else:
        payload = body or b""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}:{port}", "Accept: */*"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


def _chunked_complete(body: bytes) -> bool:
    """True once ``body`` holds a whole chunked payload, through the last-chunk and trailer."""
    pos = 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return False
        size = int(body[pos:eol].split(b";")[0], 16)
        if size == 0:
            return body.find(b"\r\n\r\n", eol) >= 0  # optional trailers, then a blank line
        pos = eol + 2 + size + 2
        if pos > len(body):
            return False


def response_complete(response: bytes) -> bool:
    """Whether ``response`` is a whole HTTP/1.1 response (chunked or with Content-Length)."""
    head_end = response.find(b"\r\n\r\n")
    if head_end < 0:
        return False
    head = response[:head_end].decode("latin-1").lower().split("\r\n")[1:]
    body = response[head_end + 4 :]
    fields = dict(line.split(":", 1) for line in head if ":" in line)
    if "chunked" in fields.get("transfer-encoding", ""):
        return _chunked_complete(body)
    if "content-length" in fields:
        return len(body) >= int(fields["content-length"])
    return False  # read to EOF


class RawExchange:
    """One request on a fresh connection; the response accumulates in ``response``."""

    def __init__(self, port: int, request: bytes, timeout: float = 60.0) -> None:
        self.port = port
        self.request = request
        self.response = b""
        self.eof = False
        self.deadline = time.monotonic() + timeout
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sent_at = time.monotonic()
        self.sock.sendall(request)

    @property
    def complete(self) -> bool:
        """The response is whole (or the server closed the connection)."""
        return self.eof or response_complete(self.response)

    def read_some(self) -> bytes:
        """Read what the socket has (blocking until something arrives); ``b""`` at EOF."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no complete response within the deadline: {self.response!r}")
        self.sock.settimeout(remaining)
        data = self.sock.recv(65536)
        if not data:
            self.eof = True
        self.response += data
        return data

    def read_until(self, marker: bytes) -> None:
        """Read until ``marker`` occurs in the response, or it is complete."""
        while marker not in self.response and not self.complete:
            self.read_some()

    def read_all(self) -> bytes:
        """Read until the response is complete; return it."""
        while not self.complete:
            self.read_some()
        return self.response

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()
