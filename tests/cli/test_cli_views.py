"""The CLI's views and turn loop without a server (FakeLlama): the console rendering, the JSON
lines, the last line, Ctrl-C, failures and their exit codes, replay of every recording, and
the command line itself."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from llamaclient import ChatRequest, Completion, Timings, Usage, UserMessage
from llamaclient._cli import INSTALL_HINT, main
from llamaclient._cli.chat import EXIT, replay_main, run_turn
from llamaclient._cli.view import ConsoleView, JsonView, View, summary
from llamaclient.testing import FakeLlama, load

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
ASK = ChatRequest([UserMessage("hi")])


def console_view() -> tuple[ConsoleView, io.StringIO]:
    out = io.StringIO()
    return ConsoleView(Console(file=out, width=100, color_system=None, highlight=False)), out


async def turn(fake: FakeLlama, view: View, **config: Any) -> tuple[int, Completion]:
    async with fake.client(**config) as client:
        return await run_turn(client, ASK, view)


def completion(**timings: Any) -> Completion:
    return Completion("id", "m", "x", None, (), None,
                      Timings(**timings) if timings else None, Usage())


def test_summary_line() -> None:
    done = completion(cache_n=30, prompt_n=10, predicted_n=7, predicted_per_second=12.34)
    done = Completion(**{**{f: getattr(done, f) for f in done.__struct_fields__},
                         "finish_reason": "stop"})
    assert summary(done) == "finish: stop · 7 tokens · 12.3 tokens/s · prompt 40, 30 cached (75 %)"
    assert summary(completion(), stopped="stopped (Ctrl-C)") == "stopped (Ctrl-C) · 0 tokens"


@pytest.mark.anyio
async def test_console_view_shows_reasoning_answer_and_last_line() -> None:
    view, out = console_view()
    fake = FakeLlama().reply("The answer.", reasoning="Thinking it over.")
    code, done = await turn(fake, view)
    assert code == EXIT["ok"]
    screen = out.getvalue()
    lines = screen.splitlines()
    assert lines[0].startswith("prompt ")
    assert "9/9 tokens" in lines[0]
    assert "tokens/s" in lines[0]
    assert lines[1:4] == ["Thinking it over.", "", "The answer."]
    assert lines[-1] == "── " + summary(done)
    assert "finish: stop · 5 tokens · 200.0 tokens/s · prompt 9, 0 cached (0 %)" in lines[-1]


@pytest.mark.anyio
async def test_console_view_shows_tool_calls_as_their_arguments_arrive() -> None:
    view, out = console_view()
    fake = FakeLlama().reply(
        content="Let me look.",
        tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}},
                    {"name": "list_dir", "arguments": {"path": "."}}],
        chunk=3,
    )
    await turn(fake, view)
    screen = out.getvalue()
    assert '⚙ read_file {"path": "a.txt"}\n\n⚙ list_dir {"path": "."}\n' in screen
    assert "finish: tool_calls" in screen


@pytest.mark.anyio
async def test_console_view_notes_waiting_and_retries() -> None:
    view, out = console_view()
    fake = FakeLlama().fail(loading=0.01).reply("ok")
    await turn(fake, view)
    assert "… the model is loading\n" in out.getvalue()


@pytest.mark.anyio
async def test_json_lines_one_per_event_ending_with_the_completion() -> None:
    out = io.BytesIO()
    fake = FakeLlama().reply("Hi there.", reasoning="Hm.",
                             tool_calls=[{"id": "c1", "name": "f", "arguments": {"a": 1}}])
    code, done = await turn(fake, JsonView(out))
    assert code == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    types = [line["type"] for line in lines]
    assert types[:2] == ["Progress", "Progress"]
    assert types[-1] == "Completion"
    assert {"Reasoning", "Content", "ToolCallDelta", "ToolCallDone"} <= set(types)
    assert lines[2] == {"type": "Reasoning", "text": "Hm."}
    done_line = next(line for line in lines if line["type"] == "ToolCallDone")
    assert done_line == {"type": "ToolCallDone", "index": 0,
                         "call": {"id": "c1", "name": "f", "arguments": '{"a": 1}', "extra": {}}}
    last = lines[-1]
    assert last["content"] == "Hi there."
    assert last["finish_reason"] == "tool_calls"
    assert last["id"] == done.id
    assert last["timings"]["predicted_n"] == done.timings.predicted_n  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_failure_shows_the_error_and_what_arrived() -> None:
    view, out = console_view()
    fake = FakeLlama().fail(cut_after=2).reply("one two three")
    code, partial = await turn(fake, view)
    assert code == EXIT["failed"]
    assert partial.content == "one two"
    screen = out.getvalue()
    assert "one two\n" in screen
    assert "── StreamClosedEarlyError: the stream broke" in screen
    assert "three" not in screen

    data = io.BytesIO()
    await turn(FakeLlama().fail(cut_after=1).reply("one two"), JsonView(data))
    last = json.loads(data.getvalue().splitlines()[-1])
    assert last["type"] == "Error"
    assert last["error"] == "StreamClosedEarlyError"
    assert last["partial"]["content"] == "one"


@pytest.mark.anyio
async def test_an_unreachable_server_is_exit_3() -> None:
    from llamaclient import Client, Config

    view, out = console_view()
    async with Client(Config("http://127.0.0.1:1", max_retries=0)) as client:
        code, _ = await run_turn(client, ASK, view)
    assert code == EXIT["unreachable"] == 3
    assert "ConnectError" in out.getvalue()


@pytest.mark.anyio
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_ctrl_c_stops_the_turn_and_shows_what_arrived(sig: signal.Signals) -> None:
    """A real signal to this process while the stream waits: the turn stops (no
    KeyboardInterrupt), the view gets what had arrived, the exit code is 130, and the
    handlers are put back."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    view, out = console_view()
    fake = FakeLlama().fail(stall=True, cut_after=2).reply("one two three")

    async def interrupt() -> None:
        await anyio.sleep(0.2)
        os.kill(os.getpid(), sig)

    async with anyio.create_task_group() as tg:
        tg.start_soon(interrupt)
        code, partial = await turn(fake, view, stall_timeout=30.0)
    assert code == EXIT["interrupted"] == 130
    assert partial.content == "one two"
    assert out.getvalue().splitlines()[-1].startswith("── stopped (Ctrl-C) · 2 tokens")
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


