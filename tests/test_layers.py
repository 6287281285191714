"""The layout is the design: each folder is a layer, and imports only point down.

    _types  <  _protocol, _arguments  <  _turn, _transports  <  _driver  <  _stream  <  _tools
            <  _client  <  _pool  <  __init__  <  testing, sync, _embedded  <  _cli  <  __main__

Every ``import`` counts, also those under ``TYPE_CHECKING`` and inside functions: for the
layers, and for cycles, which there are none of, between folders or between the modules of
one folder (``_turn``'s phases hand over to later ones through callables, and
``typed.refused`` is how ``ToolCall`` raises ``OutputError`` without importing ``errors``,
whose ``partial`` is a ``Completion`` that holds ``ToolCall`` values).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "llamaclient"
RANK = {
    "_types": 0,
    "_protocol": 1,
    "_arguments": 1,
    "_transports": 2,
    "_turn": 2,
    "_driver": 3,
    "_stream": 4,
    # The tool box and its loop over a chat: Client.run_tools and Pool.run_tools wrap it, so
    # it sits right under them (it only needs a ``chat`` callable and the stream it returns).
    "_tools": 5,
    # The server's endpoints beside chat, a mixin of Client.
    "_calls": 5,
    "_client": 6,
    "_pool": 7,
    "__init__": 8,
    # Outside the library proper, on top of it: the testing kit, the sync client (the public
    # API on an event-loop thread of its own), the embedded server launcher (stdlib only),
    # the CLI that uses them, and ``python -m llamaclient``.
    "testing": 9,
    "sync": 9,
    "otel": 9,
    "_embedded": 9,
    "_cli": 10,
    "__main__": 11,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _nodes(tree: ast.AST, annotations: bool) -> list[ast.AST]:
    """Every node of ``tree``; without ``annotations``, not those under ``if TYPE_CHECKING``."""
    found: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        found.append(node)
        if (
            not annotations
            and isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _imports(path: Path, *, annotations: bool = True) -> set[str]:
    """The llamaclient modules that ``path`` imports, as absolute dotted names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _nodes(ast.parse(path.read_text()), annotations):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.startswith("llamaclient"):
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("llamaclient"))
    return found


def _graph(*, annotations: bool = True) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: {m for m in _imports(path, annotations=annotations) if m in modules} - {name}
        for name, path in modules.items()
    }


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_imports_only_point_down() -> None:
    wrong = []
    for module, targets in _graph().items():
        for target in targets:
            here, there = _layer(module), _layer(target)
            if here == there:
                continue
            if RANK[there] >= RANK[here]:  # up, or sideways between two layers
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles() -> None:
    """None, ``TYPE_CHECKING`` and function-level imports included."""
    graph = _graph(annotations=True)
    # A package's __init__ re-exporting its modules is not a cycle of the design.
    for module in list(graph):
        if (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists():
            graph[module] = set()
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*path[path.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "\n".join(cycles)


def test_no_module_of_a_folder_imports_one_that_imports_it_back() -> None:
    """Inside each folder too (the check above is over the whole package; this one names
    the folder, so a circle is found where it is)."""
    graph = _graph(annotations=True)
    for module, targets in graph.items():
        for target in targets:
            if _layer(module) == _layer(target) and module in graph.get(target, set()):
                raise AssertionError(f"{module} and {target} import each other")


def test_the_import_reader_sees_every_kind_of_import() -> None:
    """Module-level, relative, ``TYPE_CHECKING`` and function-level imports are all read, so
    the two checks above cannot pass by missing an import."""
    found = _imports(PACKAGE / "_stream.py")
    assert "llamaclient._turn.machine" in found  # relative, module level
    found = _imports(PACKAGE / "_transports" / "choose.py")
    assert "llamaclient._transports.httpx" in found  # inside a function
    assert "llamaclient._transports.native" in found
    found = _imports(PACKAGE / "_turn" / "phase.py")
    assert "llamaclient._turn.plan" in found  # under TYPE_CHECKING
    assert "llamaclient._turn.plan" not in _imports(
        PACKAGE / "_turn" / "phase.py", annotations=False
    )


# The pure core: no I/O, no clock, no event loop (the driver reads the clock and passes the
# time in). What it may import beside llamaclient: msgspec, these standard modules (zlib
# inflates a compressed body, email parses a Retry-After date, random is the backoff's
# jitter when the plan gives none, ssl only names Config.tls's type), and pydantic, imported
# only when a pydantic model is given as a type.
PURE = ["_types", "_protocol", "_turn", "_arguments/scanner.py", "_arguments/repair.py"]
PURE_IMPORTS = {
    "__future__", "base64", "binascii", "codecs", "collections", "dataclasses", "enum",
    "functools", "hashlib", "inspect", "itertools", "json", "math", "msgspec", "operator",
    "re", "secrets", "string", "sys", "types", "typing", "unicodedata", "urllib",
    "zlib", "email", "random", "ssl", "pydantic",
}  # fmt: skip


def _outside_imports(path: Path) -> set[str]:
    """The top-level names of what ``path`` imports from outside llamaclient."""
    found: set[str] = set()
    for node in _nodes(ast.parse(path.read_text()), True):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.partition(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.partition(".")[0] for a in node.names)
    return found - {"llamaclient"}


def test_the_pure_core_imports_no_io_clock_or_event_loop() -> None:
    paths = [p for part in PURE for p in sorted((PACKAGE / part).rglob("*.py"))]
    paths += [PACKAGE / part for part in PURE if part.endswith(".py")]
    assert len(paths) > 40
    wrong = {
        str(p.relative_to(PACKAGE)): sorted(_outside_imports(p) - PURE_IMPORTS) for p in paths
    }
    assert {name: found for name, found in wrong.items() if found} == {}
