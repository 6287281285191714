"""The docs harness reads markers as ``tests/support/docblocks.py`` documents them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.docblocks import DocBlockError, blocks, fragment_module

PAGE = """\
# A page

```python
print("run by default")
```

<!-- test: run offline -->
```python
print("offline")
```

<!-- test: fragment -->
```py
await client.complete(request)
```

<!-- test: skip shows a transcript -->
```python
>>> 1 + 1
```

```sh
echo not python
```

- in a list:

    ```python
    x = 1
    ```
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def test_markers_and_defaults(tmp_path: Path) -> None:
    found = blocks(write(tmp_path, PAGE))
    assert [(b.kind, b.offline, b.reason) for b in found] == [
        ("run", False, ""),
        ("run", True, ""),
        ("fragment", False, ""),
        ("skip", False, "shows a transcript"),
        ("run", False, ""),
    ]
    assert [b.line for b in found] == [3, 8, 13, 18, 28]
    assert found[0].code == 'print("run by default")\n'
    assert found[-1].code == "x = 1\n"  # dedented
    assert found[0].name == "page.md:3"


def test_a_fragment_becomes_the_body_of_an_async_function(tmp_path: Path) -> None:
    fragment = blocks(write(tmp_path, PAGE))[2]
    module = fragment_module(fragment)
    assert "async def _fragment(" in module
    assert "    client: Client," in module
    assert module.endswith("\n    await client.complete(request)\n")
    compile(module, "fragment.py", "exec")  # valid Python as generated


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("<!-- test: runn -->", "unknown marker"),
        ("<!-- test: skip -->", "needs a reason"),
        ("<!-- test: run online -->", "only 'offline'"),
        ("<!-- test: fragment please -->", "takes no arguments"),
    ],
)
def test_bad_markers_fail(tmp_path: Path, marker: str, message: str) -> None:
    path = write(tmp_path, f"{marker}\n```python\nx = 1\n```\n")
    with pytest.raises(DocBlockError, match=message):
        blocks(path)


def test_a_marker_before_another_language_fails(tmp_path: Path) -> None:
    path = write(tmp_path, "<!-- test: fragment -->\n```sh\nls\n```\n")
    with pytest.raises(DocBlockError, match="non-python"):
        blocks(path)


def test_an_unclosed_fence_fails(tmp_path: Path) -> None:
    with pytest.raises(DocBlockError, match="never closed"):
        blocks(write(tmp_path, "```python\nx = 1\n"))
