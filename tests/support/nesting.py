"""How deep JSON must nest before msgspec refuses it on the running interpreter.

msgspec counts nesting against the interpreter's recursion guard, and CPython moved that
limit: at the top of a script, the shallowest array nesting msgspec refuses
(``RecursionError``) is 999 levels on 3.11 (the recursion limit, 1,000, less the frames
on the stack), 1,499 on 3.12 and 10,000 on 3.13 (the C recursion limit, which C
extensions count against since 3.12). A fixed 1,000 levels is refused on 3.11 only.
"""

from __future__ import annotations

import msgspec


def _refused_depth(ceiling: int = 200_000) -> int:
    """The shallowest ``[[...]]`` msgspec raises ``RecursionError`` for, from here (bisected)."""
    low, high = 1, ceiling
    while low < high:
        middle = (low + high) // 2
        try:
            msgspec.json.decode(b"[" * middle + b"]" * middle)
        except RecursionError:
            high = middle
        else:
            low = middle + 1
    return low


# Twice what this import measures: on 3.11 the frames below a decode count, and a test
# (an event-loop callback, say) runs on a shallower stack than this import under pytest
# (measured here 991; 992 levels then decoded inside an async test).
TOO_DEEP = 2 * _refused_depth()
