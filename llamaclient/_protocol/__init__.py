"""The pure core: wire structs, the request body, SSE, the assembler, HTTP/1.1 framing and the
retry arithmetic. No I/O: everything here is fed bytes and returns values."""
