"""docs/typed-outputs.md's examples run as written against a fake server (only the server
address changes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.docblocks import ROOT, run_script
from tests.support.docblocks import blocks as page_blocks
from tests.support.faultserver import DONE, FaultServer, chat_chunk, chat_chunks, sse, stream

PAGE = ROOT / "docs" / "typed-outputs.md"
PERSON = '{"name": "Ada", "age": 36, "address": {"city": "London", "country": "UK"}}'


def blocks() -> list[str]:
    found = [block.code for block in page_blocks(PAGE)]
    assert len(found) == 4  # the 4th, offline (pydantic tool parameters), runs in test_docs
    return found


def tool_call_stream(name: str, arguments: str) -> Any:
    call = {"index": 0, "id": "c0", "type": "function"}
    events = [
        sse(chat_chunk({"tool_calls": [{**call, "function": {"name": name, "arguments": ""}}]})),
        sse(chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]})),
        sse(chat_chunk({}, finish_reason="tool_calls")),
        DONE,
    ]
    return stream(events)


async def run(code: str, route: Any, tmp_path: Path) -> str:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", route)
        script = tmp_path / "example.py"
        script.write_text(code.replace("http://127.0.0.1:8080", srv.url))
        returncode, out, err = await run_script(script, seconds=30)
    assert returncode == 0, err
    return out


@pytest.mark.asyncio
async def test_streamed_typed_output_example(tmp_path: Path) -> None:
    pieces = [PERSON[i : i + 6] for i in range(0, len(PERSON), 6)]
    out = await run(blocks()[0], stream(chat_chunks(pieces)), tmp_path)
    assert "('age',) '36' (done)" in out
    assert "('address', 'city') 'London' \n('address', 'city') '' (done)" in out
    assert str(json.loads(PERSON)) in out
    assert out.rstrip().endswith("Ada 36 London")


@pytest.mark.asyncio
async def test_parse_example(tmp_path: Path) -> None:
    out = await run(
        blocks()[1], stream(chat_chunks(['{"label": "positive", "confidence": 9}'])), tmp_path
    )
    assert out.strip() == "positive 9"
    cut = stream(chat_chunks(['{"label": "posi'], finish_reason="length"))
    out = await run(blocks()[1], cut, tmp_path)
    assert "no verdict: the answer reached max_tokens before its JSON closed" in out
    assert "so far: {'label': 'posi'}" in out


@pytest.mark.asyncio
async def test_typed_tools_example(tmp_path: Path) -> None:
    out = await run(blocks()[2], tool_call_stream("get_weather", '{"city": "Oslo"}'), tmp_path)
    assert out.strip() == "sunny in Oslo for 1 day(s)"
    remind = tool_call_stream("remind", '{"text": "tea", "minutes": 5}')
    out = await run(blocks()[2], remind, tmp_path)
    assert out.strip() == "tea 5"
