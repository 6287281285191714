"""Read and write recorded HTTP exchanges (``recordings/NAME.http``).

File format (bytes; see ``recordings/README.md``)::

    # scenario: tool_call            <- metadata: "# key: value" lines, UTF-8, one line each
    # request-bytes: 512             <- exact size of the request section
    # response-bytes: 2048           <- exact size of the response section
    >>> request
    <request-bytes bytes: request line, headers (CRLF), blank line, body>
    <<< response
    <response-bytes bytes: the response exactly as received, chunked framing included>

``load(path)`` parses it; ``Recording.body`` is the de-chunked payload and ``Recording.chunks``
the HTTP chunks as the server sent them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Recording", "RecordingFormatError", "dechunk", "dump", "load", "parse"]

REQUEST_MARK = b">>> request\n"
RESPONSE_MARK = b"\n<<< response\n"


class RecordingFormatError(ValueError):
    """The file does not follow the recording format."""


def _split_head(raw: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
    """Split an HTTP message into its first line, header fields and body bytes."""
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        raise RecordingFormatError("no end of headers (CRLF CRLF)")
    first, *lines = raw[:end].decode("latin-1").split("\r\n")
    headers = []
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise RecordingFormatError(f"bad header line {line!r}")
        headers.append((name, value.strip()))
    return first, headers, raw[end + 4 :]


def dechunk(raw: bytes, cut: bool = False) -> list[bytes]:
    """The chunk payloads of a chunked body, in order (the last-chunk excluded). ``cut``: the
    connection was cut on purpose (``# cut: true``): the body ends wherever it ends, and the
    last payload is what arrived of its chunk."""
    chunks: list[bytes] = []
    pos = 0
    while True:
        eol = raw.find(b"\r\n", pos)
        if eol < 0:
            if cut:
                return chunks
            raise RecordingFormatError("truncated chunked body")
        size = int(raw[pos:eol].split(b";")[0], 16)
        if size == 0:
            return chunks
        data = raw[eol + 2 : eol + 2 + size]
        if len(data) != size or raw[eol + 2 + size : eol + 4 + size] != b"\r\n":
            if cut:
                return [*chunks, data] if data else chunks
            raise RecordingFormatError("truncated chunk")
        chunks.append(data)
        pos = eol + 4 + size


@dataclass(frozen=True)
class Recording:
    """One recorded exchange. Header names keep the case the server sent."""

    meta: dict[str, str]
    raw_request: bytes
    request_line: str
    request_headers: list[tuple[str, str]]
    request_body: bytes
    raw_response: bytes
    status: int
    reason: str
    headers: list[tuple[str, str]]
    raw_body: bytes
    chunks: list[bytes]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first response header called ``name`` (case-insensitive), or ``None``."""
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    @property
    def chunked(self) -> bool:
        """Whether the body used chunked transfer coding."""
        return "chunked" in (self.header("Transfer-Encoding") or "").lower()

    def sse_events(self) -> list[bytes]:
        """The body split into SSE events (each without its ``\\n\\n`` terminator)."""
        parts = self.body.split(b"\n\n")
        return parts[:-1] if parts and parts[-1] == b"" else parts


def parse(data: bytes) -> Recording:
    """Parse the bytes of a recording file."""
    start = data.find(REQUEST_MARK)
    if start < 0:
        raise RecordingFormatError("no '>>> request' line")
    meta: dict[str, str] = {}
    for line in data[:start].decode().splitlines():
        key, sep, value = line.removeprefix("# ").partition(": ")
        if not line.startswith("# ") or not sep:
            raise RecordingFormatError(f"bad metadata line {line!r}")
        meta[key] = value
    try:
        n_req, n_resp = int(meta["request-bytes"]), int(meta["response-bytes"])
    except (KeyError, ValueError) as exc:
        raise RecordingFormatError("request-bytes/response-bytes metadata missing") from exc
    pos = start + len(REQUEST_MARK)
    raw_request = data[pos : pos + n_req]
    pos += n_req
    if data[pos : pos + len(RESPONSE_MARK)] != RESPONSE_MARK:
        raise RecordingFormatError("no '<<< response' line after the request")
    raw_response = data[pos + len(RESPONSE_MARK) :]
    if len(raw_response) != n_resp:
        raise RecordingFormatError(f"response is {len(raw_response)} bytes, expected {n_resp}")
    request_line, request_headers, request_body = _split_head(raw_request)
    status_line, headers, raw_body = _split_head(raw_response)
    _version, status, reason = [*status_line.split(" ", 2), ""][:3]
    chunked = any(k.lower() == "transfer-encoding" and "chunked" in v for k, v in headers)
    chunks = dechunk(raw_body, meta.get("cut") == "true") if chunked else [raw_body]
    return Recording(
        meta=meta,
        raw_request=raw_request,
        request_line=request_line,
        request_headers=request_headers,
        request_body=request_body,
        raw_response=raw_response,
        status=int(status),
        reason=reason,
        headers=headers,
        raw_body=raw_body,
        chunks=chunks,
        body=b"".join(chunks),
    )


def load(path: str | Path) -> Recording:
    """Read and parse ``recordings/NAME.http``."""
    return parse(Path(path).read_bytes())


def dump(path: str | Path, meta: dict[str, str], request: bytes, response: bytes) -> Path:
    """Write one exchange in the recording format; returns the path."""
    lines = [f"# {k}: {v}" for k, v in meta.items() if k not in ("request-bytes", "response-bytes")]
    lines += [f"# request-bytes: {len(request)}", f"# response-bytes: {len(response)}"]
    for line in lines:
        if "\n" in line or "\r" in line:
            raise ValueError(f"metadata must be one line: {line!r}")
    head = ("\n".join(lines) + "\n").encode()
    path = Path(path)
    path.write_bytes(head + REQUEST_MARK + request + RESPONSE_MARK + response)
    return path
