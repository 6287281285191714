"""The README's example runs as written (only the server address changes)."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from tests.support.faultserver import FaultServer, chat_chunks, stream

README = Path(__file__).resolve().parent.parent / "README.md"


def example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python example"
    return str(blocks[0])


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
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert text.startswith("Hmm.The answer.")
    assert "Timings(cache_n=0, prompt_n=20, predicted_n=3" in text
    assert srv.requests[0].json()["chat_template_kwargs"] == {"enable_thinking": True}
