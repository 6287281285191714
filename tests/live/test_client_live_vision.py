"""Images reaching a model: the scripted model with a tiny random-weight vision projector
(``devtools.scripted_mmproj``, loaded with ``--mmproj``). Each image becomes
``IMAGE_TOKENS`` prompt tokens, counted in the usage; the same image sent again is taken from
the prompt cache (our bodies are deterministic); a server with vision but no audio refuses
audio before anything is sent."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.llama_server import LlamaServer
from devtools.scripted_mmproj import IMAGE_TOKENS, write_mmproj
from llamaclient import (
    AudioPart,
    ChatRequest,
    Client,
    Completion,
    ContentPart,
    ImagePart,
    TextPart,
    UnsupportedInputError,
    UserMessage,
)
from tests.live.chat import drain, live_config, script_request

pytestmark = pytest.mark.anyio

# A 1x1 PNG (resized by the projector to 28x28: IMAGE_TOKENS tokens).
RED = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63fccfc0500f00048501808499a6210000000049454e44ae426082"
)


@pytest.fixture(scope="module")
def vision_url(
    llama_server_binary: Path, scripted_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A llama-server running the scripted model with the scripted vision projector."""
    folder = tmp_path_factory.mktemp("vision")
    mmproj = write_mmproj(folder / "mmproj.gguf")
    flags = ("-np", "1", "-c", "4096", "--mmproj", str(mmproj))
    server = LlamaServer(
        scripted_model_path, *flags, log_path=folder / "server.log", binary=llama_server_binary
    )
    server.start()
    try:
        yield server.base_url
    finally:
        server.stop()


def ask(*images: ImagePart) -> ChatRequest:
    content: list[ContentPart] = [TextPart("Describe this."), *images]
    return script_request("answer_no_thinking", [UserMessage(content)], max_tokens=4)


def prompt_tokens(completion: Completion) -> int:
    assert completion.usage.prompt_tokens is not None
    return completion.usage.prompt_tokens


async def test_the_server_says_it_takes_images(vision_url: str) -> None:
    async with Client(live_config(vision_url)) as client:
        props = await client.props()
    assert (props.modalities.vision, props.modalities.audio) == (True, False)


async def test_each_image_is_counted_in_the_prompt(vision_url: str) -> None:
    async with Client(live_config(vision_url)) as client:
        text = await client.complete(ask())
        one = await client.complete(ask(ImagePart(RED)))
        two = await client.complete(ask(ImagePart(RED), ImagePart(RED, mime="image/png")))
    assert prompt_tokens(one) == prompt_tokens(text) + IMAGE_TOKENS
    assert prompt_tokens(two) == prompt_tokens(text) + 2 * IMAGE_TOKENS
    assert one.finish_reason is not None


async def test_the_same_image_again_comes_from_the_prompt_cache(vision_url: str) -> None:
    async with Client(live_config(vision_url)) as client:
        first = await client.complete(ask(ImagePart(RED)))
        again = await client.complete(ask(ImagePart(RED)))
    assert again.timings is not None
    # Everything but the last token is reused, image included: the body was the same bytes.
    assert again.timings.cache_n >= prompt_tokens(first) - 1
    assert again.timings.prompt_n <= 1  # the image was not encoded again (measured: 40 + 1)


async def test_audio_to_a_vision_only_server_is_refused_before_sending(vision_url: str) -> None:
    async with Client(live_config(vision_url)) as client:
        request = ChatRequest([UserMessage([AudioPart(b"RIFF....WAVE", "wav")])])
        events, error = await drain(client.chat(request))
    assert isinstance(error, UnsupportedInputError), error
    assert (events, error.modality, error.status) == ([], "audio", None)


class _Png(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(RED)))
        self.end_headers()
        self.wfile.write(RED)

    def log_message(self, *args: object) -> None:
        pass


async def test_an_image_url_is_fetched_by_the_server(vision_url: str) -> None:
    images = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Png)
    thread = threading.Thread(target=images.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{images.server_address[1]}/red.png"
        async with Client(live_config(vision_url)) as client:
            text = await client.complete(ask())
            fetched = await client.complete(ask(ImagePart(url=url)))
    finally:
        images.shutdown()
        images.server_close()
    assert prompt_tokens(fetched) == prompt_tokens(text) + IMAGE_TOKENS
