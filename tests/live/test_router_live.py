"""Router mode against a real llama-server router (no ``-m``): a models directory with two
scripted models and a corrupt GGUF, ``--models-max 1``.

Covers: the typed model list, ``?model=`` on the GET helpers, autoload with ``ModelLoading``
events, explicit load/unload, ``autoload=False``, a model that fails to load (its exit code),
an unknown model, and the ``models_max`` limit (loading a second model unloads the first).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.llama_server import LlamaServer
from llamaclient import (
    ChatEvent,
    Client,
    Content,
    ModelLoadError,
    ModelLoading,
    ModelNotFoundError,
    ModelNotLoadedError,
    Pool,
    Routed,
)
from llamaclient._driver.observe import Observer
from llamaclient._turn.commands import Call, Command, Send
from tests.conftest import drain
from tests.live.chat import live_config, script_request, text_of
from tests.live.fleet import start_router

pytestmark = pytest.mark.anyio

STATUSES = {"unloaded", "loading", "loaded", "sleeping", "downloading", "downloaded"}


@pytest.fixture(scope="module")
def router(
    llama_server_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    flags = ("--models-max", "1", "-np", "2", "-c", "4096")
    tmp = tmp_path_factory.mktemp("router")
    server = start_router(llama_server_binary, tmp, *flags, broken=True)
    try:
        yield server
    finally:
        server.stop()


def router_client(router: LlamaServer, model: str = "") -> Client:
    return Client(live_config(router.base_url, model=model, load_timeout=30.0))


async def status(router: LlamaServer, model: str) -> str:
    async with router_client(router) as client:
        return {m.id: m.status for m in await client.models()}[model]


async def test_the_models_are_typed(router: LlamaServer) -> None:
    async with router_client(router) as client:
        models = await client.models()
    assert sorted(m.id for m in models) == ["alpha", "beta", "broken"]
    assert {m.status for m in models} <= STATUSES


async def test_a_chat_autoloads_the_model_and_says_so(router: LlamaServer) -> None:
    async with router_client(router, "alpha") as client:
        await client.unload_model("alpha")
        stream = client.chat(script_request("reasoning_answer"))
        events, error = await drain(stream)
    assert error is None
    loading = [e for e in events if isinstance(e, ModelLoading)]
    assert loading[0] == ModelLoading("alpha", "unloaded")
    assert loading[-1] == ModelLoading("alpha", "loaded")
    assert events[: len(loading)] == loading
    assert text_of(events, Content) == "Done."
    assert stream.completion.finish_reason == "stop"


async def test_the_get_helpers_reach_the_models_server(router: LlamaServer) -> None:
    async with router_client(router, "alpha") as client:
        await client.load_model("alpha")
        props = await client.props()
        slots = await client.slots()
        health = await client.health()
    assert props["total_slots"] == 2
    assert props.get("role") != "router"
    assert len(slots) == 2
    assert health == {"status": "ok"}
    async with router_client(router) as client:
        router_props = await client.props()
    assert router_props["role"] == "router"


async def test_explicit_load_and_unload(router: LlamaServer) -> None:
    async with router_client(router, "beta") as client:
        await client.unload_model("beta")
        assert await client.load_model("beta") is True
        assert await status(router, "beta") == "loaded"
        assert await client.load_model("beta") is False
        assert await client.unload_model("beta") is True
        assert await status(router, "beta") == "unloaded"
        assert await client.unload_model("beta") is False


async def test_without_autoload_a_stopped_model_is_not_loaded(router: LlamaServer) -> None:
    async with router_client(router, "beta") as client:
        await client.unload_model("beta")
        events, error = await drain(client.chat(script_request("reasoning_answer", autoload=False)))
    assert isinstance(error, ModelNotLoadedError), error
    assert events == []
    assert await status(router, "beta") == "unloaded"


async def test_a_corrupt_model_fails_with_its_exit_code(router: LlamaServer) -> None:
    async with router_client(router, "broken") as client:
        events, error = await drain(client.chat(script_request("reasoning_answer")))
        with pytest.raises(ModelLoadError) as caught:
            await client.load_model("broken")
    assert isinstance(error, ModelLoadError), error
    assert error.model == "broken"
    assert error.exit_code not in (None, 0)
    assert caught.value.exit_code == error.exit_code
    assert ModelLoading("broken", "loading") in events
    async with router_client(router) as client:
        models = {m.id: m for m in await client.models()}
    assert models["broken"].failed
    assert models["broken"].exit_code == error.exit_code


async def test_an_unknown_model_is_not_found(router: LlamaServer) -> None:
    async with router_client(router, "nope") as client:
        _, error = await drain(client.chat(script_request("reasoning_answer")))
        with pytest.raises(ModelNotFoundError):
            await client.load_model("nope")
    assert isinstance(error, ModelNotFoundError), error


async def test_models_max_one_unloads_the_other_model(router: LlamaServer) -> None:
    """``--models-max 1``: a chat for beta while alpha runs makes the router stop alpha."""
    events: list[ChatEvent]
    async with router_client(router, "alpha") as client:
        await client.load_model("alpha")
    async with router_client(router, "beta") as client:
        events, error = await drain(client.chat(script_request("reasoning_answer")))
    assert error is None
    assert ModelLoading("beta", "loaded") in events
    assert await status(router, "beta") == "loaded"
    assert await status(router, "alpha") == "unloaded"


async def test_a_pool_of_routers_sends_each_chat_to_its_model(router: LlamaServer) -> None:
    """One Config per model of the router; each chat names its model."""
    configs = [live_config(router.base_url, model=m, load_timeout=30.0) for m in ("alpha", "beta")]
    async with Pool(configs) as pool:
        for model in ("beta", "alpha", "beta"):
            stream = pool.chat(script_request("reasoning_answer", model=model, session=model))
            events = [event async for event in stream]
            assert isinstance(events[0], Routed)
            assert stream.completion.model == model
            assert stream.completion.content == "Done."
            assert await status(router, model) == "loaded"  # --models-max 1: the other stopped


class _Paths(Observer):
    """The path and outcome of each request a turn made."""

    watches_events = False

    def __init__(self, seen: list[tuple[str, object]]) -> None:
        self.seen = seen

    def performed(self, command: Command, outcome: object) -> None:
        if isinstance(command, Send | Call):
            self.seen.append((command.path, outcome))


async def test_a_ready_model_costs_no_look_once_the_router_is_known(router: LlamaServer) -> None:
    """The first chat looks at ``GET /models`` (and learns the server is a router); later
    chats go first with ``?autoload=false``: a running model answers at once, one that is not
    refuses, and only then the turn looks, loads and says so, and sends the chat again."""
    seen: list[tuple[str, object]] = []
    async with router_client(router, "alpha") as client:
        client.instruments.append(lambda plan, target: _Paths(seen))
        await client.complete(script_request("reasoning_answer"))
        assert seen[0] == ("/models", 200)
        seen.clear()
        completion = await client.complete(script_request("reasoning_answer"))
        assert completion.content == "Done."
        assert seen == [("/v1/chat/completions?autoload=false", 200)]
        await client.unload_model("alpha")
        seen.clear()
        events, error = await drain(client.chat(script_request("reasoning_answer")))
    assert error is None
    assert seen[0] == ("/v1/chat/completions?autoload=false", 400)  # model is not loaded
    assert seen[1] == ("/models", 200)
    assert seen[-1] == ("/v1/chat/completions", 200)
    loading = [e for e in events if isinstance(e, ModelLoading)]
    assert loading[0] == ModelLoading("alpha", "unloaded")
    assert loading[-1] == ModelLoading("alpha", "loaded")
    assert text_of(events, Content) == "Done."
