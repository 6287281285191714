"""Throughput of ``ArgumentStream`` (llamaclient/_arguments.py): decoded MB/s of one big string
field fed in small fragments, and the cost per fragment at two stream lengths (equal numbers
mean the work per fragment does not grow with what came before).

Run: ``python bench/args_bench.py`` (prints the numbers); ``run()`` returns them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

try:
    from llamaclient import ArgumentStream
except ImportError:  # run as a script from anywhere
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from llamaclient import ArgumentStream

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


def _per_fragment_us(count: int, lenient: bool, fragment_size: int = 10) -> float:
    body = (_CODE * (count * fragment_size // len(_CODE) + 2))[: count * fragment_size]
    raw = '{"content": ' + json.dumps(body, ensure_ascii=False)[: count * fragment_size - 12]
    fragments = _fragments(raw, fragment_size)[:count]
    return _time_feed(fragments, lenient, finish=False) / len(fragments) * 1e6


def run() -> dict[str, float]:
    """Decoded MB/s for a 1 MB string field in 10-byte fragments, and µs per fragment at
    1,000 and 100,000 fragments, in strict and lenient mode."""
    code = (_CODE * (1_000_000 // len(_CODE.encode()) + 1))[:1_000_000]
    plain = "x" * 1_000_000
    results: dict[str, float] = {}
    for mode, lenient in (("strict", False), ("lenient", True)):
        results[f"{mode}_code_mb_per_s"] = _decode_rate(code, lenient)
        results[f"{mode}_plain_mb_per_s"] = _decode_rate(plain, lenient)
        results[f"{mode}_code_1kb_fragments_mb_per_s"] = _decode_rate(code, lenient, 1024)
        results[f"{mode}_us_per_fragment_1k"] = _per_fragment_us(1_000, lenient)
        results[f"{mode}_us_per_fragment_100k"] = _per_fragment_us(100_000, lenient)
    return results


if __name__ == "__main__":
    for key, value in run().items():
        print(f"{key:40s} {value:10.2f}")
