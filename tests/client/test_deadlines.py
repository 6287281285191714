"""``docs/deadlines.md``: its two examples run as written (only the server address and the
deadline change) against a server that pings forever, and end at the deadline with what
they say; the server sees the stream go at once."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from tests.support.faultserver import PING, Chunk, FaultServer, Sleep, Status, Step, chat_chunks

DOC = Path(__file__).resolve().parents[2] / "docs" / "deadlines.md"


def examples() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 2
    return [str(block) for block in blocks]


@pytest.mark.asyncio
@pytest.mark.parametrize("index", [0, 1], ids=["anyio", "asyncio"])
async def test_deadline_examples_run(tmp_path: Path, index: int) -> None:
    code = examples()[index]
    assert "http://127.0.0.1:8080" in code
    assert "30" in code
    [first, *_] = chat_chunks(["Once upon a time"], finish_reason=None, done=False)
    pings: list[Step] = [Status(200), Chunk(first)]
    for _ in range(100):  # pings for 10 s: far past the deadline, never a stall
        pings += [Sleep(0.1), Chunk(PING)]
    async with FaultServer(hold_timeout=20.0) as srv:
        srv.route("POST", "/v1/chat/completions", pings)
        script = tmp_path / "example.py"
        code = code.replace("http://127.0.0.1:8080", srv.url)
        script.write_text(code.replace("fail_after(30)", "fail_after(1)").replace(
            "timeout(30)", "timeout(1)"))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        await srv.wait_disconnect(timeout=5.0)
    assert proc.returncode == 0, err.decode()
    expected = ["deadline: kept 16 characters", "deadline: no answer within 30 s"][index]
    assert out.decode().strip() == expected
