"""``llamaclient doctor`` without a server: the verdicts FakeLlama's answers give, and the
exit code when the server cannot serve chats (unreachable, or its chats fail)."""

from __future__ import annotations

import pytest

from llamaclient._cli import main
from llamaclient._cli.app import verdict_line
from llamaclient._cli.doctor import Verdict, diagnose
from llamaclient.testing import FakeLlama

pytestmark = pytest.mark.anyio


async def verdicts(fake: FakeLlama) -> tuple[bool, dict[str, Verdict]]:
    seen: list[Verdict] = []
    async with fake.client() as client:
        ok = await diagnose(client, seen.append)
    return ok, {v.name: v for v in seen}


async def test_a_healthy_server_gets_a_verdict_per_line() -> None:
    fake = FakeLlama(n_ctx=8192, n_slots=2, resumable=True).reply("OK")
    ok, seen = await verdicts(fake)
    assert ok
    assert list(seen) == ["reachable", "model", "router mode", "context", "tools", "thinking",
                          "resumable streams", "multimodal", "/slots", "control endpoint",
                          "chat"]
    assert seen["model"].detail == "fake-model: loaded"
    assert seen["context"].detail == "8192 tokens per slot, 2 slot(s)"
    assert seen["resumable streams"].level == "ok"
    assert seen["/slots"].detail == "yes: 2 slot(s), 0 busy"
    assert seen["chat"].level == "ok"
    assert fake.requests[0].settings["max_tokens"] == 1


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


class Router(FakeLlama):
    def props(self) -> dict[str, object]:
        return {"role": "router", "max_instances": 4, "models_autoload": True}


class Sleeping(FakeLlama):
    def props(self) -> dict[str, object]:
        return {**super().props(), "is_sleeping": True, "chat_template": "",
                "chat_template_caps": {}, "modalities": {"vision": True, "audio": False}}


async def test_a_router() -> None:
    ok, seen = await verdicts(Router().reply("OK"))
    assert ok
    assert seen["model"].detail == "chosen per request (router)"
    assert seen["router mode"].detail.startswith("yes: models fake-model")
    assert seen["context"].detail == "unknown (no /props)"


async def test_a_sleeping_server_without_jinja_with_vision() -> None:
    ok, seen = await verdicts(Sleeping().reply("OK"))
    assert ok
    assert (seen["model"].level, seen["model"].detail) == (
        "warn", "fake-model: sleeping (wakes on the next chat)")
    assert (seen["tools"].level, seen["tools"].detail) == (
        "warn", "unknown: no chat template reported")
    assert seen["thinking"].detail == "no: the template shows no reasoning"
    assert seen["multimodal"].detail == "yes: vision"
