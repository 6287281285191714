"""Mutation testing of the pure core, one module at a time, with only that module's tests.

    python -m devtools.mutation                 # every module in MODULES
    python -m devtools.mutation sse body        # some of them
    python -m devtools.mutation sse --show      # also print the diff of each survivor
    python -m devtools.mutation sse -j 2        # two mutant workers (default 1: shared cores)
    python -m devtools.mutation sse --resume    # go on with a stopped run in its copy

mutmut 3 reads one ``[tool.mutmut]`` table (``pyproject.toml``) and mutates and tests from the
current directory, so a per-module run needs its own directory. For each module this copies
``llamaclient/``, ``tests/`` and ``pyproject.toml`` into ``.cache/mutation/<module>/``, replaces
the ``[tool.mutmut]`` table there with the project's own plus ``only_mutate`` (that module) and
``pytest_add_cli_args_test_selection`` (that module's tests), runs ``mutmut run`` in it and
prints the module's score and its surviving mutants. The copy keeps the results: ``cd`` there
and use ``mutmut show NAME`` / ``mutmut browse``. Each run starts from a fresh copy, unless
``--resume``: then mutmut goes on in the existing copy, keeping the verdicts it has.

Score = (killed + timeout) / all mutants. Survivors judged equivalent (no behaviour can tell
them apart) are listed with a reason in ``docs/mutation.md``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MODULES", "Module", "main", "run_module"]

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".cache" / "mutation"


@dataclass(frozen=True)
class Module:
    sources: tuple[str, ...]  # files to mutate (paths from the project root)
    tests: tuple[str, ...]  # the tests that may kill them


MODULES: dict[str, Module] = {
    "sse": Module(
        ("llamaclient/_protocol/sse.py",),
        (
            "tests/core/test_sse.py",
            "tests/core/test_sse_edges.py",
            "tests/core/test_limits.py",
            "tests/core/test_dialects.py",
        ),
    ),
    "body": Module(
        ("llamaclient/_protocol/body.py",),
        (
            "tests/core/test_body.py",
            "tests/core/test_messages.py",
            "tests/core/test_logprobs.py",
            "tests/core/test_openai.py",
            "tests/core/test_dialects.py",
            "tests/turn/test_effort.py",
            "tests/turn/test_proxied.py",
            "tests/output/test_typed.py",
        ),
    ),
    # What a non-2xx answer means (llama-server's and a proxy's envelopes), and the proxy
    # an answer names.
    "status": Module(
        ("llamaclient/_protocol/status.py", "llamaclient/_protocol/proxies.py"),
        (
            "tests/core/test_status.py",
            "tests/core/test_server_info.py",
            "tests/core/test_dialects.py",
            "tests/core/test_types.py",
            "tests/turn/test_proxied.py",
            "tests/turn/test_opening.py",
            "tests/turn/test_mutants_opening.py",
        ),
    ),
    "assembler": Module(
        ("llamaclient/_protocol/assembler.py",),
        (
            "tests/core/test_assembler.py",
            "tests/core/test_dialects.py",
            "tests/core/test_logprobs.py",
        ),
    ),
    "logprobs": Module(
        ("llamaclient/_types/logprobs.py", "llamaclient/_protocol/logprobs.py"),
        ("tests/core/test_logprobs.py",),
    ),
    "retry": Module(("llamaclient/_protocol/retry.py",), ("tests/core/test_retry.py",)),
    "http11": Module(("llamaclient/_protocol/http11.py",), ("tests/core/test_http11.py",)),
    "scanner": Module(("llamaclient/_arguments/scanner.py",), ("tests/arguments",)),
    "repair": Module(("llamaclient/_arguments/repair.py",), ("tests/arguments",)),
    "output": Module(("llamaclient/_arguments/output.py",), ("tests/output", "tests/arguments")),
    "turn": Module(
        (
            "llamaclient/_turn/machine.py",
            "llamaclient/_turn/phase.py",
            "llamaclient/_turn/before.py",
            "llamaclient/_turn/opening.py",
            "llamaclient/_turn/streaming.py",
            "llamaclient/_turn/resuming.py",
            "llamaclient/_turn/budget.py",
            "llamaclient/_turn/failures.py",
        ),
        ("tests/turn",),
    ),
    # The rest of the machine's package: what it shares and plans with (pure data and
    # arithmetic), the admission stage, the cache history and the pool's balancer.
    "turn2": Module(
        (
            "llamaclient/_turn/admission.py",
            "llamaclient/_turn/balancer.py",
            "llamaclient/_turn/commands.py",
            "llamaclient/_turn/history.py",
            "llamaclient/_turn/known.py",
            "llamaclient/_turn/plan.py",
            "llamaclient/_turn/secret.py",
        ),
        ("tests/turn", "tests/client/test_pool.py"),
    ),
    "types": Module(
        (
            "llamaclient/_types/completion.py",
            "llamaclient/_types/config.py",
            "llamaclient/_types/errors.py",
        ),
        ("tests/core/test_types.py",),
    ),
}

# mutmut exit codes (mutmut.stats.status_by_exit_code), folded into what the score needs.
_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests"}
_TIMEOUT = {36, 24, -24, 152, 255}


def _status(code: int | None) -> str:
    if code is None:
        return "not checked"
    if code in _TIMEOUT:
        return "timeout"
    return _STATUS.get(code, "other")


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in ("__pycache__", ".hypothesis", ".pytest_cache")}


def _pyproject(module: Module) -> str:
    """The project's pyproject.toml with a ``[tool.mutmut]`` table for this module."""
    text = (ROOT / "pyproject.toml").read_text("utf-8")
    base = dict(tomllib.loads(text).get("tool", {}).get("mutmut", {}))
    base["only_mutate"] = list(module.sources)
    base["pytest_add_cli_args_test_selection"] = list(module.tests)
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        if line.startswith("["):
            skipping = line.strip() == "[tool.mutmut]"
        if not skipping:
            kept.append(line)
    table = ["", "[tool.mutmut]"]
    table += [f"{key} = {json.dumps(value)}" for key, value in base.items()]
    return "\n".join(kept + table) + "\n"


