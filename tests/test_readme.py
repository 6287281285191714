"""The README's first screen: two commands, then the first example, which runs as written
(only the server address changes) with the output it promises. Every other python block of
the README (and of docs/) is run or type-checked by ``tests/test_docs.py``."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tests.support.docblocks import ROOT, blocks, run_script
from tests.support.faultserver import FaultServer, Json, chat_chunks, stream

README = ROOT / "README.md"


def example() -> str:
    found = blocks(README)
    assert found, "README has no python example"
    assert found[0].kind == "run"
    return found[0].code


def test_first_screen_is_two_commands_then_the_example() -> None:
    text = README.read_text()
    head = text[: text.index("```python")]
    commands = head[head.index("```sh") :]
    assert commands.count("bash scripts/") == 2, commands
    assert "bash scripts/demo.sh" in commands
    assert "bash scripts/test.sh" in commands
    assert "max_tokens=" in example()  # without it a base model writes for minutes


@pytest.mark.asyncio
async def test_readme_example_runs(tmp_path: Path) -> None:
    code = example()
    assert "http://127.0.0.1:8080" in code
    async with FaultServer() as srv:
        srv.route(
            "POST",
            "/v1/chat/completions",
            stream(chat_chunks(["The ", "answer."], reasoning=["Hmm."])),
        )
        script = tmp_path / "example.py"
        script.write_text(code.replace("http://127.0.0.1:8080", srv.url))
        returncode, text, err = await run_script(script, seconds=30)
    assert returncode == 0, err
    assert text.startswith("Hmm.The answer.")
    assert "Timings(cache_n=0, prompt_n=20, predicted_n=3" in text
    assert srv.requests[0].json()["chat_template_kwargs"] == {"enable_thinking": True}


def image_example() -> str:
    found = [block.code for block in blocks(README) if "ImagePart" in block.code]
    assert len(found) == 1, "README should have one image example"
    return found[0]


async def run_image_example(tmp_path: Path, srv: FaultServer) -> str:
    (tmp_path / "cat.png").write_bytes(PNG)
    script = tmp_path / "image_example.py"
    script.write_text(image_example().replace("http://127.0.0.1:8080", srv.url))
    returncode, out, err = await run_script(script, cwd=tmp_path, seconds=30)
    assert returncode == 0, err
    return out


PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452")


@pytest.mark.asyncio
async def test_readme_image_example_sends_the_picture(tmp_path: Path) -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/props", [Json(200, {"modalities": {"vision": True, "audio": False}})])
        srv.route("POST", "/v1/chat/completions", stream(chat_chunks(["A ", "cat."])))
        out = await run_image_example(tmp_path, srv)
        assert out == "A cat.\n"
        content = srv.requests[1].json()["messages"][0]["content"]
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert content == [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]


@pytest.mark.asyncio
async def test_readme_image_example_on_a_server_without_vision(tmp_path: Path) -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/props", [Json(200, {"modalities": {"vision": False, "audio": False}})])
        out = await run_image_example(tmp_path, srv)
        assert out == "no images here: vision\n"
        assert [r.path for r in srv.requests] == ["/props"]
