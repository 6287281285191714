"""``llamaclient doctor`` and ``chat`` against a real llama-server router (``--models-dir``, no
``-m``) with two scripted models: doctor checks one model (``--model``, or the first loaded
one), so every line is about a real model (no Python ``None``) and its chat check passes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.llama_server import LlamaServer
from llamaclient import Client, Config
from tests.live.fleet import start_router

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["reachable", "model", "router mode", "context", "tools", "thinking",
         "resumable streams", "multimodal", "/slots", "control endpoint", "chat"]


@pytest.fixture(scope="module")
def router(
    llama_server_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    tmp = tmp_path_factory.mktemp("router")
    server = start_router(llama_server_binary, tmp, "-np", "2", "-c", "4096")
    try:
        yield server
    finally:
        server.stop()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llamaclient", *args], capture_output=True, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120, check=False,
    )


def set_loaded(router: LlamaServer, *names: str) -> None:
    """Exactly ``names`` loaded, the others not (each change waited for)."""

    async def settle() -> None:
        async with Client(Config(router.base_url, load_timeout=30)) as client:
            for name in ("alpha", "beta"):
                if name in names:
                    await client.load_model(name)
                else:
                    await client.unload_model(name)

    asyncio.run(settle())


def verdicts(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {line[2:20].strip(): line[20:] for line in proc.stdout.splitlines()}


def test_doctor_checks_the_first_loaded_model(router: LlamaServer) -> None:
    set_loaded(router, "beta")
    proc = run("doctor", "--url", router.base_url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = verdicts(proc)
    assert list(seen) == NAMES
    assert "None" not in proc.stdout
    assert seen["model"] == (
        "beta: loaded (the router's first loaded model; --model NAME checks another)")
    assert seen["router mode"] == "yes: models alpha (unloaded), beta (loaded)"
    assert seen["context"] == "2048 tokens per slot, 2 slot(s)"  # -c 4096 over -np 2
    assert seen["/slots"] == "yes: 2 slot(s), 0 busy"
    assert seen["control endpoint"].startswith("yes")
    assert seen["chat"].startswith("yes: answered")
    assert all(line.startswith(("✓", "·")) for line in proc.stdout.splitlines()), proc.stdout


def test_doctor_checks_the_model_named(router: LlamaServer) -> None:
    set_loaded(router, "beta")
    proc = run("doctor", "--url", router.base_url, "--model", "alpha")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdicts(proc)["model"] == "alpha: loaded"
    assert "None" not in proc.stdout


def test_doctor_on_a_router_with_nothing_loaded_loads_the_first(router: LlamaServer) -> None:
    set_loaded(router)
    proc = run("doctor", "--url", router.base_url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdicts(proc)["model"] == (
        "alpha: loaded (none was loaded: loaded now; --model NAME checks another)")


def test_doctor_on_a_model_the_router_does_not_have(router: LlamaServer) -> None:
    proc = run("doctor", "--url", router.base_url, "--model", "gamma")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "✗ model             gamma: the router has no such model (it has alpha, beta)")


def test_chat_through_the_router_names_its_model(router: LlamaServer) -> None:
    proc = run("chat", "hello", "--url", router.base_url, "--model", "beta")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Done." in proc.stdout
    assert "── finish: stop" in proc.stdout
