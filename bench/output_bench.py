"""Cost of typed output decoding (``OutputDecoder``, llamaclient/_arguments/output.py): CPU µs
per fragment of a long structured answer (records with strings, numbers, booleans, nested
lists) fed in token-sized fragments, at 1,000, 10,000 and 100,000 fragments. Equal numbers
mean the work per fragment does not grow with what came before. Also: the same with
``partial()`` read after every fragment, and, for contrast, re-parsing the whole text so far
on every fragment (what a parse-the-prefix approach does) at 1,000 and 3,000 fragments.

Run: ``python -m bench.output_bench`` or ``python bench/output_bench.py`` (prints the
numbers); ``run()`` returns them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# Measure this checkout's llamaclient, also when run as a script and another checkout is
# installed (an editable install would otherwise win).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llamaclient._arguments.output import OutputDecoder
from llamaclient._arguments.repair import recover

FRAGMENT = 8  # characters: about one token of JSON


def _answer_fragments(count: int) -> list[str]:
    """``count`` fragments of an unfinished JSON answer: a list of nested records."""
    records = []
    size = 0
    i = 0
    while size < count * FRAGMENT + 200:
        record = {
            "id": i,
            "name": f"item {i} \u2014 \u4e2d\u6587",
            "note": 'a "quoted" line\nand a tab\there',
            "ok": i % 2 == 0,
            "scores": [i * 0.5, -i],
            "owner": {"login": f"user{i}", "admin": None},
        }
        records.append(record)
        size += len(json.dumps(record)) + 2
        i += 1
    raw = json.dumps({"title": "inventory", "items": records}, ensure_ascii=False)
    return [raw[j : j + FRAGMENT] for j in range(0, count * FRAGMENT, FRAGMENT)]


def _time(fragments: list[str], partial: bool, repeat: int = 5) -> float:
    """Best CPU µs per fragment to feed the fragments (and read ``partial()`` after each).
    CPU time, not wall time: on a shared machine the wall clock measures the neighbours."""
    best = float("inf")
    for _ in range(repeat):
        decoder = OutputDecoder()
        start = time.process_time()
        for fragment in fragments:
            decoder.feed(fragment)
            if partial:
                decoder.partial()
        best = min(best, time.process_time() - start)
        assert not decoder.failed
    return best / len(fragments) * 1e6


def _reparse_us(fragments: list[str]) -> float:
    """CPU µs per fragment when the whole text so far is parsed again on every fragment."""
    text = ""
    start = time.process_time()
    for fragment in fragments:
        text += fragment
        recover(text)
    return (time.process_time() - start) / len(fragments) * 1e6


def run() -> dict[str, float]:
    """µs per fragment at 1k/10k/100k fragments (plain, and reading ``partial()`` each
    time), the 100k/1k ratio, and the re-parse contrast at 1k/3k."""
    results: dict[str, float] = {}
    for count, label in ((1_000, "1k"), (10_000, "10k"), (100_000, "100k")):
        fragments = _answer_fragments(count)
        results[f"us_per_fragment_{label}"] = _time(fragments, partial=False)
        results[f"us_per_fragment_with_partial_{label}"] = _time(fragments, partial=True)
    results["ratio_100k_1k"] = results["us_per_fragment_100k"] / results["us_per_fragment_1k"]
    for count, label in ((1_000, "1k"), (3_000, "3k")):  # 10k would take minutes
        results[f"reparse_us_per_fragment_{label}"] = _reparse_us(_answer_fragments(count))
    return results


if __name__ == "__main__":
    for key, value in run().items():
        print(f"{key:40s} {value:10.2f}")
