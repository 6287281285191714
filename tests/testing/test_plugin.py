"""The pytest plugin: ``fake_llama`` comes from ``llamaclient.testing.plugin`` in a fresh
pytest run (entry-point autoload off, so the run does not depend on how the package was
installed), and pyproject declares it as the ``pytest11`` entry point."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

EXAMPLE = '''
import pytest
from llamaclient import ChatRequest, UserMessage
from llamaclient.testing import FakeLlama

@pytest.mark.asyncio
async def test_uses_the_fixture(fake_llama: FakeLlama) -> None:
    fake_llama.reply("Hi there.")
    async with fake_llama.client() as client:
        completion = await client.complete(ChatRequest([UserMessage("hi")]))
    assert completion.content == "Hi there."
    assert fake_llama.requests[0].last == UserMessage("hi")

def test_each_test_gets_a_fresh_fake(fake_llama: FakeLlama) -> None:
    assert fake_llama.requests == []
    assert fake_llama.pending == 0
'''


def test_the_fixture_comes_from_the_plugin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's llamaclient
    pytester.makepyfile(test_example=EXAMPLE)
    result = pytester.runpytest_subprocess(
        "-p", "pytest_asyncio.plugin", "-p", "llamaclient.testing.plugin",
        "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function",
    )
    result.assert_outcomes(passed=2)


def test_without_the_plugin_there_is_no_fixture(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contrast: the run above passes because of the plugin."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's llamaclient
    pytester.makepyfile(test_example=EXAMPLE)
    result = pytester.runpytest_subprocess(
        "-p", "pytest_asyncio.plugin", "-p", "no:cacheprovider",
        "-o", "asyncio_default_fixture_loop_scope=function",
    )
    result.assert_outcomes(errors=2)


def test_pyproject_declares_the_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"llamaclient": "llamaclient.testing.plugin"}


def test_the_docs_example_needs_no_plugin_but_those_llamaclient_brings(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/testing.md says nothing else is needed: its example passes with only the plugins
    installing llamaclient registers (its own, and anyio's, a dependency): no pytest-asyncio."""
    anyio_plugin = [e for e in entry_points(group="pytest11") if e.name == "anyio"]
    assert [e.value for e in anyio_plugin] == ["anyio.pytest_plugin"]
    text = (ROOT / "docs" / "testing.md").read_text()
    example = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's llamaclient
    pytester.makepyfile(test_example=example)
    result = pytester.runpytest_subprocess(
        "-p", "anyio", "-p", "llamaclient.testing.plugin", "-p", "no:cacheprovider",
        "-W", "error",
    )
    outcomes = result.parseoutcomes()  # one pass per event loop anyio finds installed
    assert outcomes["passed"] >= 1
    assert set(outcomes) == {"passed"}, result.outlines