STREAMS = sorted(RECORDINGS.glob("*.http"))


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: p.stem)
def test_replay_renders_every_recording(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = load(path)
    view, out = console_view()
    code = replay_main(path, view)
    screen = out.getvalue()
    ok = rec.status == 200 and b'"error"' not in rec.body and rec.meta.get("cut") != "true"
    sse = rec.header("content-type") == "text/event-stream"
    if ok and sse:
        assert code == 0, screen
        assert "── finish: " in screen
    else:
        assert code == EXIT["failed"], screen
        assert "── " in screen


def test_replay_json_of_a_tool_call(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["replay", str(RECORDINGS / "tool_call.http"), "--json"]) == 0
    lines = [json.loads(line) for line in capsysbinary.readouterr().out.splitlines()]
    assert lines[-1]["type"] == "Completion"
    assert lines[-1]["tool_calls"][0]["arguments"] == '{"path": "notes.txt"}'


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["chat", "--max-tokens", "many"])
    assert info.value.code == EXIT["usage"] == 2


def test_without_rich_it_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)
    assert main(["replay", "x.http"]) == EXIT["missing"] == 5
    assert INSTALL_HINT in capsys.readouterr().err
    assert "pip install 'llamaclient[cli]'" in INSTALL_HINT


def test_prompt_rate_text() -> None:
    from llamaclient import Progress
    from llamaclient._cli.view import _rate

    assert _rate(Progress(100, 20, 100, 40.0)) == " · 2,000 tokens/s · 20 from cache"
    assert _rate(Progress(100, 0, 0, 0.0)) == ""
    assert _rate(Progress(100, 99, 99, None)) == " · 99 from cache"
    assert _rate(Progress(28, 0, 28, 0.0)) == " · in <1 ms"  # timed at 0 ms (seen live)


