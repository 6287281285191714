"""Affinity a load balancer can use (issue 24 part 1): every request of a turn carries the
same session header, so a balancer that hashes on it sends the chat, its resume, its cancel
and its looks to one backend. The header is the request's ``session``, else the stream's
conversation id; ``Config.session_header`` names it (None: not sent); the calls a client's
turns share (``/models``, ``/props``) carry none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llamaclient import ChatRequest, Config, UserMessage
from llamaclient._protocol.affinity import cookie_value, session_value
from llamaclient._turn.commands import Call, Send
from llamaclient._turn.known import Known
from llamaclient._turn.plan import Target
from llamaclient._types.events import Routed
from tests.support import streams
from tests.support.streams import ROLE, chunk, timings
from tests.turn.script import (
    Answer,
    Fail,
    Run,
    Server,
    config,
    drive,
    split_events,
    stream_body,
    turn,
)

CUT = stream_body(streams.answer_only())
THINKING = stream_body(
    [chunk(ROLE)]
    + [chunk({"reasoning_content": f"r{i}"}, timings=timings(i + 1)) for i in range(4)]
)
MODELS = b'{"data":[{"id":"m","aliases":[],"status":{"value":"unloaded"}}]}'
LOADED = b'{"data":[{"id":"m","aliases":[],"status":{"value":"loaded"}}]}'

# Each: what the request adds, the config's fields, the plan's, the scripted server.
SCENARIOS: dict[
    str, Callable[[], tuple[dict[str, Any], dict[str, Any], dict[str, Any], Server]]
] = {
    "plain stream": lambda: ({}, {}, {}, Server()),
    "cut and resumed": lambda: (
        {},
        {},
        {},
        Server([Answer(body=[CUT[:300], Fail("read", "cut")])], session=CUT),
    ),
    "unanswered: the lookup": lambda: (
        {},
        {},
        {},
        Server(
            [Fail("read", "closed"), Answer(404, {}, [b""]), streams_answer()],
            {"/v1/streams/lookup": [(200, b"")]},
        ),
    ),
    "loading: the health wait": lambda: (
        {},
        {},
        {},
        Server(
            [
                Answer(503, {}, [b'{"error":{"code":503,"message":"Loading model"}}']),
                streams_answer(),
            ],
            {"/health": [(503, b""), (200, b"")]},
        ),
    ),
    "pinned slot: the slot look": lambda: (
        {"slot": 1},
        {},
        {},
        Server(calls={"/slots": [(200, b'[{"is_processing":false},{"is_processing":false}]')]}),
    ),
    "thinking capped: the control call": lambda: (
        {"thinking_budget": 1},
        {"thinking_grace": 1},
        {},
        Server(
            [Answer(body=split_events(THINKING))],
            {"/v1/chat/completions/control": [(200, b'{"success":true}')]},
        ),
    ),
    "router: look (shared) and load (the turn's)": lambda: (
        {},
        {"model": "m"},
        {},
        Server(calls={"/models": [(200, MODELS), (200, LOADED)], "/models/load": [(200, b"")]}),
    ),
}


def streams_answer() -> Answer:
    return Answer(body=[stream_body(streams.answer_only())])


def run(name: str, session: str | None, **conf: Any) -> Run:
    fields, conf_fields, plan, server = SCENARIOS[name]()
    request = ChatRequest([UserMessage("q")], session=session, **fields)
    return drive(turn(request, conf=config(**conf_fields, **conf), **plan), server)


def requests(result: Run) -> list[Send | Call]:
    return [c for c in result.commands if isinstance(c, Send | Call)]


@pytest.mark.parametrize("name", list(SCENARIOS))
@pytest.mark.parametrize("session", ["agent-7", None])
def test_every_request_of_the_turn_carries_its_affinity(name: str, session: str | None) -> None:
    result = run(name, session)
    expected = ("X-Session-Id", session or "c0ffee")
    sent = requests(result)
    assert len(sent) >= 1
    for command in sent:
        if isinstance(command, Call) and command.shared:
            assert command.headers == ()  # the client's, not the turn's
        else:
            assert expected in command.headers, command
    if name == "plain stream":
        [send] = sent
        assert send.headers == (expected, ("X-Conversation-Id", "c0ffee"))


def test_the_scenarios_make_every_kind_of_request_a_turn_makes() -> None:
    """So the test above covers each: the chat, the resume and its lookup, the health wait,
    the slot look, the control call, the router's look and load (the cancel: below)."""
    paths = {c.path.split("?")[0] for name in SCENARIOS for c in requests(run(name, "s"))}
    assert paths == {
        "/v1/chat/completions",
        "/v1/stream",
        "/v1/streams/lookup",
        "/health",
        "/slots",
        "/v1/chat/completions/control",
        "/models",
        "/models/load",
    }


