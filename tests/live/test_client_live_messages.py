"""Messages, images and server info against a real llama-server (the scripted model, no
vision projector): an image is refused with ``UnsupportedInputError`` (from ``/props``
before sending, and from the server's own refusal when ``/props`` cannot say); ``props()``
and ``slots()`` are typed and agree with the raw answers; ``HTTPStatusError`` carries the
envelope's fields; a history saved as JSON or passed through the OpenAI format is sent back
as the same prompt (the cache takes all of it)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import msgspec
import pytest

from llamaclient import (
    ChatMessage,
    Client,
    ContentPart,
    HTTPStatusError,
    ImagePart,
    TextPart,
    ToolMessage,
    UnsupportedInputError,
    UserMessage,
    build_body,
    from_openai,
    to_openai,
)
from tests.live.chat import ALL_TOOLS, drain, live_config, script_request

pytestmark = pytest.mark.anyio

# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63fccfc0500f00048501808499a6210000000049454e44ae426082"
)


def image_request() -> Any:
    content: list[ContentPart] = [TextPart("What is in this picture?"), ImagePart(PNG)]
    return script_request("answer_no_thinking", [UserMessage(content)])


async def test_an_image_is_refused_from_props_before_sending(live_client: Client) -> None:
    props = await live_client.props()
    assert props.modalities.vision is False
    events, error = await drain(live_client.chat(image_request()))
    assert isinstance(error, UnsupportedInputError), error
    assert (events, error.modality, error.status) == ([], "vision", None)
    assert not [s.id for s in await live_client.slots() if s.is_processing]


class _NoProps(httpx.AsyncBaseTransport):
    """Relays to the real server, except ``/props``, which it answers 404 (an older server,
    or a proxy in front): the client cannot tell, so the image is sent."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.chat_posts = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(404, json={"error": {"code": 404, "message": "File Not Found"}})
        if request.url.path == "/v1/chat/completions":
            self.chat_posts += 1
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_the_servers_own_refusal_is_mapped(base_url: str) -> None:
    relay = _NoProps()
    async with (
        httpx.AsyncClient(transport=relay) as http,
        Client(live_config(base_url, "httpx"), http_client=http) as client,
    ):
        events, error = await drain(client.chat(image_request()))
    assert isinstance(error, UnsupportedInputError), error
    assert (events, error.modality, error.status) == ([], "vision", 500)
    assert error.message.startswith("image input is not supported - hint:")
    assert json.loads(error.body)["error"]["type"] == "server_error"
    assert relay.chat_posts == 1  # sent once, never retried


async def test_props_are_typed_and_agree_with_the_raw_answer(
    live_client: Client, base_url: str
) -> None:
    props = await live_client.props()
    async with httpx.AsyncClient() as http:
        raw = (await http.get(base_url + "/props")).json()
    raw.pop("media_marker")  # random per request
    assert {k: v for k, v in props.raw.items() if k != "media_marker"} == raw
    assert props.n_ctx == raw["default_generation_settings"]["n_ctx"] == 8192  # 16384 / 2
    assert props.total_slots == 2
    assert props.model_path is not None
    assert props.model_path.endswith("scripted.gguf")
    assert (props.modalities.vision, props.modalities.audio) == (False, False)
    caps = props.chat_template_caps
    assert (caps.supports_tools, caps.supports_tool_calls, caps.supports_system_role) == (
        True,
        True,
        True,
    )
    assert caps.supports_preserve_reasoning is True  # the template renders reasoning back
    assert props.eos_token == "<|im_end|>"
    assert props.build_info
    assert props.is_sleeping is False


async def test_slots_are_typed_and_count_a_task(live_client: Client) -> None:
    await live_client.chat(script_request("answer_no_thinking", slot=1)).collect()
    slots = await live_client.slots()
    assert [s.id for s in slots] == [0, 1]
    assert all(s.n_ctx == 8192 and not s.is_processing for s in slots)
    used = slots[1]
    assert used.id_task is not None
    assert used.n_prompt_tokens is not None
    assert used.n_prompt_tokens > 0
    assert used.n_prompt_tokens_processed is not None
    assert used.raw["id"] == 1


@pytest.mark.parametrize(
    ("extra", "status", "kind", "message"),
    [
        ({"reasoning_format": "bogus"}, 500, "server_error", "Unknown reasoning format: bogus"),
        (
            {"top_logprobs": 3},
            400,
            "invalid_request_error",
            "top_logprobs requires logprobs to be set to true",
        ),
    ],
)
async def test_an_http_error_carries_the_envelope(
    live_client: Client, extra: dict[str, Any], status: int, kind: str, message: str
) -> None:
    request = script_request("answer_no_thinking", extra=extra)
    _, error = await drain(live_client.chat(request))
    assert isinstance(error, HTTPStatusError), error
    assert (error.status, error.code, error.type, error.message) == (status, status, kind, message)
    assert str(error) == f"HTTP {status} {kind}: {message}"


@pytest.mark.parametrize("route", ["tagged-json", "openai-format"])
async def test_a_saved_history_is_the_same_prompt(live_client: Client, route: str) -> None:
    messages: list[ChatMessage] = [UserMessage("Read notes.txt, then write out.txt.")]
    first = await live_client.chat(
        script_request("tool_call", messages, tools=ALL_TOOLS, slot=0)
    ).collect()
    messages.append(first.message())
    messages += [ToolMessage(c.id, "remember the milk", name=c.name) for c in first.tool_calls]
    if route == "tagged-json":
        loaded = msgspec.json.decode(msgspec.json.encode(messages), type=list[ChatMessage])
    else:
        loaded = from_openai(json.loads(json.dumps(to_openai(messages))))
    assert loaded == messages
    again = script_request("answer_no_thinking", loaded, tools=ALL_TOOLS, slot=0)
    direct = script_request("answer_no_thinking", messages, tools=ALL_TOOLS, slot=0)
    assert build_body(live_client.config, again) == build_body(live_client.config, direct)
    second = await live_client.chat(again).collect()
    assert first.usage.prompt_tokens is not None
    assert second.timings is not None
    # The whole first prompt came from the cache (the scripted model has no sliding window;
    # the server re-evaluates at most the last token).
    assert second.timings.cache_n >= first.usage.prompt_tokens - 1