@pytest.mark.anyio
async def test_ctrl_c_mid_stream_the_partial_is_exactly_what_was_shown() -> None:
    """Ctrl-C while events keep coming: the view shows no more once the stop is seen, and
    the partial it gets is exactly the text it showed."""
    from llamaclient import Content

    shown: list[str] = []

    class Interrupting(ConsoleView):
        def show(self, event: Any) -> None:
            if isinstance(event, Content):
                shown.append(event.text)
                if len(shown) == 3:
                    os.kill(os.getpid(), signal.SIGINT)
            super().show(event)

    view = Interrupting(Console(file=io.StringIO(), width=100, color_system=None))
    fake = FakeLlama().reply(" ".join(f"w{i}" for i in range(200)))
    code, partial = await turn(fake, view)
    assert code == 130
    # The handler runs at the next bytecode boundary of the main thread (at once on asyncio;
    # an event or so later under trio): the stream stops long before its 200 words.
    assert 3 <= len(shown) < 10
    assert partial.content == "".join(shown)


def test_pyproject_declares_the_command_and_its_extra() -> None:
    import tomllib

    project = tomllib.loads((RECORDINGS.parent / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"llamaclient": "llamaclient._cli:main"}
    assert project["optional-dependencies"]["cli"] == ["rich>=13"]
    assert not any(d.startswith("rich") for d in project["dependencies"])


def test_python_dash_m_is_the_same_command() -> None:
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "llamaclient", "--help"], capture_output=True,
                          text=True, check=False, env={"PYTHONPATH": str(RECORDINGS.parent)})
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: llamaclient ")
    assert "Exit codes: 0 done, 1 chat failed" in proc.stdout.replace("\n", " ").replace(
        "  ", " ")


