"""FakeLlama as a server among others, for pool and router code: the slots its chats and
other clients keep busy, a server that is down or dies, one still loading its model, an API
key, what each request carried, and router mode (statuses a load moves through, the
router's error answers, a model with a server of its own)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from llamaclient import (
    ChatRequest,
    ConnectError,
    Content,
    HTTPStatusError,
    ModelLimitError,
    ModelLoadError,
    ModelLoading,
    ModelNotFoundError,
    ModelNotLoadedError,
    Retrying,
    StalledError,
    TransportError,
    UserMessage,
    Waiting,
)
from llamaclient.testing import FakeCall, FakeLlama, FakeModel, FakeRequest

pytestmark = pytest.mark.anyio

HI = ChatRequest([UserMessage("hi")])
CHAT = "/v1/chat/completions"


async def get(fake: FakeLlama, path: str, **headers: str) -> tuple[int, Any]:
    response = await fake.transport().send("GET", fake.url + path, headers, None)
    return response.status, json.loads(await response.aread())


async def post(fake: FakeLlama, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    response = await fake.transport().send("POST", fake.url + path, {}, json.dumps(body).encode())
    return response.status, json.loads(await response.aread())


def arriving(answer: str) -> tuple[anyio.Event, Callable[[FakeRequest], str]]:
    """A reply function answering ``answer``, and an event set when a chat comes."""
    arrived = anyio.Event()

    def reply(_: FakeRequest) -> str:
        arrived.set()
        return answer

    return arrived, reply


async def processing(fake: FakeLlama) -> list[bool]:
    _, slots = await get(fake, "/slots")
    return [s["is_processing"] for s in slots]


# -- slots ------------------------------------------------------------------------------


async def test_a_held_chat_keeps_its_slot_busy_until_it_is_released() -> None:
    gate = anyio.Event()
    arrived, reply = arriving("held")
    fake = FakeLlama(n_slots=2).fail(hold=gate).reply(reply)
    async with fake.client() as client, anyio.create_task_group() as tg:
        done: list[str | None] = []

        async def chat() -> None:
            done.append((await client.complete(ChatRequest([UserMessage("hi")], slot=1))).content)

        tg.start_soon(chat)
        await arrived.wait()
        assert await processing(fake) == [False, True]
        assert done == []
        gate.set()
    assert done == ["held"]
    assert await processing(fake) == [False, False]


async def test_an_unpinned_chat_takes_the_first_free_slot() -> None:
    gate = anyio.Event()
    arrived, reply = arriving("ok")
    fake = FakeLlama(n_slots=3).fail(hold=gate).reply(reply)
    fake.busy = {0}
    async with fake.client() as client, anyio.create_task_group() as tg:
        tg.start_soon(client.complete, HI)
        await arrived.wait()
        assert await processing(fake) == [True, True, False]
        gate.set()


async def test_a_chat_held_past_the_stall_timeout_stalls() -> None:
    fake = FakeLlama().fail(hold=anyio.Event()).reply("never")
    async with fake.client(stall_timeout=0.05) as client:
        with pytest.raises(StalledError):
            await client.complete(HI)
    assert await processing(fake) == [False]  # the stalled chat left its slot


async def test_busy_slots_are_another_clients_and_stay_until_cleared() -> None:
    fake = FakeLlama(n_slots=2).reply(lambda _: "ok")
    fake.busy = {1}
    assert await processing(fake) == [False, True]
    assert await processing(fake) == [False, True]
    async with fake.client() as client:
        events = [e async for e in client.chat(ChatRequest([UserMessage("hi")], slot=1))]
    assert Waiting(slot_busy=True) in events
    fake.busy.clear()
    assert await processing(fake) == [False, False]


async def test_without_the_slots_endpoint_slots_answer_501() -> None:
    status, body = await get(FakeLlama(slots_endpoint=False), "/slots")
    assert status == 501
    assert body["error"]["type"] == "not_supported_error"


# -- a server down, dying, loading, keyed -------------------------------------------------


async def test_a_down_server_refuses_every_connection_and_records_none() -> None:
    fake = FakeLlama().reply("ok")
    fake.down = True
    with pytest.raises(TransportError) as caught:
        await fake.transport().send("GET", fake.url + "/health", {}, None)
    assert caught.value.kind == "connect"
    async with fake.client(max_retries=1) as client:
        with pytest.raises(ConnectError):
            await client.complete(HI)
    assert fake.calls == []
    fake.down = False
    assert (await get(fake, "/health"))[0] == 200


async def test_a_server_that_dies_at_the_next_chat_answers_until_then() -> None:
    fake = FakeLlama().fail(down=True).reply("never")
    assert (await get(fake, "/health"))[0] == 200
    async with fake.client(max_retries=1) as client:
        with pytest.raises(ConnectError):
            await client.complete(HI)
    assert fake.down
    assert [c.path for c in fake.calls] == ["/health"]


async def test_a_loading_model_answers_503_everywhere_until_it_is_loaded() -> None:
    fake = FakeLlama().fail(loading=0.2).reply("ready")
    assert (await get(fake, "/health"))[0] == 503  # the load starts with this request
    assert (await get(fake, "/slots")) == (503, {"error": {
        "code": 503, "message": "Loading model", "type": "unavailable_error"}})
    async with fake.client() as client:
        events = [e async for e in client.chat(HI)]
    assert Waiting(slot_busy=False) in events
    assert [e.text for e in events if isinstance(e, Content)] == ["ready"]
    health = [c for c in fake.calls if c.path == "/health"]
    assert len(health) >= 3  # polled until the 0.2 s were over


def test_loading_is_seconds_not_a_flag() -> None:
    with pytest.raises(ValueError, match="loading"):
        FakeLlama().fail(loading=True)


async def test_an_error_status_of_your_choice_503_is_retried() -> None:
    fake = FakeLlama().fail(error="Service Unavailable", status=503).reply("after")
    async with fake.client() as client:
        events = [e async for e in client.chat(HI)]
    assert any(isinstance(e, Retrying) for e in events)
    assert [e.text for e in events if isinstance(e, Content)] == ["after"]
    with pytest.raises(ValueError, match="status"):
        fake.fail(error="x", status=200)


@pytest.mark.parametrize("header", ["authorization", "x-api-key", "bearer"])
async def test_an_api_key_is_wanted_everywhere_but_health(header: str) -> None:
    fake = FakeLlama(api_key="k")
    assert (await get(fake, "/health"))[0] == 200
    status, body = await get(fake, "/props")
    assert (status, body["error"]["message"]) == (401, "Invalid API Key")
    given = {"authorization": {"authorization": "k"}, "x-api-key": {"x-api-key": "k"},
             "bearer": {"authorization": "Bearer k"}}[header]
    assert (await get(fake, "/props", **given))[0] == 200
    assert (await get(fake, "/props", authorization="Bearer wrong"))[0] == 401


# -- what was sent ------------------------------------------------------------------------


async def test_calls_and_requests_keep_the_query_and_the_body() -> None:
    fake = FakeLlama(models=["m"]).reply("ok")
    async with fake.client(model="m") as client:
        await client.slots()
        await client.complete(ChatRequest([UserMessage("hi")], slot=0))
    assert FakeCall("GET", "/slots", {"model": "m"}, None) in fake.calls
    chat = next(c for c in fake.calls if c.path == CHAT)
    assert chat.body["id_slot"] == 0
    assert fake.requests[0].settings["id_slot"] == 0
    assert fake.requests[0].query == {}


# -- router mode ---------------------------------------------------------------------------


async def test_a_load_moves_through_loading_to_loaded_over_the_looks() -> None:
    fake = FakeLlama(models=["a", "b"], load_looks=2)
    assert await post(fake, "/models/load", {"model": "a"}) == (200, {"success": True})
    statuses = []
    for _ in range(3):
        _, listed = await get(fake, "/models")
        statuses.append({m["id"]: m["status"]["value"] for m in listed["data"]})
    assert statuses == [{"a": "loading", "b": "unloaded"}, {"a": "loaded", "b": "unloaded"},
                        {"a": "loaded", "b": "unloaded"}]
    assert fake.models["a"].status == "loaded"


async def test_a_broken_model_goes_back_to_unloaded_with_its_exit_code() -> None:
    fake = FakeLlama(models={"x": FakeModel(broken=True)}, load_looks=1)
    async with fake.client(model="x") as client:
        with pytest.raises(ModelLoadError) as caught:
            await client.load_model("x")
        [info] = await client.models()
    assert caught.value.exit_code == 1
    assert (info.status, info.failed, info.exit_code) == ("unloaded", True, 1)


async def test_the_routers_error_answers() -> None:
    fake = FakeLlama(models={"a": FakeModel(aliases=("alias-a",)), "b": FakeModel()})
    assert (await post(fake, CHAT, {"messages": []}))[1]["error"]["message"] == (
        "model name is missing from the request")
    assert (await get(fake, "/slots"))[0] == 400
    assert (await post(fake, "/models/load", {"model": "zzz"}))[0] == 404
    assert (await post(fake, "/models/unload", {"model": "a"}))[1]["error"]["message"] == (
        "model is not running")
    async with fake.client(model="zzz") as client:
        with pytest.raises(ModelNotFoundError):
            await client.complete(HI)
    async with fake.client(model="alias-a") as client:
        with pytest.raises(ModelNotLoadedError):
            await client.complete(ChatRequest([UserMessage("hi")], autoload=False))
    assert fake.requests[-1].query == {"autoload": "false"}
    assert (await post(fake, "/models/load", {"model": "a"}))[0] == 200
    assert (await post(fake, "/models/load", {"model": "a"}))[1]["error"]["message"] == (
        "model is already running")
    _, props = await get(fake, "/props")
    assert props["role"] == "router"


async def test_a_chat_or_a_get_naming_a_stopped_model_loads_it() -> None:
    fake = FakeLlama(models=["a"]).reply("from a")
    assert (await get(fake, "/props?model=a"))[1]["model_alias"] == "a"
    assert fake.models["a"].status == "loaded"
    fake.models["a"].status = "unloaded"
    async with fake.client(model="a") as client:
        events = [e async for e in client.chat(HI)]
    assert ModelLoading("a", "loaded") in events
    assert "".join(e.text for e in events if isinstance(e, Content)) == "from a"


async def test_past_models_max_the_least_recently_used_idle_model_stops() -> None:
    fake = FakeLlama(models=["a", "b", "c"], models_max=2)
    for name in ("a", "b"):
        await get(fake, f"/health?model={name}")  # loaded by autoload, a first
    await get(fake, "/props?model=a")  # now b is the least recently used
    assert (await post(fake, "/models/load", {"model": "c"}))[0] == 200
    assert {n: m.status for n, m in fake.models.items()} == {
        "a": "loaded", "b": "unloaded", "c": "loading"}


async def test_past_models_max_with_every_model_busy_the_limit_is_reached() -> None:
    fake = FakeLlama(models=["a", "b"], models_max=1)
    fake.models["a"].status = "loaded"
    fake.busy = {0}
    async with fake.client(model="b") as client:
        with pytest.raises(ModelLimitError):
            await client.load_model("b")
    assert fake.models["a"].status == "loaded"


async def test_a_model_with_a_server_of_its_own_answers_from_it() -> None:
    small = FakeLlama("small", n_ctx=1024, n_slots=3).reply("from small")
    fake = FakeLlama(models={"small": FakeModel("loaded", server=small), "other": FakeModel()})
    async with fake.client(model="small") as client:
        completion = await client.complete(HI)
        props = await client.props()
    assert completion.content == "from small"
    assert props.n_ctx == 1024 // 3  # a slot's context, as llama-server's /props say
    assert len(small.requests) == len(fake.requests) == 1
    assert [c.path for c in small.calls] == [CHAT, "/props"]


async def test_an_unknown_model_in_a_get_is_the_routers_400() -> None:
    async with FakeLlama(models=["a"]).client(model="b") as client:
        with pytest.raises(HTTPStatusError, match="not found"):
            await client.slots()
