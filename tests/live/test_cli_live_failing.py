"""``llamaclient doctor`` and ``chat`` against a real llama-server that cannot serve our chats:
it demands an API key we do not have. ``/health`` answers (it is public), the rest is 401."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LLAMA_SERVER_FLAGS = ("-np", "1", "-c", "4096", "--api-key", "sk-the-right-one")
ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llamaclient", *args], capture_output=True, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60, check=False,
    )


def test_doctor_says_it_cannot_serve_chats(base_url: str) -> None:
    proc = run("doctor", "--url", base_url)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("✓ reachable")
    assert lines[-1].startswith("✗ ")
    assert "401" in lines[-1]


def test_chat_fails_with_exit_1(base_url: str) -> None:
    proc = run("chat", "hello", "--url", base_url)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "── AuthenticationError: HTTP 401" in proc.stdout


@pytest.mark.parametrize("command", ["doctor", "chat"])
def test_nothing_listens(command: str) -> None:
    from devtools.llama_server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    args = ("doctor", "--url", url, "--timeout", "3") if command == "doctor" else (
        "chat", "hello", "--url", url)
    proc = run(*args)
    assert proc.returncode == 3, proc.stdout + proc.stderr
