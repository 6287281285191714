"""The docs harness reads markers as ``tests/support/docblocks.py`` documents them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.docblocks import BASE_URL, DocBlockError, blocks, fragment_module

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


def test_run_router_and_the_addresses_of_a_block(tmp_path: Path) -> None:
    page = (
        "<!-- test: run router -->\n```python\n"
        'URLS = ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.1:8080/v1"]\n'
        'LOCAL = "http://127.0.0.1:8080"  # not http://llama.test, which has no port\n'
        "```\n"
    )
    (block,) = blocks(write(tmp_path, page))
    assert (block.kind, block.router, block.offline) == ("run", True, False)
    assert block.addresses == ["http://10.0.0.1:8080", "http://10.0.0.2:8080", BASE_URL]
    assert not blocks(write(tmp_path, "```python\nx = 1\n```\n"))[0].router
