"""docs/testing.md's examples do not rot: the agent-loop example is the test file that runs
in this suite, verbatim, and the respx recipe runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "testing.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_agent_loop_example_is_the_test_file() -> None:
    blocks = python_blocks()
    assert blocks[0] == (ROOT / "tests" / "testing" / "test_agent_loop.py").read_text()


def test_the_respx_recipe_runs(tmp_path: Path) -> None:
    recipe = python_blocks()[1]
    assert 'transport="httpx"' in recipe
    script = tmp_path / "recipe.py"
    script.write_text(recipe)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, check=False, env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr


def test_every_python_block_is_checked() -> None:
    assert len(python_blocks()) == 2
