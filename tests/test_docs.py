"""The docs site builds, and every Python example in README.md and docs/ works.

- ``mkdocs build --strict`` succeeds (broken links, pages left out of the nav, bad
  mkdocstrings references and docstring warnings all fail it);
- every public name is in the API reference;
- every python block is run against the docs' fake llama-server, or type-checked with
  ``mypy --strict``, or both, as its marker says (``tests/support/docblocks.py`` has the
  conventions; ``docs/README-for-authors.md`` tells page authors). Skipped blocks show up as
  skipped tests with their reason.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import llamaclient
from llamaclient import (
    ChatMessage,
    ChatRequest,
    Client,
    Config,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from tests.support.docblocks import BASE_URL, Block, blocks, fragment_module
from tests.support.docfake import DocFake
from tests.support.faultserver import FaultServer

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
ALL = [b for page in PAGES for b in blocks(page)]
RUN = [b for b in ALL if b.kind == "run"]
CHECKED = [b for b in ALL if b.kind in ("run", "fragment")]
SKIPPED = [b for b in ALL if b.kind == "skip"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _ids(found: list[Block]) -> list[str]:
    return [b.name for b in found]


def test_the_harness_finds_the_examples() -> None:
    names = {b.path.name for b in ALL}
    assert {"README.md", "agent-loop.md", "quickstart.md", "deadlines.md"} <= names
    assert len(RUN) >= 8
    assert any(b.kind == "fragment" for b in ALL)


@pytest.mark.asyncio
@pytest.mark.parametrize("block", RUN, ids=_ids(RUN))
async def test_example_runs(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    if block.offline:
        assert BASE_URL not in block.code, "an offline example must not name the server"
        script.write_text(block.code)
        code, out, err = await _python(script)
    else:
        assert BASE_URL in block.code, f"a run example talks to {BASE_URL} (or is offline)"
        async with FaultServer() as srv:
            DocFake().install(srv)
            script.write_text(block.code.replace(BASE_URL, srv.url))
            code, out, err = await _python(script)
        assert srv.requests, f"{block.name} never asked the server:\n{out}"
    assert code == 0, f"{block.name} failed:\n{err}"
    assert err == "", err


async def _python(script: Path) -> tuple[int | None, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode, out.decode(), err.decode()


if SKIPPED:  # each shows up as a skipped test with its reason; none when there are none

    @pytest.mark.parametrize("block", SKIPPED, ids=_ids(SKIPPED))
    def test_example_not_checked(block: Block) -> None:
        pytest.skip(f"{block.name} is marked 'skip': {block.reason}")


def test_examples_type_check(tmp_path: Path) -> None:
    """One mypy --strict run over every run block (as written) and every fragment (as the
    body of an async function, see docblocks.FRAGMENT_PRELUDE)."""
    files = []
    for i, block in enumerate(CHECKED):
        path = tmp_path / f"ex_{i:03d}_{re.sub(r'[^a-z0-9]', '_', block.name.lower())}.py"
        path.write_text(fragment_module(block) if block.kind == "fragment" else block.code)
        files.append(path)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-warn-unused-configs", *map(str, files)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=600,
        check=False,
    )
    where = {f.name: b.name for f, b in zip(files, CHECKED, strict=True)}
    report = "\n".join(_located(line, where) for line in proc.stdout.splitlines())
    assert proc.returncode == 0, report
    assert f"no issues found in {len(files)} source files" in proc.stdout, report


def _located(line: str, where: dict[str, str]) -> str:
    head = line.split(":", 1)[0]
    name = Path(head).name
    return f"[{where[name]}] {line}" if name in where else line


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**ENV, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, (
        f"mkdocs build --strict failed (pip install --group docs):\n{proc.stderr[-5000:]}"
    )
    page = (tmp_path / "reference" / "types" / "index.html").read_text()
    assert "Completion" in page
    assert ":meth:" not in page  # devtools/griffe_roles.py rewrote the Sphinx roles


def test_every_public_name_is_in_the_reference() -> None:
    text = "\n".join(p.read_text() for p in (DOCS / "reference").glob("*.md"))
    shown = set(re.findall(r"^::: llamaclient\.(\w+)", text, re.M))
    public = set(llamaclient.__all__) - {"__version__"}
    assert public - shown == set(), "add these to a docs/reference/*.md page"


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert {p for p in pages if p not in nav} == set()


@pytest.mark.asyncio
async def test_the_fake_answers_as_the_examples_expect() -> None:
    """The docs' fake: a tool call while tools are offered and unanswered, JSON for a schema,
    the answer otherwise, and the previous prompt reported as cached."""
    tool = ToolSchema("f", "", {"type": "object", "properties": {"n": {"type": "integer"}}})
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    async with FaultServer() as srv:
        DocFake().install(srv)
        async with Client(Config(base_url=srv.url)) as client:
            first = await client.complete(ChatRequest([UserMessage("x")], tools=[tool], slot=0))
            assert [(c.name, c.arguments) for c in first.tool_calls] == [("f", '{"n": 1}')]
            history: list[ChatMessage] = [UserMessage("x"), first.message()]
            history.append(ToolMessage("call_0001", "2"))
            second = await client.complete(ChatRequest(history, tools=[tool], slot=0))
            assert second.content == "The answer is 42."
            assert second.timings is not None
            assert first.usage.prompt_tokens == second.timings.cache_n
            typed = await client.complete(ChatRequest([UserMessage("y")], json_schema=schema))
            assert typed.content == '{"name": "Paris"}'
