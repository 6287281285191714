"""Images and audio through the client: the server's ``/props`` modalities are asked once
per client, before the first request that needs them; a server that cannot take the input
gives ``UnsupportedInputError`` without the request being sent, and the server's own refusal
(when ``/props`` could not say) is mapped to the same error. Text-only chats never ask."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from llamaclient import (
    AudioPart,
    ChatRequest,
    HTTPStatusError,
    ImagePart,
    Props,
    Slot,
    TextPart,
    UnsupportedInputError,
    UserMessage,
)
from tests.conftest import CHAT, ClientFactory, drain, user
from tests.support.faultserver import FaultServer, Json, chat_chunks, stream

pytestmark = pytest.mark.anyio

PNG = bytes.fromhex("89504e470d0a1a0a")
HINT = "if this is unexpected, you may need to provide the mmproj"


def props(vision: bool = False, audio: bool = False) -> dict[str, Any]:
    return {
        "default_generation_settings": {"n_ctx": 4096, "params": {}},
        "total_slots": 2,
        "modalities": {"vision": vision, "video": False, "audio": audio},
        "chat_template_caps": {"supports_tools": True},
    }


def refusal(word: str) -> dict[str, Any]:
    message = f"{word} input is not supported - hint: {HINT}"
    return {"error": {"code": 500, "message": message, "type": "server_error"}}


def image(text: str = "What is this?") -> ChatRequest:
    return ChatRequest([UserMessage([TextPart(text), ImagePart(PNG)])])


def audio() -> ChatRequest:
    return ChatRequest([UserMessage([AudioPart(b"RIFF", "wav")])])


def paths(server: FaultServer) -> list[str]:
    """The requests' paths, without the ``DELETE /v1/stream`` any failed chat sends (it
    stops a generation the server may have started; resume is on by default)."""
    return [request.path for request in server.requests if request.path != "/v1/stream"]


async def test_an_image_to_a_server_without_vision_is_refused_before_sending(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/props", [Json(200, props())])
    client = make_client()
    events, error = await drain(client.chat(image()))
    assert isinstance(error, UnsupportedInputError), error
    assert (events, error.modality, error.status, error.partial) == ([], "vision", None, None)
    assert str(error).startswith("image input is not supported by this server")
    assert [r.path for r in server.requests] == ["/props"]  # nothing else was sent at all


async def test_audio_is_checked_too(server: FaultServer, make_client: ClientFactory) -> None:
    server.route("GET", "/props", [Json(200, props(vision=True))])
    _, error = await drain(make_client().chat(audio()))
    assert isinstance(error, UnsupportedInputError)
    assert error.modality == "audio"
    assert paths(server) == ["/props"]


async def test_props_is_asked_once_per_client_and_an_able_server_gets_the_parts(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/props", [Json(200, props(vision=True))])
    server.route("POST", CHAT, stream(chat_chunks(["A ", "cat."])))
    client = make_client()
    for _ in range(3):
        assert (await client.chat(image()).collect()).content == "A cat."
    assert paths(server) == ["/props", CHAT, CHAT, CHAT]
    content = server.requests[1].json()["messages"][0]["content"]
    assert content[0] == {"type": "text", "text": "What is this?"}
    assert content[1]["type"] == "image_url"
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    # A second client asks again (the answer is per server process, kept per client).
    await make_client().chat(image()).collect()
    assert paths(server).count("/props") == 2


async def test_concurrent_first_requests_all_get_the_same_answer(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/props", [Json(200, props())])
    client = make_client()
    errors: list[BaseException | None] = []

    async def one() -> None:
        errors.append((await drain(client.chat(image())))[1])

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(one)
    assert len(errors) == 4
    assert all(isinstance(e, UnsupportedInputError) for e in errors)
    assert paths(server) == ["/props"]  # one question for all four


async def test_text_only_chats_never_ask(server: FaultServer, make_client: ClientFactory) -> None:
    server.route("POST", CHAT, stream(chat_chunks(["hi"])))
    client = make_client()
    await client.chat(user()).collect()
    await client.chat(ChatRequest([UserMessage([TextPart("only text")])])).collect()
    assert paths(server) == [CHAT, CHAT]


async def test_client_props_fills_the_answer_in(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/props", [Json(200, props())])
    client = make_client()
    info = await client.props()
    assert isinstance(info, Props)
    assert (info.n_ctx, info.total_slots, info.modalities.vision) == (4096, 2, False)
    _, error = await drain(client.chat(image()))
    assert isinstance(error, UnsupportedInputError)
    assert paths(server) == ["/props"]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(Json(404, {"error": {"code": 404, "message": "File Not Found"}}), id="404"),
        pytest.param(Json(200, {"total_slots": 1}), id="no-modalities"),
        pytest.param(Json(200, {"modalities": "yes"}), id="malformed"),
    ],
)
async def test_when_props_cannot_say_the_servers_refusal_is_mapped(
    server: FaultServer, make_client: ClientFactory, answer: Any
) -> None:
    server.route("GET", "/props", [answer])
    server.route("POST", CHAT, [Json(500, refusal("image"))])
    client = make_client(max_retries=0)
    _, error = await drain(client.chat(image()))
    assert isinstance(error, UnsupportedInputError), error
    assert (error.modality, error.status) == ("vision", 500)
    assert error.message == f"image input is not supported - hint: {HINT}"
    assert json.loads(error.body) == refusal("image")
    assert paths(server) == ["/props", CHAT]
    await drain(client.chat(image()))
    assert paths(server) == ["/props", CHAT, CHAT]  # /props is not asked again


async def test_a_refusal_is_final_never_retried(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/props", [Json(200, {})])
    server.route("POST", CHAT, [Json(500, refusal("audio"))])
    _, error = await drain(make_client(max_retries=3).chat(audio()))
    assert isinstance(error, UnsupportedInputError)
    assert error.modality == "audio"
    assert paths(server).count(CHAT) == 1


async def test_the_key_never_shows_in_a_refusal(
    server: FaultServer, make_client: ClientFactory
) -> None:
    key = "sk-live-0123456789abcdef"
    body = refusal("image")
    body["error"]["message"] += f" (request had Authorization: Bearer {key})"
    server.route("GET", "/props", [Json(404, {})])
    server.route("POST", CHAT, [Json(500, body)])
    _, error = await drain(make_client(api_key=key, max_retries=0).chat(image()))
    assert isinstance(error, UnsupportedInputError)
    for text in (str(error), error.message, error.body, repr(error)):
        assert key not in text


async def test_the_key_never_shows_in_a_get_error(
    server: FaultServer, make_client: ClientFactory
) -> None:
    key = "sk-live-0123456789abcdef"
    echoed = {"error": {"code": 401, "message": f"bad key {key}", "type": "authentication_error"}}
    server.route("GET", "/slots", [Json(401, echoed)])
    with pytest.raises(HTTPStatusError) as info:
        await make_client(api_key=key).slots()
    error = info.value
    assert (error.status, error.type, error.code) == (401, "authentication_error", 401)
    for text in (str(error), error.body, error.message or "", repr(error)):
        assert key not in text


async def test_slots_are_typed(server: FaultServer, make_client: ClientFactory) -> None:
    entries = [
        {"id": 0, "n_ctx": 4096, "speculative": False, "is_processing": True, "id_task": 7},
        {"id": 1, "n_ctx": 4096, "speculative": False, "is_processing": False},
    ]
    server.route("GET", "/slots", [Json(200, entries)])
    slots = await make_client().slots()
    assert all(isinstance(slot, Slot) for slot in slots)
    assert [(s.id, s.is_processing, s.n_ctx, s.id_task) for s in slots] == [
        (0, True, 4096, 7),
        (1, False, 4096, None),
    ]
    assert [s.raw for s in slots] == entries
    assert slots[0]["is_processing"] is True  # code written against the dicts still runs
