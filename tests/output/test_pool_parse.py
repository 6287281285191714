"""``Pool.parse`` is a typed-output chat on the routed server, as docs/router-and-pool.md says,
and no page promises an error the library never raises."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from llamaclient import ChatRequest, Config, Pool, UserMessage
from llamaclient.testing import FakeLlama

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


class City(msgspec.Struct):
    name: str
    people: int


@pytest.mark.anyio
async def test_pool_parse_returns_the_output_of_the_routed_server() -> None:
    fakes = [FakeLlama(url=f"http://fake-{i}.test") for i in range(2)]
    for fake in fakes:
        fake.reply('{"name": "Oslo", "people": 717710}')
    configs = [Config(f.url, stall_timeout=1.0) for f in fakes]
    async with Pool(configs, transports=[f.transport() for f in fakes]) as pool:
        city = await pool.parse(ChatRequest([UserMessage("Biggest city?")], session="s"), City)
    assert city == City("Oslo", 717710)
    (sent,) = [r for f in fakes for r in f.requests]
    assert sent.settings["response_format"]["json_schema"]["schema"]["required"] == [
        "name", "people"]


def test_no_page_says_the_library_raises_not_implemented_error() -> None:
    """A page that promises ``NotImplementedError`` needs code that raises it."""
    raised = any(
        re.search(r"raise NotImplementedError\b", path.read_text())
        for path in (ROOT / "llamaclient").rglob("*.py")
    )
    said = [
        f"{page.relative_to(ROOT)}:{n}"
        for page in PAGES
        for n, line in enumerate(page.read_text().splitlines(), start=1)
        if "NotImplementedError" in line
    ]
    assert raised or not said, f"these lines promise a NotImplementedError: {said}"
