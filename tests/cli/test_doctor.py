"""``llamaclient doctor`` without a server: the verdicts FakeLlama's answers give (alone, behind
an API key, behind a router that routes by model name as llama-server's does), and the exit
code when the server cannot serve chats (unreachable, a refused key, or its chats fail)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from llamaclient import Config, Transport
from llamaclient._cli import main
from llamaclient._cli.app import verdict_line
from llamaclient._cli.doctor import Verdict, diagnose
from llamaclient.testing import FakeLlama, FakeModel
from tests.cli.fakes import KEY, probe_over

pytestmark = pytest.mark.anyio

NAMES = ["reachable", "model", "router mode", "context", "tools", "thinking",
         "resumable streams", "multimodal", "/slots", "control endpoint", "chat"]


async def verdicts(fake: FakeLlama, transport: Transport | None = None,
                   **config: Any) -> tuple[bool, dict[str, Verdict]]:
    seen: list[Verdict] = []
    transport = transport or fake.transport()
    ok = await diagnose(Config(fake.url, **config), seen.append, transport=transport,
                        probe=probe_over(transport, fake.url))
    return ok, {v.name: v for v in seen}


def no_none(seen: Mapping[str, Verdict]) -> None:
    """A Python None never reaches the screen."""
    for verdict in seen.values():
        assert "None" not in verdict_line(verdict).plain, verdict


async def test_a_healthy_server_gets_a_verdict_per_line() -> None:
    fake = FakeLlama(n_ctx=8192, n_slots=2, resumable=True).reply("OK")
    ok, seen = await verdicts(fake)
    assert ok
    assert list(seen) == NAMES
    assert seen["model"].detail == "fake-model: loaded"
    assert seen["context"].detail == "4096 tokens per slot, 2 slot(s)"
    assert seen["resumable streams"].level == "ok"
    assert seen["/slots"].detail == "yes: 2 slot(s), 0 busy"
    assert seen["chat"].level == "ok"
    assert fake.requests[0].settings["max_tokens"] == 1
    no_none(seen)


async def test_without_resume_it_says_so() -> None:
    ok, seen = await verdicts(FakeLlama().reply("OK"))
    assert ok
    assert seen["resumable streams"].level == "info"
    assert seen["resumable streams"].detail.startswith("no (HTTP 404)")


async def test_a_server_whose_chats_fail_cannot_serve() -> None:
    ok, seen = await verdicts(FakeLlama().fail(error="tools param requires --jinja flag"))
    assert not ok
    assert seen["chat"].level == "bad"
    assert "tools param requires --jinja flag" in seen["chat"].detail


def test_an_unreachable_server_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--url", "http://127.0.0.1:1", "--timeout", "2"]) == 3
    out = capsys.readouterr().out
    assert out.startswith("✗ reachable")
    assert len(out.strip().splitlines()) == 1  # nothing else is checked


def test_verdict_lines_are_marked_by_level() -> None:
    assert verdict_line(Verdict("chat", "ok", "yes")).plain == "✓ chat              yes"
    assert verdict_line(Verdict("chat", "bad", "no")).plain.startswith("✗ chat")
    assert verdict_line(Verdict("x", "warn", "")).plain.startswith("! x")
    assert verdict_line(Verdict("x", "info", "")).plain.startswith("· x")


class Sleeping(FakeLlama):
    def props(self) -> dict[str, object]:
        return {**super().props(), "is_sleeping": True, "chat_template": "",
                "chat_template_caps": {}, "modalities": {"vision": True, "audio": False}}


async def test_a_sleeping_server_without_jinja_with_vision() -> None:
    ok, seen = await verdicts(Sleeping().reply("OK"))
    assert ok
    assert (seen["model"].level, seen["model"].detail) == (
        "warn", "fake-model: sleeping (wakes on the next chat)")
    assert (seen["tools"].level, seen["tools"].detail) == (
        "warn", "unknown: no chat template reported")
    assert seen["thinking"].detail == "no: the template shows no reasoning"
    assert seen["multimodal"].detail == "yes: vision"


class Bare(FakeLlama):
    """A server whose /props leaves out the context and the slots."""

    def props(self) -> dict[str, object]:
        props = super().props()
        del props["default_generation_settings"], props["total_slots"], props["model_alias"]
        return props


async def test_a_server_that_does_not_say_gets_words_not_none() -> None:
    ok, seen = await verdicts(Bare().reply("OK"))
    assert ok
    assert seen["context"].detail == "unknown: /props does not say"
    assert seen["model"].detail == "/models/fake-model.gguf: loaded"
    no_none(seen)


# -- a router ------------------------------------------------------------------------------


def router(*loaded: str) -> tuple[Transport, FakeLlama, FakeLlama]:
    """A router in front of two models, each its own FakeLlama."""
    alpha = FakeLlama(model="alpha", n_ctx=2048, n_slots=2).reply("OK")
    beta = FakeLlama(model="beta", n_ctx=1024, n_slots=3).reply("OK")
    models = {name: FakeModel("loaded" if name in loaded else "unloaded", server=server)
              for name, server in (("alpha", alpha), ("beta", beta))}
    return FakeLlama(models=models).transport(), alpha, beta


async def test_a_router_is_checked_on_its_first_loaded_model() -> None:
    fake_router, alpha, beta = router("beta")
    ok, seen = await verdicts(alpha, fake_router)
    assert ok
    assert list(seen) == NAMES
    assert seen["model"].detail == (
        "beta: loaded (the router's first loaded model; --model NAME checks another)")
    assert seen["router mode"].detail == "yes: models alpha (unloaded), beta (loaded)"
    assert seen["context"].detail == "341 tokens per slot, 3 slot(s)"
    assert seen["/slots"].detail == "yes: 3 slot(s), 0 busy"
    assert seen["chat"].level == "ok"
    assert [r.settings["model"] for r in beta.requests] == ["beta"]
    assert alpha.requests == []
    no_none(seen)


async def test_a_router_with_model_checks_that_one() -> None:
    fake_router, alpha, beta = router("beta")
    ok, seen = await verdicts(alpha, fake_router, model="alpha")
    assert beta.requests == []
    assert ok
    assert seen["model"].detail == "alpha: loaded"
    assert seen["context"].detail == "1024 tokens per slot, 2 slot(s)"
    assert [r.settings["model"] for r in alpha.requests] == ["alpha"]


async def test_a_router_with_nothing_loaded_loads_its_first_model() -> None:
    fake_router, alpha, _ = router()
    ok, seen = await verdicts(alpha, fake_router)
    assert ok
    assert seen["model"].detail.startswith("alpha: loaded (none was loaded: loaded now")


async def test_a_router_without_that_model_cannot_serve_it() -> None:
    fake_router, alpha, _ = router("alpha")
    ok, seen = await verdicts(alpha, fake_router, model="gamma")
    assert not ok
    assert list(seen) == ["reachable", "model"]
    assert seen["model"].detail == "gamma: the router has no such model (it has alpha, beta)"


# -- an API key ---------------------------------------------------------------------------


async def test_the_api_key_is_sent_with_every_check() -> None:
    fake = FakeLlama(api_key=KEY).reply("OK")
    ok, seen = await verdicts(fake, api_key=KEY)
    assert ok, seen
    assert list(seen) == NAMES
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("key", [None, "sk-a-wrong-one"])
async def test_a_refused_api_key_is_named(key: str | None) -> None:
    fake = FakeLlama(api_key=KEY).reply("OK")
    ok, seen = await verdicts(fake, api_key=key)
    assert not ok
    assert list(seen) == ["reachable", "API key"]
    assert seen["API key"].level == "bad"
    assert seen["API key"].detail.startswith("no: wrong or missing API key (HTTP 401)")
    assert key is None or key not in seen["API key"].detail
