"""``llamaclient chat``'s session logic against FakeLlama: what each turn sends (system,
thinking, max tokens, model), the interactive history with the exact echo (so the prompt cache
hits), and which failures end a session."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console

from llamaclient import AssistantMessage, SystemMessage, UserMessage
from llamaclient._cli.chat import ChatOptions, chat_main
from llamaclient._cli.view import ConsoleView
from llamaclient.testing import FakeLlama
from tests.cli.fakes import KEY


def asker(*lines: str) -> Callable[[], str]:
    it: Iterator[str] = iter(lines)

    def ask() -> str:
        try:
            return next(it)
        except StopIteration:
            raise EOFError from None

    return ask


def run(fake: FakeLlama, prompt: str | list[str] | None, interactive: bool, *lines: str,
        **options: object) -> tuple[int, str]:
    out = io.StringIO()
    view = ConsoleView(Console(file=out, width=100, color_system=None))
    opts = ChatOptions(url=fake.url, transport=fake.transport(), **options)  # type: ignore[arg-type]
    prompts = [prompt] if isinstance(prompt, str) else prompt or []
    return chat_main(opts, prompts, interactive, view, asker(*lines)), out.getvalue()


def test_one_turn_sends_the_options() -> None:
    fake = FakeLlama().reply("Hi.")
    code, screen = run(fake, "hello", False, system="Be brief.", thinking=True, max_tokens=7,
                       model="gemma")
    assert code == 0
    assert "Hi.\n" in screen
    sent = fake.requests[0]
    assert sent.messages == [SystemMessage("Be brief."), UserMessage("hello")]
    assert sent.settings["max_tokens"] == 7
    assert sent.settings["chat_template_kwargs"] == {"enable_thinking": True}
    assert sent.settings["model"] == "gemma"


def test_interactive_turns_echo_the_answers_exactly() -> None:
    fake = FakeLlama().reply("One.", reasoning="R1").reply("Two.").reply("Three.")
    code, screen = run(fake, "first", True, "second", "   ", "third")
    assert code == 0
    assert len(fake.requests) == 3  # the blank line was not sent
    assert fake.requests[2].messages == [
        UserMessage("first"), AssistantMessage("One.", "R1"),
        UserMessage("second"), AssistantMessage("Two."),
        UserMessage("third"),
    ]
    cached = [line for line in screen.splitlines() if line.startswith("── finish")]
    assert len(cached) == 3
    assert ", 0 cached" in cached[0]
    assert ", 0 cached" not in cached[1]  # the echo hit the (simulated) prompt cache
    assert ", 0 cached" not in cached[2]


def test_a_failed_turn_is_left_out_and_the_session_goes_on() -> None:
    fake = FakeLlama().reply("One.").fail(cut_after=1).reply("broken answer").reply("Three.")
    code, screen = run(fake, "first", True, "second", "third")
    assert code == 0
    assert "── StreamClosedEarlyError" in screen
    assert fake.requests[2].messages == [
        UserMessage("first"), AssistantMessage("One."), UserMessage("third"),
    ]


def test_a_failed_single_turn_is_exit_1() -> None:
    code, _ = run(FakeLlama().fail(error="boom"), "hello", False)
    assert code == 1


def test_an_interactive_session_that_reaches_its_end_is_exit_0() -> None:
    fake = FakeLlama().reply("One.").fail(cut_after=1).reply("broken")
    code, screen = run(fake, "first", True, "second")
    assert "── StreamClosedEarlyError" in screen
    assert code == 0


def test_an_embedded_server_that_cannot_start_is_exit_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(tmp_path / "no-such-llama-server"))
    view = ConsoleView(Console(file=io.StringIO()))
    code = chat_main(ChatOptions(), ["hello"], False, view, asker(), tmp_path / "m.gguf")
    assert code == 4
    assert "the embedded llama-server could not start: llama-server not found" in (
        capsys.readouterr().err)


def test_replay_of_something_else_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from llamaclient._cli import main

    assert main(["replay", "/no/such/file.http"]) == 2
    assert main(["replay", __file__]) == 2
    err = capsys.readouterr().err
    assert "cannot replay /no/such/file.http" in err
    assert "no '>>> request' line" in err


def test_several_prompts_are_the_turns_of_one_conversation() -> None:
    """``chat A B``: B goes with A's answer exactly as it arrived (so the prompt cache
    reuses the first prompt), and the screen shows B as if typed at ``you>``."""
    fake = FakeLlama().reply("The sea is big.", reasoning="Hm.").reply("Yes.")
    code, screen = run(fake, ["Tell me of the sea.", "Really?"], False, system="Be brief.")
    assert code == 0
    assert fake.requests[1].messages == [
        SystemMessage("Be brief."), UserMessage("Tell me of the sea."),
        AssistantMessage("The sea is big.", "Hm."), UserMessage("Really?"),
    ]
    assert "\nyou> Really?\n" in screen
    assert "Tell me of the sea." not in screen  # the first one is on the command line
    finish = [line for line in screen.splitlines() if line.startswith("── finish")]
    assert len(finish) == 2
    assert ", 0 cached" in finish[0]
    assert ", 0 cached" not in finish[1]


def test_a_failed_turn_ends_a_conversation_of_given_prompts() -> None:
    fake = FakeLlama().fail(error="boom").reply("never")
    code, _ = run(fake, ["one", "two"], False)
    assert code == 1
    assert len(fake.requests) == 1


def chat_args(*argv: str) -> ChatOptions:
    from llamaclient._cli import parser
    from llamaclient._cli.options import chat_options

    return chat_options(parser().parse_args(["chat", *argv]))


@pytest.mark.parametrize("where", ["option", "environment"])
def test_chat_sends_the_api_key(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--api-key`` (or ``LLAMA_API_KEY``) goes to the server, as a bearer token, on every
    turn; the screen never shows it."""
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    fake = FakeLlama(api_key=KEY).reply("One.").reply("Two.")
    if where == "option":
        options = chat_args("--url", fake.url, "--api-key", KEY)
    else:
        monkeypatch.setenv("LLAMA_API_KEY", KEY)
        options = chat_args("--url", fake.url)
    options.transport = fake.transport()
    out = io.StringIO()
    view = ConsoleView(Console(file=out, width=100, color_system=None))
    assert chat_main(options, ["first", "second"], False, view, asker()) == 0
    assert [r.headers["authorization"] for r in fake.requests] == [f"Bearer {KEY}"] * 2
    assert KEY not in out.getvalue()
    assert KEY not in repr(options)


