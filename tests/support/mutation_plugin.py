"""A pytest plugin for mutation runs (``devtools/mutation.py`` loads it with ``-p``).

Mutants run through mutmut's trampolines, which makes every call slower, and a mutant's verdict
must not depend on luck. So hypothesis gets no deadline (a slow example is not a failure),
derandomized examples (the same examples for every mutant), no example database (mutants
must not teach the next run) and no shrinking (a mutant is killed by its first failing
example; making that example small only costs time, which the differential HTTP/1.1 test, with
its every-split comparison per example, would spend by the minute).
"""

from __future__ import annotations

from hypothesis import Phase, settings

settings.register_profile(
    "mutation",
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
)
settings.load_profile("mutation")
