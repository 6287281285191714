"""The main job's chat loop (``devtools.demo``) against a real server: it streams, shows
progress, reasoning and answer, and prints the timings."""

from __future__ import annotations

import pytest

from devtools import demo


@pytest.mark.asyncio
async def test_demo_chat_streams_and_prints_timings(
    base_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    completion = await demo.chat(base_url, "hello", 40)
    out = capsys.readouterr().out
    assert "[prompt " in out
    assert "\n\nDone.\n" in out  # the answer, streamed after the progress line
    assert completion.content == "Done."
    assert out.rstrip().endswith("tokens/s]")
    assert "[finish: stop]" in out


def test_demo_url_mode_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    started = []
    monkeypatch.setattr(demo, "gemma_path", lambda: started.append("model"))
    calls = []

    async def fake_chat(url: str, prompt: str, max_tokens: int) -> None:
        calls.append((url, max_tokens))

    monkeypatch.setattr(demo, "chat", fake_chat)
    assert demo.main(["--url", "http://127.0.0.1:1", "--max-tokens", "5"]) == 0
    assert calls == [("http://127.0.0.1:1", 5)]
    assert started == []
