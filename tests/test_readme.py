"""The README's first screen: two commands, then the first example, which runs as written
(only the server address changes) with the output it promises. Every other python block of
the README (and of docs/) is run or type-checked by ``tests/test_docs.py``."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.support.docblocks import blocks
from tests.support.faultserver import FaultServer, chat_chunks, stream

ROOT = Path(__file__).resolve().parent.parent
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
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's llamaclient
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert text.startswith("Hmm.The answer.")
    assert "Timings(cache_n=0, prompt_n=20, predicted_n=3" in text
    assert srv.requests[0].json()["chat_template_kwargs"] == {"enable_thinking": True}
