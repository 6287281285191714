"""Which HTTP stack serves a client: ours on asyncio, httpx everywhere else.

- a ``Transport`` object or an ``httpx.AsyncClient`` given by the user wins;
- ``Config.transport`` ``"asyncio"`` or ``"httpx"`` is taken as said (``"asyncio"`` needs an
  asyncio event loop);
- ``"auto"``: our own HTTP/1.1 (``http://`` and ``https://``, TLS through asyncio's ssl
  support) under asyncio, unless a proxy from the environment applies to the URL
  (``HTTP(S)_PROXY``/``ALL_PROXY`` not excluded by ``NO_PROXY``, as httpx's ``trust_env``
  reads them) or the event loop is not asyncio (trio): then httpx.

Each stack is imported only when chosen, so ``import llamaclient`` stays cheap.
"""

from __future__ import annotations

import asyncio
import urllib.request
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from .._types.config import Config
from .base import TimedTransport

if TYPE_CHECKING:
    import httpx

__all__ = ["choose_transport", "current_backend", "proxied"]


def current_backend() -> Literal["asyncio", "other"]:
    """``"asyncio"`` inside a running asyncio event loop, else ``"other"`` (trio)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return "other"
    return "asyncio"


def proxied(url: str) -> bool:
    """Whether the environment's proxy settings apply to ``url``."""
    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(url)
    if not (proxies.get(parts.scheme.lower()) or proxies.get("all")):
        return False
    host = parts.hostname or ""
    # proxy_bypass_environment reads NO_PROXY the way httpx does (typeshed lacks it).
    bypass = getattr(urllib.request, "proxy_bypass_environment", None)
    return not (bypass(host, proxies) if bypass is not None else False)


def choose_transport(
    config: Config,
    *,
    backend: Literal["asyncio", "other"],
    http_client: httpx.AsyncClient | None = None,
) -> TimedTransport:
    """The transport for ``config`` under ``backend`` (see the module docstring)."""
    kind = config.transport
    if kind == "asyncio" and backend != "asyncio":
        raise ValueError('transport "asyncio" needs an asyncio event loop: use "httpx"')
    if kind == "auto":
        use_httpx = backend != "asyncio" or proxied(config.base_url)
        kind = "httpx" if use_httpx else "asyncio"
    if http_client is not None or kind == "httpx":
        from .httpx import HttpxTransport

        return HttpxTransport(http_client, config.connect_timeout, tls=config.tls)
    from .native import AsyncioTransport

    return AsyncioTransport(config.connect_timeout, tls=config.tls)
