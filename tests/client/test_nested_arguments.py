"""Tool arguments with nested values through a real stream: ArgumentDelta events carry the
path of strings inside a field, top-level fields keep ``path == ()``, and a nested handle
streams."""

from __future__ import annotations

import json

import anyio
import msgspec
import pytest

from llamaclient import ArgumentDelta, Client, Config, ToolCallDone
from tests.client.test_stream_arguments import REQUEST, tool_stream
from tests.support.faultserver import FaultServer

pytestmark = pytest.mark.anyio

ARGS = json.dumps(
    {"path": "a.py", "edits": [{"old": "x = 1", "new": 'x = "2"\n'}, {"old": "y", "new": "z"}]}
)
PIECES = [ARGS[i : i + 4] for i in range(0, len(ARGS), 4)]


class Edit(msgspec.Struct):
    old: str
    new: str


class EditFile(msgspec.Struct):
    path: str
    edits: list[Edit]


async def test_argument_deltas_carry_the_path_of_nested_strings() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", tool_stream(PIECES, second=False))
        async with Client(Config(srv.url)) as client:
            stream = client.chat(REQUEST, live_arguments=True)
            async with stream:
                events = [e async for e in stream]
    deltas = [e for e in events if isinstance(e, ArgumentDelta)]
    text: dict[tuple[str | int, ...], str] = {}
    for d in deltas:
        key = d.path or (d.field,)
        assert key[0] == d.field
        text[key] = text.get(key, "") + d.text
    assert text == {
        ("path",): "a.py",
        ("edits", 0, "old"): "x = 1",
        ("edits", 0, "new"): 'x = "2"\n',
        ("edits", 1, "old"): "y",
        ("edits", 1, "new"): "z",
    }
    assert [d.path for d in deltas if d.field == "path"] == [()] * len(
        [d for d in deltas if d.field == "path"]
    )
    (done,) = [e for e in events if isinstance(e, ToolCallDone)]
    assert done.call.parse(EditFile) == EditFile(
        "a.py", [Edit("x = 1", 'x = "2"\n'), Edit("y", "z")]
    )


async def test_a_nested_handle_streams_from_another_task() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", tool_stream(PIECES, second=False, gap=0.002))
        async with Client(Config(srv.url)) as client, client.chat(REQUEST) as stream:
            new = stream.arguments(tool="write_file").field("edits", 0, "new")
            pieces: list[str] = []

            async def read() -> None:
                while (piece := await new.delta()) is not None:
                    pieces.append(piece)

            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                async for _ in stream:
                    pass
    assert "".join(pieces) == 'x = "2"\n'
    assert len(pieces) > 1
    assert new.value == 'x = "2"\n'
