"""docs/testing.md's examples do not rot: the two test examples are test files that run in
this suite, verbatim, and the scripts run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "testing.md"
TEST_FILES = ("test_agent_loop.py", "test_tool_overlap.py")


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def scripts() -> list[str]:
    return [b for b in python_blocks() if "def test_" not in b]


@pytest.mark.parametrize("name", TEST_FILES)
def test_each_test_example_is_a_test_file(name: str) -> None:
    assert (ROOT / "tests" / "testing" / name).read_text() in python_blocks()


@pytest.mark.parametrize("index", range(len(scripts())))
def test_each_script_runs(index: int, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(scripts()[index])
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, check=False, env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr


def test_the_respx_recipe_puts_the_client_on_httpx() -> None:
    (recipe,) = [b for b in scripts() if "respx" in b]
    assert 'transport="httpx"' in recipe


def test_every_python_block_is_checked() -> None:
    assert len(python_blocks()) == len(TEST_FILES) + len(scripts()) == 6
