"""docs/sync.md's notebook cell, run the way Jupyter runs a cell: its code executed while an
asyncio loop runs in this thread (``tests/test_docs.py`` also runs it as a plain script).

The docs' fake llama-server runs in a thread of its own: this thread's loop is blocked for
as long as the cell's blocking calls take, as a kernel's is."""

from __future__ import annotations

import asyncio
import contextlib
import io

import pytest

from tests.support.docblocks import ADDRESS, ROOT, blocks
from tests.support.docfake import doc_fake, serve
from tests.support.faultserver import FaultServer

CELL_MARK = "# In a Jupyter cell:"


def notebook_cell() -> str:
    (cell,) = [b.code for b in blocks(ROOT / "docs" / "sync.md") if b.code.startswith(CELL_MARK)]
    return cell


def test_the_docs_have_one_notebook_cell() -> None:
    assert "sync.Client(" in notebook_cell()


@pytest.mark.asyncio
async def test_the_notebook_cell_runs_inside_a_running_event_loop() -> None:
    async with FaultServer(thread=True) as server:
        serve(doc_fake(), server)
        code = ADDRESS.sub(server.url, notebook_cell())
        namespace: dict[str, object] = {}
        out = io.StringIO()
        asyncio.get_running_loop()  # a cell's code runs while this loop runs
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<notebook cell>", "exec"), namespace)
        client = namespace["client"]
        client.close()  # type: ignore[attr-defined]
        assert [r.path for r in server.requests] == ["/v1/chat/completions"]
    assert out.getvalue() == "The answer is 42."