def test_import_llamaclient_imports_neither_the_cli_nor_rich() -> None:
    import subprocess

    code = ("import sys, llamaclient; print(sorted(m for m in sys.modules if "
            "m.split('.')[0] in ('rich', 'pytest') or "
            "m.split('.')[:2] in (['llamaclient', '_cli'], ['llamaclient', 'testing'], "
            "['llamaclient', '_embedded'])))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(RECORDINGS.parent)})
    assert proc.stdout.strip() == "[]"


def test_the_finish_line_shows_the_draft_models_acceptance() -> None:
    """Speculative decoding: llama-server's timings carry draft_n and draft_n_accepted."""
    spec = completion(prompt_n=23, predicted_n=60, predicted_per_second=2904.5, draft_n=44,
                      draft_n_accepted=33)
    assert summary(spec) == ("finish: none · 60 tokens · 2904.5 tokens/s · draft 33/44 accepted "
                             "(75 %) · prompt 23, 0 cached (0 %)")
    assert "draft" not in summary(completion(predicted_n=5))  # no draft model
    assert "draft" not in summary(completion(predicted_n=5, draft_n=0, draft_n_accepted=0))


def test_replay_of_an_in_band_error_counts_the_tokens_it_showed() -> None:
    """The recording has no timings (it was made without timings_per_token): the count is
    the pieces shown, one per token, not 0."""
    path = RECORDINGS / "inband_error.http"
    data = io.BytesIO()
    assert replay_main(path, JsonView(data)) == EXIT["failed"]
    events = [json.loads(line) for line in data.getvalue().splitlines()]
    assert events[-1]["partial"]["timings"] is None
    pieces = sum(1 for e in events if e["type"] == "Content")
    assert pieces == 40
    view, out = console_view()
    assert replay_main(path, view) == EXIT["failed"]
    assert out.getvalue().splitlines()[-1] == (
        f"── ServerError: server error 500: Context size has been exceeded. · {pieces} tokens")


def test_without_timings_the_usage_count_wins_over_the_pieces() -> None:
    counted = Completion("id", "m", "x", None, (), None, None, Usage(completion_tokens=9))
    assert summary(counted, stopped="stopped", shown=4) == "stopped · 9 tokens"
    assert summary(completion(), stopped="stopped", shown=4) == "stopped · 4 tokens"


KEY = "sk-never-shown-4f2a"
BAD_LINES = [
    (["chat", "hi", "--max-tokens", "-5", "--url", "http://127.0.0.1:1"],
     "llamaclient chat: error: argument --max-tokens: must be an int >= -1, not -5"),
    (["chat", "hi", "--max-tokens", "many"],
     "llamaclient chat: error: argument --max-tokens: not a whole number: 'many'"),
    (["chat", "hi", "--url", "localhost:8080"],
     "llamaclient chat: error: argument --url: must start with http:// or https://, not "
     "'localhost:8080' (for example 'http://localhost:8080')"),
    (["doctor", "--url", "127.0.0.1:8080"],
     "llamaclient doctor: error: argument --url: must start with http:// or https://, not "
     "'127.0.0.1:8080' (for example 'http://127.0.0.1:8080')"),
    (["chat", "hi", "--url", "http://127.0.0.1:99999"],
     "llamaclient chat: error: argument --url: is not a URL: 'http://127.0.0.1:99999' (Port out "
     "of range 0-65535)"),
    (["doctor", "--url", "http://[::1"],
     "llamaclient doctor: error: argument --url: is not a URL: 'http://[::1' (Invalid IPv6 URL)"),
    (["doctor", "--url", "http://:8080"],
     "llamaclient doctor: error: argument --url: has no host: 'http://:8080'"),
    (["doctor", "--timeout", "0"],
     "llamaclient doctor: error: argument --timeout: must be a number > 0, not 0.0"),
    (["doctor", "--timeout", "nan"],
     "llamaclient doctor: error: argument --timeout: must be a number > 0, not nan"),
    (["chat", "hi", "--model", "/no/such/model.gguf"],
     "llamaclient chat: error: argument --model: no such file: '/no/such/model.gguf' (without "
     "--url, --model is a GGUF file for the embedded server; with --url, a model name)"),
    (["chat", "hi", "--api-key", KEY + "\n", "--url", "http://127.0.0.1:1"],
     "llamaclient chat: error: argument --api-key: api_key must be printable ASCII (the value "
     "is not shown)"),
    (["doctor", "--api-key", KEY, "--timeout", KEY],
     "llamaclient doctor: error: argument --timeout: not a number of seconds: '***'"),
    (["doctor", f"--api={KEY}", "extra", KEY],
     "llamaclient: error: unrecognized arguments: extra ***"),
]


@pytest.mark.parametrize(("argv", "error"), BAD_LINES, ids=lambda v: " ".join(v)[:40])
def test_a_bad_value_is_a_one_line_usage_error(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with argparse's usage and one error line, before any server is started or
    asked; never a traceback, never the API key."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == EXIT["usage"] == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0].startswith("usage: llamaclient")
    assert lines[-1] == error
    assert [line for line in lines if "error:" in line] == [error]
    assert KEY not in captured.err


def test_a_bad_key_in_the_environment_is_a_usage_error_that_hides_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LLAMA_API_KEY", KEY + "\x7f")
    with pytest.raises(SystemExit) as info:
        main(["doctor"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("llamaclient doctor: error: LLAMA_API_KEY: api_key must be "
                                    "printable ASCII (the value is not shown)")
    assert KEY not in err


@pytest.mark.parametrize("command", ["chat", "doctor"])
def test_help_never_shows_the_key_from_the_environment(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LLAMA_API_KEY", KEY)
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert "--api-key KEY" in out
    assert "LLAMA_API_KEY" in out
    assert KEY not in out
