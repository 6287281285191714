"""``llamaclient`` against a real llama-server (scripted model), in a real pseudo-terminal
(pexpect), read back as the screen a terminal shows (pyte): the chat screen (prompt bar,
answer, last line), an interactive session whose second turn reuses the prompt cache, JSON
lines, ``doctor``, and Ctrl-C in the middle of a generation, after which the server's slot
must be free within 2 s.

The server's default ``logit_bias`` (``-l``) suppresses the script token ``check``: a request
with thinking on then reasons forever (the scripted ``endless_reasoning``), one without
answers "Done.".
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pexpect
import pyte

from devtools.vocab import TOKEN_IDS

LLAMA_SERVER_FLAGS = ("-np", "1", "-c", "65536", "-l", f"{TOKEN_IDS['check']}-100")
ROOT = Path(__file__).resolve().parents[2]
ROWS, COLUMNS = 200, 100


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "100"}


def spawn(*args: str) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable, ["-m", "llamaclient", *args], env=env(), encoding="utf-8",
        dimensions=(ROWS, COLUMNS), timeout=60,
    )
    child.logfile_read = io.StringIO()
    return child


def screen(child: pexpect.spawn) -> str:
    """Wait for the end; the terminal's screen then, as text (trailing blanks dropped)."""
    child.expect(pexpect.EOF)
    child.close()
    term = pyte.Screen(COLUMNS, ROWS)
    pyte.Stream(term).feed(child.logfile_read.getvalue())
    return "\n".join(line.rstrip() for line in term.display).strip("\n")


def test_chat_in_a_terminal(base_url: str) -> None:
    child = spawn("chat", "hello", "--url", base_url)
    text = screen(child)
    assert child.exitstatus == 0, text
    lines = [line for line in text.splitlines() if line.strip()]
    # A rate, or "in <1 ms" when the server timed the prompt at 0 ms (it happens here).
    assert re.match(r"prompt ━+ (\d+)/\1 tokens · ([\d,]+ tokens/s|in <1 ms)", lines[0]), lines[0]
    assert lines[1] == "Done."
    assert re.fullmatch(
        r"── finish: stop · 2 tokens · [\d.]+ tokens/s · prompt \d+, \d+ cached \(\d+ %\)",
        lines[2].strip(),
    ), lines[2]
    assert "\x1b[" in child.logfile_read.getvalue()  # a terminal: rich styles it


def test_interactive_session_reuses_the_prompt_cache(base_url: str) -> None:
    child = spawn("chat", "-i", "--url", base_url)
    child.expect("you>")
    child.sendline("hello")
    child.expect(r"finish: stop[^\n]*prompt (\d+), (\d+) cached")
    assert child.match is not None
    first_prompt = int(child.match.group(1))
    child.expect("you>")
    child.sendline("and again")
    child.expect(r"finish: stop[^\n]*prompt (\d+), (\d+) cached")
    assert child.match is not None
    total, cached = int(child.match.group(1)), int(child.match.group(2))
    # The first turn's whole prompt came from the cache. (Its answer's tokens do not with
    # this template: thinking off renders an empty think block in the generation prompt
    # that the history of the next turn does not repeat.)
    assert cached >= first_prompt
    assert total > cached
    child.expect("you>")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_json_lines(base_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "llamaclient", "chat", "hello", "--json", "--url", base_url],
        capture_output=True, text=True, env=env(), timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["type"] == "Progress"
    assert [x["text"] for x in lines if x["type"] == "Content"] == ["Done."]
    assert lines[-1]["type"] == "Completion"
    assert lines[-1]["content"] == "Done."
    assert lines[-1]["finish_reason"] == "stop"


def test_doctor_on_a_working_server(base_url: str) -> None:
    child = spawn("doctor", "--url", base_url)
    text = screen(child)
    assert child.exitstatus == 0, text
    names = [line[2:20].strip() for line in text.splitlines() if line.strip()]
    assert names == ["reachable", "model", "router mode", "context", "tools", "thinking",
                     "resumable streams", "multimodal", "/slots", "control endpoint", "chat"]
    assert "✓ context           32768 tokens per slot, 1 slot(s)" in text
    assert "✓ chat              yes" in text


def test_ctrl_c_stops_the_generation_and_frees_the_slot(base_url: str) -> None:
    child = spawn("chat", "hello", "--thinking", "--max-tokens", "30000", "--url", base_url)
    child.expect("still thinking")
    child.expect("still thinking")
    assert httpx.get(base_url + "/slots", timeout=2).json()[0]["is_processing"]
    child.sendintr()
    stopped = time.monotonic()
    text = screen(child)
    assert child.exitstatus == 130, text
    last = text.strip().splitlines()[-1]
    assert re.fullmatch(r"── stopped \(Ctrl-C\) · \d+ tokens · .*", last), last
    assert "Hmm, still thinking." in text  # what had arrived stays on the screen
    free_after = None
    while time.monotonic() - stopped < 2.0:
        slots = httpx.get(base_url + "/slots", timeout=2).json()
        if not slots[0]["is_processing"]:
            free_after = time.monotonic() - stopped
            break
        time.sleep(0.05)
    assert free_after is not None, "the slot was still busy 2 s after Ctrl-C"
    print(f"slot free {free_after:.2f} s after Ctrl-C")


def test_the_embedded_server_inherits_llama_api_key_and_chat_sends_it(
    scripted_model_path: Path,
) -> None:
    """llama-server reads ``LLAMA_API_KEY`` itself: the embedded one started from a shell
    that has it demands that key, and ``chat`` sends it (without printing it)."""
    key = "sk-from-the-environment"
    proc = subprocess.run(
        [sys.executable, "-m", "llamaclient", "chat", "hello", "--model",
         str(scripted_model_path), "--max-tokens", "8"],
        capture_output=True, text=True, env={**env(), "LLAMA_API_KEY": key}, timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "llama-server on http://127.0.0.1:" in proc.stderr
    assert "Done." in proc.stdout
    assert "base model" not in proc.stderr  # said of Gemma only
    assert key not in proc.stdout + proc.stderr
