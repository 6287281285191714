"""``llamaclient chat``'s finish line under speculative decoding, against a real llama-server
with a draft model (``-md``, the scripted model drafting for itself, ``--spec-type
draft-simple``): the timings carry ``draft_n`` and ``draft_n_accepted``, and the last line
says how many drafted tokens were accepted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.llama_server import LlamaServer
from devtools.vocab import TOKEN_IDS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def speculative(
    llama_server_binary: Path, scripted_model_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    # Suppressing `check` makes a thinking request reason on until max_tokens.
    flags = ("-md", str(scripted_model_path), "--spec-type", "draft-simple", "-np", "1",
             "-c", "4096", "-l", f"{TOKEN_IDS['check']}-100")
    log = tmp_path_factory.mktemp("speculative") / "llama-server.log"
    server = LlamaServer(scripted_model_path, *flags, log_path=log, binary=llama_server_binary)
    server.start()
    try:
        yield server.base_url
    finally:
        server.stop()


def chat(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llamaclient", "chat", "hello", "--thinking", "--max-tokens",
         "60", "--url", url, *extra],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )


def test_the_finish_line_shows_the_draft_acceptance(speculative: str) -> None:
    proc = chat(speculative)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    match = re.fullmatch(
        r"── finish: length · 60 tokens · [\d.]+ tokens/s · draft (\d+)/(\d+) accepted "
        r"\((\d+) %\) · prompt \d+, \d+ cached \(\d+ %\)", last)
    assert match, last
    accepted, drafted, share = map(int, match.groups())
    assert drafted > 0
    assert 0 <= accepted <= drafted
    assert share == round(100 * accepted / drafted)
    print(f"draft acceptance: {accepted}/{drafted}")


def test_the_json_completion_carries_the_draft_counts(speculative: str) -> None:
    proc = chat(speculative, "--json")
    assert proc.returncode == 0, proc.stderr
    timings = json.loads(proc.stdout.splitlines()[-1])["timings"]
    assert timings["draft_n"] > 0
    assert 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