def _fresh_copy(module: Module, work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for folder in ("llamaclient", "tests", "recordings"):
        shutil.copytree(ROOT / folder, work / folder, ignore=_ignore)
    (work / "pyproject.toml").write_text(_pyproject(module), "utf-8")


def run_module(name: str, *, children: int, show: bool, resume: bool = False) -> Counter[str]:
    """Mutate one module in a fresh copy (or go on in the last one); print and return its
    counts."""
    module = MODULES[name]
    work = WORK / name
    if not (resume and (work / "mutants").exists()):
        _fresh_copy(module, work)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)],
        cwd=work,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    (work / "mutmut-run.log").write_text(proc.stdout + proc.stderr, "utf-8")
    counts: Counter[str] = Counter()
    survivors: list[str] = []
    for source in module.sources:
        meta = work / "mutants" / (source + ".meta")
        if not meta.exists():
            print(f"{name}: no results for {source}; see {work / 'mutmut-run.log'}")
            continue
        codes: dict[str, int | None] = json.loads(meta.read_text("utf-8"))["exit_code_by_key"]
        for key, code in codes.items():
            status = _status(code)
            counts[status] += 1
            if status != "killed" and status != "timeout":
                survivors.append(f"{key}: {status}")
    total = sum(counts.values())
    caught = counts["killed"] + counts["timeout"]
    score = 100.0 * caught / total if total else 100.0
    detail = ", ".join(f"{counts[k]} {k}" for k in sorted(counts))
    print(f"== {name}: {score:.1f}% ({caught}/{total}; {detail}) in {seconds:.0f} s")
    for line in sorted(survivors):
        print(f"   {line}")
        if show:
            diff = subprocess.run(
                [sys.executable, "-m", "mutmut", "show", line.split(":")[0]],
                cwd=work,
                capture_output=True,
                text=True,
            )
            print(diff.stdout)
    if proc.returncode != 0:
        print(f"{name}: mutmut exited {proc.returncode}; see {work / 'mutmut-run.log'}")
        counts["run failed"] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"some of: {', '.join(MODULES)}")
    parser.add_argument("-j", "--max-children", type=int, default=1)
    parser.add_argument("--show", action="store_true", help="print each survivor's diff")
    parser.add_argument("--resume", action="store_true", help="go on with the last run's copy")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {list(MODULES)}")
    failed = False
    for name in args.modules or list(MODULES):
        counts = run_module(name, children=args.max_children, show=args.show, resume=args.resume)
        failed = failed or bool(counts["run failed"])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
