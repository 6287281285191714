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

import os
import re
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

import llamaclient
from llamaclient import (
    ChatMessage,
    ChatRequest,
    Client,
    Config,
    HTTPStatusError,
    ModelLoadError,
    ModelLoading,
    ModelNotFoundError,
    ModelNotLoadedError,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from llamaclient.testing._wire import prompt_tokens
from tests.support.docblocks import (
    ADDRESS,
    BASE_URL,
    ROOT,
    Block,
    blocks,
    fragment_module,
    run_script,
)
from tests.support.docfake import doc_fake, serve
from tests.support.faultserver import FaultServer

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
    addresses = block.addresses
    if block.offline:
        assert not addresses, f"an offline example names no server, not {addresses}"
        script.write_text(block.code)
        code, out, err = await run_script(script)
    else:
        assert addresses, f"a run example talks to a server, e.g. {BASE_URL} (or is offline)"
        async with AsyncExitStack() as stack:
            fakes = {a: await stack.enter_async_context(FaultServer()) for a in addresses}
            for srv in fakes.values():
                serve(doc_fake(router=block.router), srv)
            script.write_text(ADDRESS.sub(lambda m: fakes[m[0]].url, block.code))
            code, out, err = await run_script(script)
        idle = [a for a, srv in fakes.items() if not srv.requests]
        assert not idle, f"{block.name} never asked {idle}:\n{out}"
    assert code == 0, f"{block.name} failed:\n{err}"
    assert err == "", err


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
    changelog = (tmp_path / "changelog" / "index.html").read_text()
    assert f'id="{llamaclient.__version__.replace(".", "")}-' in changelog  # CHANGELOG.md, included


def test_every_public_name_is_in_the_reference() -> None:
    text = "\n".join(p.read_text() for p in (DOCS / "reference").glob("*.md"))
    shown = set(re.findall(r"^::: llamaclient\.(\w+)", text, re.M))
    public = set(llamaclient.__all__) - {"__version__"}
    assert public - shown == set(), "add these to a docs/reference/*.md page"


def test_the_changelog_has_unreleased_then_this_version_first() -> None:
    """Keep a Changelog headings: [Unreleased], then the newest version, ``__version__``, each
    dated; a version bumped without its section fails here."""
    headings = re.findall(r"^## (.*)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "[Unreleased]"
    dated = [re.fullmatch(r"\[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}", h) for h in headings[1:]]
    assert all(dated), headings
    versions = [m.group(1) for m in dated if m]
    assert versions[:1] == [llamaclient.__version__], headings


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert {p for p in pages if p not in nav} == set()


@pytest.mark.asyncio
async def test_the_fake_answers_as_the_examples_expect() -> None:
    """The docs' fake: a tool call while tools are offered and unanswered, JSON for a schema,
    the answer otherwise, and the previous prompt and answer reported as cached."""
    tool = ToolSchema("f", "", {"type": "object", "properties": {"n": {"type": "integer"}}})
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    async with FaultServer() as srv:
        fake = serve(doc_fake(), srv)
        async with Client(Config(base_url=srv.url)) as client:
            first = await client.complete(ChatRequest([UserMessage("x")], tools=[tool], slot=0))
            assert [(c.name, c.arguments) for c in first.tool_calls] == [("f", '{"n": 1}')]
            history: list[ChatMessage] = [UserMessage("x"), first.message()]
            history.append(ToolMessage("call_0001", "2"))
            second = await client.complete(ChatRequest(history, tools=[tool], slot=0))
            assert second.content == "The answer is 42."
            assert second.timings is not None
            sent = fake.requests[1].body["messages"]  # the previous prompt, its answer echoed
            assert first.usage.prompt_tokens == prompt_tokens(sent[0])
            assert second.timings.cache_n == prompt_tokens(sent[0]) + prompt_tokens(sent[1])
            typed = await client.complete(ChatRequest([UserMessage("y")], json_schema=schema))
            assert typed.content == '{"name": "Paris"}'


@pytest.mark.asyncio
async def test_the_fake_router_loads_fails_and_admits_as_a_router_does() -> None:
    """``doc_fake(router=True)``: models move unloaded -> loading -> loaded after a load,
    ``broken`` fails with its exit code, ``?model=`` GETs and chats go through the router."""
    async with FaultServer() as srv:
        serve(doc_fake(router=True), srv)
        async with Client(Config(srv.url, model="qwen3-4b")) as client:
            assert {(m.id, m.status) for m in await client.models()} == {
                ("qwen3-4b", "unloaded"),
                ("gemma-3-270m", "unloaded"),
                ("broken", "unloaded"),
            }
            events = [e async for e in client.chat(ChatRequest([UserMessage("x")]))]
            loading = [e.status for e in events if isinstance(e, ModelLoading)]
            assert loading == ["unloaded", "loading", "loaded"]
            assert (await client.props()) is not None
            assert "/props?model=qwen3-4b" in [r.target for r in srv.requests]
            with pytest.raises(ModelLoadError) as failed:
                await client.load_model("broken")
            assert failed.value.exit_code == 1
            broken = [m for m in await client.models() if m.id == "broken"]
            assert (broken[0].failed, broken[0].exit_code) == (True, 1)
            assert await client.unload_model("qwen3-4b")
            assert not await client.unload_model("qwen3-4b")
            request = ChatRequest([UserMessage("x")], autoload=False)
            with pytest.raises(ModelNotLoadedError):
                await client.complete(request)
            with pytest.raises(ModelNotFoundError):
                await client.load_model("no-such-model")
            await client.health()  # a GET with ?model= loads a stopped model, as a chat does
            assert [m.status for m in await client.models() if m.id == "qwen3-4b"] == ["loaded"]
        async with Client(Config(srv.url, model="gemma-3-270m")) as client:
            assert (await client.complete(ChatRequest([UserMessage("x")]))).content
        async with Client(Config(srv.url, model="no-such-model")) as client:
            with pytest.raises(HTTPStatusError, match="not found"):
                await client.slots()
    async with FaultServer() as srv:
        serve(doc_fake(), srv)  # a plain server lists its one model, loaded
        async with Client(Config(srv.url)) as client:
            assert [(m.id, m.status) for m in await client.models()] == [("model.gguf", "loaded")]
