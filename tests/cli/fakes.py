"""What the CLI's tests share: the API key of ``FakeLlama(api_key=KEY)``, and doctor's raw
probes sent through the same (fake) transport as its client."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from llamaclient import Transport

Probe = Callable[[str, str, dict[str, Any]], Awaitable[int | None]]  # as doctor's

KEY = "sk-the-right-one"


def probe_over(transport: Transport, url: str) -> Probe:
    """doctor's raw requests, through the same (fake) transport as its client."""

    async def probe(method: str, path: str, body: dict[str, Any]) -> int | None:
        response = await transport.send(method, url + path, {}, json.dumps(body).encode())
        await response.aclose()
        return response.status

    return probe
