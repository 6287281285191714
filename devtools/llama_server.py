"""Start and stop a real ``llama-server`` on 127.0.0.1 (the code lives in the package,
``llamaclient._embedded.server``, which the CLI's embedded default uses too)."""

from __future__ import annotations

from llamaclient._embedded.server import (
    LlamaServer,
    LlamaServerError,
    LlamaServerNotFound,
    find_binary,
    free_port,
    health_status,
)

__all__ = [
    "LlamaServer",
    "LlamaServerError",
    "LlamaServerNotFound",
    "find_binary",
    "free_port",
    "health_status",
]