def test_the_cancel_on_stop_carries_it() -> None:
    result = drive(turn(ChatRequest([UserMessage("q")], session="s")), Server(), stop_after=3)
    [delete] = [c for c in requests(result) if c.method == "DELETE"]
    assert isinstance(delete, Call)
    assert delete.headers == (("X-Session-Id", "s"),)
    assert delete.quiet is not None


def test_no_session_and_no_resume_sends_no_header() -> None:
    result = drive(turn(conversation_id=None), Server())
    [send] = requests(result)
    assert send.headers == ()


def test_the_header_name_is_the_configs_and_none_turns_it_off() -> None:
    [send] = requests(run("plain stream", "s", session_header="X-Affinity"))
    assert send.headers[0] == ("X-Affinity", "s")
    [send] = requests(run("plain stream", "s", session_header=None))
    assert send.headers == (("X-Conversation-Id", "c0ffee"),)


def test_a_session_that_cannot_be_a_header_value_is_sent_as_its_hash() -> None:
    [send] = requests(run("plain stream", "a\r\nX-Injected: 1"))
    name, value = send.headers[0]
    assert name == "X-Session-Id"
    assert value.startswith("sha256:")
    assert len(value) == 7 + 32
    assert value == session_value("a\r\nX-Injected: 1")  # the same session, the same value
    assert session_value("é") != session_value("e")
    assert session_value("x" * 128) == "x" * 128
    assert session_value("x" * 129).startswith("sha256:")
    assert session_value(" lead") != " lead"
    assert session_value("a  b") != "a  b"
    assert session_value("user 42") == "user 42"


def test_a_pools_turn_takes_the_chosen_servers_header() -> None:
    target = Target(config(base_url="http://s1", session_header="X-Backend-Key"), Known(), b"{}", 1)
    result = drive(
        turn(ChatRequest([UserMessage("q")], session="s"), pooled=True),
        Server(routes=[(target, Routed("http://s1", None, "new session"))]),
    )
    [send] = requests(result)
    assert send.headers[0] == ("X-Backend-Key", "s")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("", None),
        ("SRV=s1", "s1"),
        ("SRV=s1; Path=/; HttpOnly", "s1"),
        ('SRV="s1"', "s1"),
        ("other=1; Expires=Wed, 21 Oct 2015 07:28:00 GMT, SRV=s2; Path=/", "s2"),
        ("SRV=s1; Expires=Wed, 21 Oct 2015 07:28:00 GMT, SRV=s3", "s3"),
        ("SRV=; Path=/", ""),
        ("SRV=s1; Max-Age=0", ""),
        ("SRV=s1; max-age=-5", ""),
        ("SRV=s1; Max-Age=60", "s1"),
        ("XSRV=s1, SRVX=s2", None),
        ("SRV=a b", None),  # not a cookie's bytes: not taken
        ("SRV=s1\\", None),
        ("srv=s1", None),  # cookie names are case-sensitive
    ],
)
def test_the_affinity_cookie_is_read_from_set_cookie(
    header: str | None, expected: str | None
) -> None:
    assert cookie_value(header, "SRV") == expected


def test_config_checks_the_names() -> None:
    for field in ("session_header", "affinity_cookie"):
        for bad in ("", "a b", "X:y", "é", 5):
            with pytest.raises(ValueError, match=field):
                Config("http://x", **{field: bad})  # type: ignore[arg-type]
    assert Config("http://x").session_header == "X-Session-Id"
    assert Config("http://x").affinity_cookie is None
