"""``reasoning_effort`` and ``max_time``: sent as llama-server reads them; an effort the
chat template cannot render (``/props``' ``supports_reasoning_effort`` false) is refused
before sending, asked once per client; a template that says nothing is not judged."""

from __future__ import annotations

import msgspec
import pytest

from llamaclient import ChatRequest, Config, UnsupportedInputError, UserMessage, build_body
from llamaclient._turn.known import Known
from tests.turn.script import Server, drive, turn


def props(**caps: bool) -> tuple[int, bytes]:
    return 200, msgspec.json.encode({"chat_template_caps": caps, "total_slots": 1})


def ask(effort: str | None = "low") -> ChatRequest:
    return ChatRequest([UserMessage("hi")], reasoning_effort=effort)  # type: ignore[arg-type]


def test_the_body_carries_them_as_llama_server_reads_them() -> None:
    request = ChatRequest([UserMessage("hi")], reasoning_effort="high", max_time=2.5)
    body = msgspec.json.decode(build_body(Config("http://h:1"), request))
    assert (body["reasoning_effort"], body["t_max_predict_ms"]) == ("high", 2500)
    plain = msgspec.json.decode(build_body(Config("http://h:1"), ChatRequest([UserMessage("x")])))
    assert "reasoning_effort" not in plain
    assert "t_max_predict_ms" not in plain


def test_an_effort_the_template_cannot_render_is_refused_before_sending() -> None:
    known = Known()
    server = Server(calls={"/props": [props(supports_reasoning_effort=False)]})
    run = drive(turn(ask(), known=known), server)
    assert isinstance(run.done.error, UnsupportedInputError)
    assert run.done.error.modality == "reasoning_effort"
    assert run.paths() == ["/props"]
    again = drive(turn(ask(), known=known), Server())
    assert again.paths() == []  # asked once
    assert drive(turn(ask(None), known=known), Server()).done.completion is not None


@pytest.mark.parametrize("caps", [{"supports_reasoning_effort": True}, {}])
def test_a_template_that_renders_it_or_says_nothing_lets_it_go(caps: dict[str, bool]) -> None:
    run = drive(turn(ask()), Server(calls={"/props": [props(**caps)]}))
    assert run.done.completion is not None
    assert run.paths() == ["/props", "/v1/chat/completions"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"reasoning_effort": "extreme"}, "ChatRequest.reasoning_effort must be one of"),
        ({"max_time": 0}, "ChatRequest.max_time must be a number > 0, not 0"),
    ],
)
def test_bad_values_are_refused_at_construction(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ChatRequest([UserMessage("hi")], **fields)  # type: ignore[arg-type]
