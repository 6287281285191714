"""docs/tools.md shows what its offline example prints: run it and compare."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docblocks import ROOT, blocks, run_script

PAGE = ROOT / "docs" / "tools.md"


def shown_output() -> str:
    """The ```text block right after 'prints:' on the page."""
    match = re.search(r"prints:\n\n```text\n(.*?)```", PAGE.read_text(), re.S)
    assert match is not None
    return match[1]


@pytest.mark.asyncio
async def test_the_tool_box_example_prints_what_the_page_says(tmp_path: Path) -> None:
    (block,) = [b for b in blocks(PAGE) if b.offline]
    script = tmp_path / "example.py"
    script.write_text(block.code)
    code, out, err = await run_script(script)
    assert (code, err) == (0, "")
    assert out == shown_output()
