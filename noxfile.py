"""Developer sessions (modelled on hynek/stamina's noxfile).

``nox -s tests`` unit suite on 3.11, 3.12 and 3.13 (each one this machine has) ·
``nox -s live`` live suite on a real llama-server · ``nox -s lint`` ruff ·
``nox -s typecheck`` mypy --strict · ``nox -s bench`` the benchmark table ·
``nox -s record`` re-record ``recordings/`` · ``nox -s demo`` the main job ·
``nox -s coverage`` the pure core at 100 % branch coverage · ``nox -s mutation`` mutmut per
pure-core module (``-- sse body`` for some; see ``devtools/mutation.py``) · ``nox -s fuzz``
the sans-I/O fuzz suite, long (``-- 100000`` examples per test; default 20000) ·
``nox -s litellm`` the client behind LiteLLM's proxy (installs it: minutes, so not in CI).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "typecheck", "tests"]
# An interpreter this machine lacks skips its session with "Python interpreter 3.12 not
# found", on CI too (nox errors there by default), and is never downloaded.
nox.options.error_on_missing_interpreters = False
nox.options.download_python = "never"

PYTHONS = ["3.11", "3.12", "3.13"]

PYPROJECT = nox.project.load_toml("pyproject.toml")


def _install(session: nox.Session, *groups: str) -> None:
    """The project (editable) and its dependency groups (see pyproject.toml)."""
    session.install("-e", ".[cli]", *nox.project.dependency_groups(PYPROJECT, *groups))
    if "live" in groups:  # a portable llama-server, built once (devtools/build_server.py)
        session.run("python", "-m", "devtools.build_server")


def _pyenv_on_path(pythons: list[str]) -> None:
    """Put pyenv's newest X.Y.Z of each wanted X.Y at the end of PATH.

    pyenv's shims answer only for its active versions (``pyenv global``), and nox finds
    interpreters through them: with 3.11 active, an installed 3.12 or 3.13 was "not found".
    At the end of PATH, an interpreter found earlier (a venv, the system's) still wins.
    """
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    installed = [p for p in versions.glob("3.*") if re.fullmatch(r"3\.\d+\.\d+", p.name)]
    extra = []
    for python in pythons:
        same = [p for p in installed if p.name.startswith(python + ".")]
        if same:
            newest = max(same, key=lambda p: tuple(map(int, p.name.split("."))))
            extra.append(str(newest / "bin"))
    os.environ["PATH"] = os.pathsep.join([os.environ.get("PATH", ""), *extra])


_pyenv_on_path(PYTHONS)


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    # docs + lint: tests/test_docs.py builds the site and type-checks the docs' examples.
    # tests/live is not collected: its conftest imports gguf (the live group), not installed.
    _install(session, "test", "docs", "lint")
    session.run("pytest", "-m", "not live", "--ignore=tests/live", *session.posargs)


@nox.session
def live(session: nox.Session) -> None:
    _install(session, "test", "live")
    session.run("pytest", "-m", "live", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    _install(session, "lint")
    session.run("ruff", "check", "llamaclient", "tests", "devtools", "bench", "noxfile.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    _install(session, "test", "lint", "live", "bench", "docs")
    session.run("mypy")


@nox.session
def bench(session: nox.Session) -> None:
    _install(session, "bench")
    session.run("python", "-m", "bench", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the site into ``site/`` (``nox -s docs -- serve`` previews it live)."""
    _install(session, "docs")
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session
def record(session: nox.Session) -> None:
    _install(session, "live")
    session.run("python", "-m", "devtools.record", *session.posargs)


# LiteLLM's proxy, as measured (docs/balancers.md): its ``[proxy]`` extra brings ~150
# packages, so the live suite leaves it out and this session runs it.
LITELLM = "litellm[proxy]==1.108.7"


@nox.session
def litellm(session: nox.Session) -> None:
    _install(session, "test", "live")
    session.install(LITELLM)
    session.run("pytest", "-m", "live", "tests/live/test_litellm_live.py", *session.posargs)


@nox.session
def demo(session: nox.Session) -> None:
    _install(session, "live", "demo")
    session.run("llamaclient", "chat", *(session.posargs or ["Hello!"]))


# The pure core: no I/O, so its own tests must reach every line and branch (the turn
# machine too; its pool Balancer is reached through the pool's tests).
COVERED = ["llamaclient._protocol", "llamaclient._types", "llamaclient._turn"]
# Argument-streaming modules join the list once they exist.
COVERED_IF_PRESENT = ["llamaclient/_arguments/scanner.py", "llamaclient/_arguments/repair.py"]


@nox.session
def coverage(session: nox.Session) -> None:
    _install(session, "test")
    present = [p[:-3].replace("/", ".") for p in COVERED_IF_PRESENT if Path(p).exists()]
    Path(".cache").mkdir(exist_ok=True)  # the data file goes where git ignores it
    session.run(
        "pytest",
        "tests/core",
        "tests/arguments",
        "tests/output",
        "tests/turn",
        "tests/client/test_pool.py",
        "tests/client/test_usage.py",  # the totals' additions (_types/totals.py)
        "-p",
        "no:cacheprovider",
        "-p",
        "no:llamaclient",  # the kit's plugin would import the package before coverage starts
        *(f"--cov={target}" for target in COVERED + present),
        "--cov-branch",
        "--cov-report=term-missing",
        "--cov-fail-under=100",
        *session.posargs,
        env={"COVERAGE_FILE": ".cache/coverage"},
    )


@nox.session
def mutation(session: nox.Session) -> None:
    _install(session, "test")
    session.install("mutmut>=3.8")  # source_paths, only_mutate
    session.run("python", "-m", "devtools.mutation", *session.posargs)


@nox.session
def soak(session: nox.Session) -> None:
    """10,000 streams through one client, a fifth with a fault of the matrix, per transport:
    every outcome exact, no fd/task/connection left, RSS flat within 5 % after the warm-up
    (``-- --streams 2000`` for a shorter run)."""
    _install(session, "test")
    for transport in ("asyncio", "httpx"):
        session.run(
            "python", "-m", "tests.client.soak", "--transport", transport, *session.posargs
        )


@nox.session
def fuzz(session: nox.Session) -> None:
    """``tests/core/test_fuzz.py`` with many examples per test (CI runs 150); prints how many
    ran and what came out (``fuzz: N examples in all``)."""
    _install(session, "test")
    examples = session.posargs[0] if session.posargs else "20000"
    session.run(
        "pytest",
        "tests/core/test_fuzz.py",
        "-p",
        "no:cacheprovider",
        "-s",
        "-q",
        "--hypothesis-show-statistics",
        *session.posargs[1:],
        env={"LLAMACLIENT_FUZZ_EXAMPLES": examples},
    )
