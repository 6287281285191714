"""Throughput of ``ArgumentStream`` (llamaclient/_arguments/): decoded MB/s of one big string
field fed in small fragments, the cost per fragment at two stream lengths (equal numbers mean
the work per fragment does not grow with what came before), and the cost per fragment when a
task awaits each piece with ``delta()`` (asyncio).

Run: ``python -m bench.args_bench`` or ``python bench/args_bench.py`` (prints the numbers);
``run()`` returns them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path

# Measure this checkout's llamaclient, also when run as a script and another checkout is
# installed (an editable install would otherwise win).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llamaclient._arguments.stream import ArgumentStream
from llamaclient._types.errors import ProtocolError

_CODE = (
    "def handler(request):\n"
    '    """Answer with a greeting."""\n'
    "    name = request.get(\"name\", 'world')\n"
    '    return {"text": f"hello {name} \\u2014 \u4e2d\u6587 \U0001f600", "ok": True}\n'
    '\t# tabs, backslashes \\\\ and quotes " everywhere\n'
)


def _fragments(raw: str, size: int) -> list[str]:
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def _time_feed(fragments: list[str], lenient: bool, repeat: int = 3, finish: bool = True) -> float:
    """Best wall time (seconds) to feed all fragments (and finish), draining a handle."""
    best = float("inf")
    for _ in range(repeat):
        args = ArgumentStream.lenient() if lenient else ArgumentStream.strict()
        content = args.field("content")
        start = time.perf_counter()
        for fragment in fragments:
            args.feed(fragment)
            content.take()
        if finish:
            args.finish()
        best = min(best, time.perf_counter() - start)
    return best


def _decode_rate(text: str, lenient: bool, fragment_size: int = 10) -> float:
    raw = json.dumps({"path": "src/app.py", "content": text}, ensure_ascii=False)
    elapsed = _time_feed(_fragments(raw, fragment_size), lenient)
    return len(text.encode()) / 1e6 / elapsed


def _code_fragments(count: int, fragment_size: int = 10) -> list[str]:
    """``count`` fragments of an unfinished string field of code."""
    body = (_CODE * (count * fragment_size // len(_CODE) + 2))[: count * fragment_size]
    raw = '{"content": ' + json.dumps(body, ensure_ascii=False)[: count * fragment_size - 12]
    return _fragments(raw, fragment_size)[:count]


def _per_fragment_us(count: int, lenient: bool) -> float:
    fragments = _code_fragments(count)
    return _time_feed(fragments, lenient, finish=False) / len(fragments) * 1e6


def _awaited_us(count: int, lenient: bool, repeat: int = 3) -> float:
    """Best µs per fragment when another task awaits ``delta()`` for every piece, including
    the event loop's switch to that task and back."""
    fragments = _code_fragments(count)

    async def once() -> float:
        args = ArgumentStream.lenient() if lenient else ArgumentStream.strict()
        content = args.field("content")
        pieces = 0

        async def consume() -> None:
            nonlocal pieces
            while await content.delta() is not None:
                pieces += 1

        task = asyncio.create_task(consume())
        await asyncio.sleep(0)
        start = time.perf_counter()
        for fragment in fragments:
            args.feed(fragment)
            await asyncio.sleep(0)  # the consumer takes the piece
        elapsed = time.perf_counter() - start
        args.abort("measured")
        with contextlib.suppress(ProtocolError):  # the aborted handle raises
            await task
        assert pieces > len(fragments) // 2  # the consumer kept up
        return elapsed

    return min(asyncio.run(once()) for _ in range(repeat)) / len(fragments) * 1e6


def run() -> dict[str, float]:
    """Decoded MB/s for a 1 MB string field in 10-byte fragments, µs per fragment at 1,000 and
    100,000 fragments, and µs per fragment awaited with ``delta()``, in strict and lenient
    mode."""
    code = (_CODE * (1_000_000 // len(_CODE.encode()) + 1))[:1_000_000]
    plain = "x" * 1_000_000
    results: dict[str, float] = {}
    for mode, lenient in (("strict", False), ("lenient", True)):
        results[f"{mode}_code_mb_per_s"] = _decode_rate(code, lenient)
        results[f"{mode}_plain_mb_per_s"] = _decode_rate(plain, lenient)
        results[f"{mode}_code_1kb_fragments_mb_per_s"] = _decode_rate(code, lenient, 1024)
        results[f"{mode}_us_per_fragment_1k"] = _per_fragment_us(1_000, lenient)
        results[f"{mode}_us_per_fragment_100k"] = _per_fragment_us(100_000, lenient)
        results[f"{mode}_us_per_awaited_fragment_10k"] = _awaited_us(10_000, lenient)
    return results


if __name__ == "__main__":
    for key, value in run().items():
        print(f"{key:40s} {value:10.2f}")
