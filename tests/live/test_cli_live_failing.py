"""``llamaclient doctor`` and ``chat`` against a real llama-server started with ``--api-key``:
without the key (or with a wrong one) it cannot serve our chats (``/health`` answers, it is
public; the rest is 401), with it (``--api-key`` or ``LLAMA_API_KEY``) everything passes; the
key is never printed, in any output or error. And a server where nothing listens."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

KEY = "sk-the-right-one"
LLAMA_SERVER_FLAGS = ("-np", "1", "-c", "4096", "--api-key", KEY)
ROOT = Path(__file__).resolve().parents[2]
WRONG = "sk-a-wrong-one"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llamaclient", *args], capture_output=True, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **(env or {})}, timeout=60,
        check=False,
    )


def test_doctor_says_it_cannot_serve_chats(base_url: str) -> None:
    proc = run("doctor", "--url", base_url)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("✓ reachable")
    assert lines[-1].startswith("✗ ")
    assert "401" in lines[-1]


@pytest.mark.parametrize("key", [None, WRONG])
def test_doctor_names_a_wrong_or_missing_key(base_url: str, key: str | None) -> None:
    proc = run("doctor", "--url", base_url, *(("--api-key", key) if key else ()))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "✗ API key           no: wrong or missing API key (HTTP 401): give it with --api-key "
        "KEY or $LLAMA_API_KEY")
    assert WRONG not in proc.stdout + proc.stderr


@pytest.mark.parametrize("where", ["option", "environment"])
def test_doctor_with_the_key_passes_every_check(base_url: str, where: str) -> None:
    if where == "option":
        proc = run("doctor", "--url", base_url, "--api-key", KEY)
    else:
        proc = run("doctor", "--url", base_url, env={"LLAMA_API_KEY": KEY})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 11
    assert "✓ resumable streams yes" in proc.stdout  # the raw probes carry the key too
    assert "✓ control endpoint  yes" in proc.stdout
    assert lines[-1].startswith("✓ chat              yes: answered")
    assert KEY not in proc.stdout + proc.stderr


def test_chat_fails_with_exit_1(base_url: str) -> None:
    proc = run("chat", "hello", "--url", base_url)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "── AuthenticationError: HTTP 401" in proc.stdout


def test_chat_with_a_wrong_key_fails_without_showing_it(base_url: str) -> None:
    proc = run("chat", "hello", "--url", base_url, "--api-key", WRONG)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "── AuthenticationError: HTTP 401 authentication_error: Invalid API Key" in proc.stdout
    assert WRONG not in proc.stdout + proc.stderr


@pytest.mark.parametrize("where", ["option", "environment"])
def test_chat_with_the_key(base_url: str, where: str) -> None:
    args = ("chat", "hello", "and again", "--url", base_url)
    if where == "option":
        proc = run(*args, "--api-key", KEY)
    else:
        proc = run(*args, env={"LLAMA_API_KEY": KEY})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("── finish: stop") == 2
    assert KEY not in proc.stdout + proc.stderr
    json_proc = run(*args, "--json", "--api-key", KEY)
    assert json_proc.returncode == 0, json_proc.stderr
    assert KEY not in json_proc.stdout + json_proc.stderr


@pytest.mark.parametrize("command", ["doctor", "chat"])
def test_nothing_listens(command: str) -> None:
    from devtools.llama_server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    args = ("doctor", "--url", url, "--timeout", "3") if command == "doctor" else (
        "chat", "hello", "--url", url)
    proc = run(*args)
    assert proc.returncode == 3, proc.stdout + proc.stderr
