"""Router mode against FakeLlama's router mode: ?model= on the GET helpers, the typed model list,
load/unload and their errors, ModelLoading before a chat, a failed load, ?autoload=false."""

from __future__ import annotations

from typing import Any

import pytest

from llamaclient import (
    ChatEvent,
    ChatRequest,
    Client,
    Config,
    Content,
    HTTPStatusError,
    LoadTimeoutError,
    ModelInfo,
    ModelLimitError,
    ModelLoadError,
    ModelLoading,
    ModelNotFoundError,
    ModelNotLoadedError,
    UserMessage,
)
from llamaclient._protocol.models import decode_models, model_query
from llamaclient.testing import FakeCall, FakeLlama, FakeModel

pytestmark = pytest.mark.anyio

HI = ChatRequest([UserMessage("hi")])


def router(*models: str, broken: tuple[str, ...] = (), **options: Any) -> FakeLlama:
    """A router over ``models`` (``broken`` ones fail to load) answering every chat "ok"."""
    fake = FakeLlama(models={m: FakeModel(broken=m in broken, aliases=(f"{m}-alias",))
                             for m in models}, **options)
    return fake.reply(lambda _: "ok")


def plain() -> FakeLlama:
    return FakeLlama().reply(lambda _: "ok")


def client(fake: FakeLlama, model: str = "alpha", **options: object) -> Client:
    config = Config("http://router", model=model, retry_backoff=0.001, **options)  # type: ignore[arg-type]
    return Client(config, transport=fake.transport())


def sent(fake: FakeLlama, path: str | None = None) -> list[FakeCall]:
    """The requests ``fake`` received (on ``path``)."""
    return [c for c in fake.calls if path is None or c.path == path]


async def test_the_get_helpers_name_the_model() -> None:
    fake = router("a b/c")
    async with client(fake, "a b/c") as c:
        await c.health()
        await c.props()
        await c.slots()
    assert [(s.path, s.query) for s in sent(fake)] == [
        (path, {"model": "a b/c"}) for path in ("/health", "/props", "/slots")
    ]


async def test_without_a_model_the_get_helpers_name_none() -> None:
    fake = plain()
    async with client(fake, "") as c:
        await c.health()
        await c.slots()
    assert [s.query for s in sent(fake)] == [{}, {}]


async def test_models_are_typed_with_status_and_failure() -> None:
    fake = router("alpha", "broken", broken=("broken",), load_looks=1)
    fake.models["alpha"].status = "sleeping"
    async with client(fake) as c:
        with pytest.raises(ModelLoadError) as caught:
            await c.load_model("broken")
        models = await c.models()
    assert caught.value.model == "broken"
    assert caught.value.exit_code == 1
    assert models == [
        ModelInfo("alpha", ("alpha-alias",), "sleeping"),
        ModelInfo("broken", ("broken-alias",), "unloaded", True, 1),
    ]
    assert models[0].ready
    assert not models[1].ready


async def test_load_waits_until_loaded_and_unload_until_unloaded() -> None:
    fake = router("alpha", load_looks=3)
    async with client(fake) as c:
        assert await c.load_model("alpha") is True
        assert fake.models["alpha"].status == "loaded"
        assert await c.load_model("alpha") is False  # already running
        assert await c.unload_model("alpha") is True
        assert await c.unload_model("alpha") is False  # not running
    assert fake.models["alpha"].status == "unloaded"


async def test_load_without_waiting_returns_while_it_loads() -> None:
    fake = router("alpha", load_looks=3)
    async with client(fake) as c:
        assert await c.load_model("alpha", wait=False) is True
    assert fake.models["alpha"].status == "loading"


async def test_router_errors_are_typed() -> None:
    fake = router("alpha", "limit", models_max=1)
    fake.models["alpha"].status = "loaded"
    fake.busy = {0}  # alpha is in use: the router cannot stop it to make room
    async with client(fake) as c:
        with pytest.raises(ModelNotFoundError):
            await c.load_model("nope")
        with pytest.raises(ModelNotFoundError):
            await c.unload_model("nope")
        with pytest.raises(ModelLimitError) as caught:
            await c.load_model("limit")
    assert caught.value.status == 500


async def test_a_chat_for_a_model_not_loaded_reports_each_status_then_streams() -> None:
    fake = router("alpha", load_looks=2)
    async with client(fake) as c:
        events = [e async for e in c.chat(HI)]
    loading = [e for e in events if isinstance(e, ModelLoading)]
    assert loading == [
        ModelLoading("alpha", "unloaded"),
        ModelLoading("alpha", "loading"),
        ModelLoading("alpha", "loaded"),
    ]
    assert events[: len(loading)] == loading
    assert [e.text for e in events if isinstance(e, Content)] == ["ok"]
    assert [s.path for s in sent(fake)].count("/models/load") == 1