def test_without_the_key_the_chat_fails_naming_the_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    fake = FakeLlama(api_key=KEY).reply("One.")
    options = chat_args("--url", fake.url)
    options.transport = fake.transport()
    out = io.StringIO()
    view = ConsoleView(Console(file=out, width=100, color_system=None))
    assert chat_main(options, ["first"], False, view, asker()) == 1
    assert "── AuthenticationError: HTTP 401 authentication_error: Invalid API Key" in (
        out.getvalue())


@pytest.mark.parametrize(("flag", "levels"), [("-v", {"INFO"}), ("-vv", {"INFO", "DEBUG"})])
def test_verbose_logs_each_turn_to_stderr_and_never_the_key(
    flag: str, levels: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``-v``: one INFO line per turn; ``-vv``: each request and decision too (DEBUG)."""
    import logging

    from llamaclient._cli import parser
    from llamaclient._cli.app import _logs

    args = parser().parse_args(["chat", flag, "hi"])
    assert args.verbose == len(flag) - 1
    logger = logging.getLogger("llamaclient")
    handlers, level = list(logger.handlers), logger.level
    try:
        _logs(args.verbose)
        fake = FakeLlama(api_key=KEY).reply("One.")
        options = chat_args("--url", fake.url, "--api-key", KEY)
        options.transport = fake.transport()
        view = ConsoleView(Console(file=io.StringIO(), width=100, color_system=None))
        assert chat_main(options, ["first"], False, view, asker()) == 0
    finally:
        logger.handlers[:], logger.level = handlers, level
    err = capsys.readouterr().err
    assert {line.split(" ")[0] for line in err.splitlines()} == levels
    assert "INFO llamaclient.turn: chat " in err
    assert KEY not in err
    assert "One." not in err
