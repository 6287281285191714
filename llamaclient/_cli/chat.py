"""``llamaclient chat`` and ``llamaclient replay``: one turn (or a conversation of turns: several
prompts, or ``-i``) streamed into a view; each answer goes back exactly as it arrived
(``Completion.message()``), so the next prompt comes from the prompt cache. Ctrl-C stops the
turn cleanly (the server frees the slot) and shows what had arrived."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import anyio

from .. import (
    ChatRequest,
    Client,
    Completion,
    ConnectError,
    InferError,
    StreamState,
    UserMessage,
)
from .._embedded import ServerDied, start_embedded, while_alive
from .._embedded.server import LlamaServer, LlamaServerError
from ..testing import FakeLlama, RecordingFormatError
from .options import ChatOptions
from .view import View

__all__ = ["BASE_MODEL_NOTE", "EXIT", "ChatOptions", "chat_main", "replay_main", "run_turn"]

EXIT = {
    "ok": 0,
    "failed": 1,  # the chat failed: a llamaclient error (shown with what had arrived)
    "usage": 2,  # bad command line
    "unreachable": 3,  # the server cannot serve chats (doctor), or cannot be reached
    "embedded": 4,  # the embedded llama-server could not be built or started, or died
    "missing": 5,  # the CLI's extra (rich) is not installed
    "interrupted": 130,  # Ctrl-C: the turn was cancelled, what had arrived was shown
}

# The embedded Gemma 3 270M GGUF has no chat template and no instruction-tune tag: it
# continues the prompt (often echoing it) rather than answering.
BASE_MODEL_NOTE = (
    "Gemma 3 270M is a base model (it continues the text); for real answers: --url URL or "
    "--model PATH"
)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _scheduler() -> Callable[[Callable[[], None]], object]:
    """How to run a callback in the running event loop from a signal handler."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # trio
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon


class StopRequest:
    """Set by the signal handler itself (so the loop sees it before the event loop has run
    the cancel it scheduled)."""

    requested = False


@contextlib.contextmanager
def on_sigint(callback: Callable[[], None]) -> Iterator[StopRequest]:
    """Call ``callback`` (in the event loop) on Ctrl-C or SIGTERM, instead of
    KeyboardInterrupt or death, while inside; a second Ctrl-C interrupts as usual. (With
    resumable streams a dropped connection no longer stops the generation: only the clean
    stop that follows tells the server to.)"""
    schedule = _scheduler()
    stop = StopRequest()
    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}

    def handler(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        stop.requested = True
        schedule(callback)

    try:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, handler)
    except ValueError:  # not the main thread: no Ctrl-C handling here
        yield stop
        return
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


async def run_turn(client: Client, request: ChatRequest, view: View) -> tuple[int, Completion]:
    """Stream one turn into ``view``: the exit code and the Completion (or what arrived)."""
    stream = client.chat(request)
    try:
        with anyio.CancelScope() as scope, on_sigint(scope.cancel) as stop:
            async with stream:
                async for event in stream:
                    view.show(event)  # taken from the stream: it is in the partial, show it
                    if stop.requested:  # events already buffered: show no more
                        break
    except InferError as exc:
        view.failed(exc, stream.partial)
        return (EXIT["unreachable"] if isinstance(exc, ConnectError) else EXIT["failed"]), (
            stream.partial
        )
    if stream.state is StreamState.FINISHED:
        view.finished(stream.completion)
        return EXIT["ok"], stream.completion
    view.stopped(stream.partial)
    return EXIT["interrupted"], stream.partial


async def _turn(url: str, options: ChatOptions, prompt: str, view: View) -> int:
    request = options.request(prompt)
    async with Client(options.config(url), transport=options.transport) as client:
        code, completion = await run_turn(client, request, view)
    if code == EXIT["ok"]:  # exact echo: the next turn reuses the prompt cache
        options.history += [UserMessage(prompt), completion.message()]
    return code


def _one_turn(
    server: LlamaServer | None, url: str, options: ChatOptions, prompt: str, view: View
) -> int:
    if server is None:
        return asyncio.run(_turn(url, options, prompt, view))
    return asyncio.run(while_alive(server, _turn(url, options, prompt, view)))


def _prompts(
    prompts: Sequence[str], interactive: bool, ask: Callable[[], str]
) -> Iterator[tuple[str, bool]]:
    """Each turn's prompt, and whether it was typed (at ``you>``) rather than given."""
    for text in prompts:
        if text:
            yield text, False
    if not interactive:
        return
    while True:
        try:
            text = ask()
        except EOFError:
            return
        if text.strip():
            yield text, True


def _start(embedded_model: Path | None) -> LlamaServer | None:
    """The embedded server, started; None (after saying why) when it cannot start."""
    try:
        server = start_embedded(embedded_model)
    except (LlamaServerError, OSError, subprocess.CalledProcessError) as exc:
        print(f"the embedded llama-server could not start: {exc}", file=sys.stderr)
        return None
    print(
        f"llama-server on {server.base_url} (log: {server.log_path})", file=sys.stderr, flush=True
    )
    if embedded_model is None:
        print(BASE_MODEL_NOTE, file=sys.stderr, flush=True)
    return server


def chat_main(
    options: ChatOptions,
    prompts: Sequence[str],
    interactive: bool,
    view: View,
    ask: Callable[[], str],
    embedded_model: Path | None = None,
) -> int:
    """Run the chat against ``options.url`` or the embedded server: one turn per prompt (one
    conversation: each answer goes back exactly), then with ``interactive`` a turn per
    typed line until end of input. Returns the exit code: the first failed turn's (an
    interactive session goes on after a failed or stopped turn, and ends with 0)."""
    server: LlamaServer | None = None
    try:
        if options.url is None:
            server = _start(embedded_model)
            if server is None:
                return EXIT["embedded"]
        url = options.url or (server.base_url if server else "")
        code = EXIT["ok"]
        for turn, (text, typed) in enumerate(_prompts(prompts, interactive, ask)):
            if turn and not typed:
                view.asked(text)
            code = _one_turn(server, url, options, text, view)
            if code != EXIT["ok"] and not (interactive and code in (1, 130)):
                return code
        return EXIT["ok"] if interactive else code
    except KeyboardInterrupt:
        return EXIT["interrupted"]
    except ServerDied as exc:
        print(f"\n{exc}", file=sys.stderr)
        return EXIT["embedded"]
    finally:
        if server is not None:
            server.stop()


async def _replay(path: Path, view: View) -> int:
    fake = FakeLlama().replay(path)
    async with fake.client(stall_timeout=5.0, max_retries=0) as client:
        code, _ = await run_turn(client, ChatRequest([UserMessage("(replay)")]), view)
    return code


def replay_main(path: Path, view: View) -> int:
    """Render the recorded stream in ``path`` as ``chat`` would (exit 2: not a recording)."""
    try:
        return asyncio.run(_replay(path, view))
    except (OSError, RecordingFormatError) as exc:
        print(f"cannot replay {path}: {exc}", file=sys.stderr)
        return EXIT["usage"]