async def test_a_loaded_model_costs_one_look_and_no_event() -> None:
    fake = router("alpha")
    fake.models["alpha"].status = "loaded"
    async with client(fake) as c:
        events = [e async for e in c.chat(HI)]
    assert not any(isinstance(e, ModelLoading) for e in events)
    assert [s.path for s in sent(fake)] == ["/models", "/v1/chat/completions"]


async def test_a_failed_load_names_the_model_and_the_exit_code() -> None:
    fake = router("broken", broken=("broken",))
    async with client(fake, "broken") as c:
        seen: list[ChatEvent] = []

        async def run() -> None:
            async for event in c.chat(HI):
                seen.append(event)

        with pytest.raises(ModelLoadError) as caught:
            await run()
    assert caught.value.model == "broken"
    assert caught.value.exit_code == 1
    assert "broken" in str(caught.value)
    assert "exit code 1" in str(caught.value)
    assert seen[-2:] == [ModelLoading("broken", "loading"), ModelLoading("broken", "unloaded")]
    assert not fake.requests  # never sent


async def test_the_load_wait_is_bounded_by_load_timeout() -> None:
    fake = router("alpha", load_looks=10**6)
    async with client(fake, load_timeout=0.3, wait_timeout=0.01) as c:
        with pytest.raises(LoadTimeoutError):
            await c.complete(HI)


async def test_autoload_false_goes_on_the_url_and_a_stopped_model_is_not_loaded() -> None:
    fake = router("alpha")
    async with client(fake) as c:
        with pytest.raises(ModelNotLoadedError):
            await c.complete(ChatRequest([UserMessage("hi")], autoload=False))
    assert fake.requests[0].query == {"autoload": "false"}
    assert "/models/load" not in [s.path for s in sent(fake)]


async def test_an_unknown_model_in_a_chat_is_model_not_found() -> None:
    fake = router("alpha")
    async with client(fake, "zzz") as c:
        with pytest.raises(ModelNotFoundError) as caught:
            await c.complete(HI)
    assert isinstance(caught.value, HTTPStatusError)
    assert caught.value.status == 400


async def test_the_routers_own_failed_load_answer_is_a_model_load_error() -> None:
    """A model that the look saw ready, then failed on the router's own autoload."""
    fake = FakeLlama(models=["broken"]).fail(error="model name=broken failed to load")
    fake.models["broken"].status = "loaded"
    async with client(fake, "broken") as c:
        with pytest.raises(ModelLoadError) as caught:
            await c.complete(HI)
    assert caught.value.model == "broken"
    assert caught.value.exit_code is None


async def test_the_model_limit_on_a_chat_is_a_model_limit_error() -> None:
    fake = FakeLlama(models=["alpha"]).fail(error="model limit reached, try again later")
    async with client(fake) as c:
        with pytest.raises(ModelLimitError):
            await c.complete(HI)


async def test_a_plain_server_is_learnt_once_and_never_looked_at_again() -> None:
    fake = plain()
    async with client(fake) as c:
        await c.complete(HI)
        await c.complete(HI)
    assert [s.path for s in sent(fake)] == ["/models", *["/v1/chat/completions"] * 2]


def test_model_query_quotes_and_appends() -> None:
    assert model_query("/slots", "") == "/slots"
    assert model_query("/slots", "org/m:Q4 x") == "/slots?model=org%2Fm%3AQ4%20x"
    assert model_query("/slots?fail_on_no_slot=1", "m") == "/slots?fail_on_no_slot=1&model=m"


def test_a_plain_servers_model_list_is_not_a_router() -> None:
    infos, router = decode_models(b'{"data":[{"id":"x.gguf","object":"model"}]}')
    assert not router
    assert infos == [ModelInfo("x.gguf", (), "loaded")]


async def test_a_request_naming_its_model_overrides_the_config() -> None:
    fake = router("alpha", "beta")
    fake.models["alpha"].status = "loaded"
    async with client(fake) as c:
        events = [e async for e in c.chat(ChatRequest([UserMessage("hi")], model="beta"))]
    assert ModelLoading("beta", "loaded") in events
    assert fake.requests[0].body["model"] == "beta"
    assert [s.body for s in sent(fake, "/models/load")] == [{"model": "beta"}]


async def test_a_load_that_fails_at_once_still_says_it_was_loading() -> None:
    fake = router("broken", broken=("broken",), load_looks=1)
    async with client(fake, "broken") as c:
        seen: list[ChatEvent] = []

        async def run() -> None:
            async for event in c.chat(HI):
                seen.append(event)

        with pytest.raises(ModelLoadError):
            await run()
    assert seen == [
        ModelLoading("broken", "unloaded"),
        ModelLoading("broken", "loading"),
        ModelLoading("broken", "unloaded"),
    ]
