"""A pytest plugin for mutation runs (``devtools/mutation.py`` loads it with ``-p``).

Mutants run through mutmut's trampolines, which makes every call slower, and a mutant's verdict
must not depend on luck. So hypothesis gets no deadline (a slow example is not a failure),
derandomized examples (the same examples for every mutant) and no example database (mutants
must not teach the next run).
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("mutation", deadline=None, derandomize=True, database=None)
settings.load_profile("mutation")
