"""ChatTurn, the stages before the chat: the inputs the server takes (``/props``), a router's
model made ready (``/models``: look, load, watch, each with the chat's own retries and
waits), the pinned slot's line and busy check (``/slots``). Synchronous."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from llamaclient import (
    BusyError,
    ChatRequest,
    ConnectError,
    Content,
    HTTPStatusError,
    ImagePart,
    LoadTimeoutError,
    ModelLoadError,
    ModelLoading,
    ModelNotFoundError,
    Queued,
    Retrying,
    UnsupportedInputError,
    UserMessage,
    Waiting,
    WaitTimeoutError,
)
from llamaclient._turn.before import watch_step
from llamaclient._turn.commands import Arm, Call, Leave, Line, Send
from llamaclient._turn.known import Known
from llamaclient._types.models import ModelInfo
from llamaclient._types.server import Modalities
from tests.turn.script import (
    FIRE,
    CallAnswer,
    Fail,
    Server,
    answer,
    config,
    drive,
    status,
    turn,
)

PICTURE = ChatRequest([UserMessage([ImagePart(url="https://x/a.png")])])
LOADING = (503, b'{"error":{"code":503,"message":"Loading model"}}')


def props(**modalities: bool) -> tuple[int, bytes]:
    return 200, msgspec.json.encode({"total_slots": 1, "modalities": modalities})


# -- the inputs the server takes ------------------------------------------------------------
def test_a_request_without_media_asks_nothing() -> None:
    assert drive(turn(), Server()).paths() == ["/v1/chat/completions"]


def test_a_picture_for_a_server_without_vision_fails_before_anything_is_sent() -> None:
    known = Known()
    run = drive(
        turn(PICTURE, media=frozenset({"vision"}), known=known),
        Server(calls={"/props": [props(vision=False)]}),
    )
    error = run.done.error
    assert isinstance(error, UnsupportedInputError)
    assert error.modality == "vision"
    assert run.paths() == ["/props"]
    assert (known.media_known, known.modalities) == (True, Modalities(vision=False))
    [call] = run.sent(Call)
    assert call.shared  # first turns that overlap share one /props


def test_what_was_learnt_is_not_asked_again() -> None:
    known = Known()
    known.media_known = True
    known.modalities = Modalities(vision=True)
    run = drive(turn(PICTURE, media=frozenset({"vision"}), known=known), Server())
    assert run.paths() == ["/v1/chat/completions"]
    known.modalities = Modalities(vision=False)
    assert isinstance(
        drive(turn(PICTURE, media=frozenset({"vision"}), known=known), Server()).done.error,
        UnsupportedInputError,
    )


@pytest.mark.parametrize(
    "answer", [(200, b'{"total_slots": 1}'), (404, b""), (200, b"not json"), (200, b"[1]")]
)
def test_a_server_that_cannot_say_is_not_judged(answer: object) -> None:
    known = Known()
    server = Server(calls={"/props": [answer]})  # type: ignore[list-item]
    run = drive(turn(PICTURE, media=frozenset({"vision"}), known=known), server)
    assert run.done.completion is not None
    assert (known.media_known, known.modalities) == (True, None)


def test_a_server_error_is_not_judged_and_asked_again_next_turn() -> None:
    """Down or broken for a moment is not "this server cannot say", for the client's life."""
    known = Known()
    server = Server(calls={"/props": [(500, b""), props(vision=False)]})
    first = drive(turn(PICTURE, media=frozenset({"vision"}), known=known), server)
    assert first.done.completion is not None
    assert known.media_known is False
    second = drive(turn(PICTURE, media=frozenset({"vision"}), known=known), server)
    assert isinstance(second.done.error, UnsupportedInputError)


def test_the_props_look_gets_the_chats_retries_and_loading_wait() -> None:
    calls: dict[str, list[CallAnswer]] = {
        "/props": [Fail("connect", "refused"), (502, b""), LOADING, props(vision=True)],
        "/health": [(200, b"")],
    }
    known = Known()
    run = drive(turn(PICTURE, media=frozenset({"vision"}), known=known), Server(calls=calls))
    assert [type(e) for e in before(run)] == [Retrying, Retrying, Waiting]
    assert run.done.completion is not None
    assert (known.media_known, known.modalities) == (True, Modalities(vision=True))


@pytest.mark.parametrize("kind", ["read", "protocol", "timeout", "disconnected"])
def test_a_props_look_that_breaks_otherwise_leaves_the_request_unjudged(kind: str) -> None:
    """Not this server's answer about its inputs: the request goes, and is asked about again
    next turn."""
    known = Known()
    server = Server(calls={"/props": [Fail(kind)]})
    run = drive(turn(PICTURE, media=frozenset({"vision"}), known=known), server)
    assert run.done.completion is not None
    assert run.paths() == ["/props", "/v1/chat/completions"]
    assert known.media_known is False


def test_a_props_look_that_cannot_reach_the_server_fails_after_the_retries() -> None:
    server = Server(calls={"/props": [Fail("connect", "refused")]})
    run = drive(turn(PICTURE, media=frozenset({"vision"}), conf=config(max_retries=1)), server)
    assert isinstance(run.done.error, ConnectError)
    assert str(run.done.error) == "GET /props: refused"
    assert run.paths() == ["/props", "/props"]


def test_the_props_look_names_the_routers_model() -> None:
    known = Known()
    known.router = False
    run = drive(
        turn(PICTURE, media=frozenset({"vision"}), conf=config(model="m a"), known=known), Server()
    )
    assert run.paths()[0] == "/props?model=m%20a"


# -- a router's model -----------------------------------------------------------------------
def models(*entries: tuple[str, str]) -> tuple[int, bytes]:
    data = [{"id": name, "aliases": [], "status": {"value": status}} for name, status in entries]
    return 200, msgspec.json.encode({"data": data})


PLAIN = (200, b'{"data":[{"id":"x.gguf","object":"model"}]}')


def before(run: object) -> list[object]:
    """The events before the answer."""
    return [e for e in run.events if not isinstance(e, Content)]  # type: ignore[attr-defined]


def routed(calls: Any, **conf: object) -> tuple[Known, Any]:
    known = Known()
    run = drive(turn(conf=config(model="m", **conf), known=known), Server(calls=calls))
    return known, run


def test_a_plain_server_is_learnt_once() -> None:
    known, run = routed({"/models": [PLAIN]})
    assert known.router is False
    assert run.paths() == ["/models", "/v1/chat/completions"]
    again = drive(turn(conf=config(model="m"), known=known), Server())
    assert again.paths() == ["/v1/chat/completions"]


def test_a_ready_model_costs_one_look_and_no_event() -> None:
    known, run = routed({"/models": [models(("m", "loaded"))]})
    assert known.router is True
    assert before(run) == []


def a_router() -> Known:
    known = Known()
    known.router = True
    return known


def test_on_a_known_router_the_chat_goes_first_and_a_running_model_costs_no_look() -> None:
    run = drive(turn(conf=config(model="m"), known=a_router()), Server())
    assert run.paths() == ["/v1/chat/completions?autoload=false"]
    assert before(run) == []
    assert run.done.completion is not None


NOT_LOADED = (400, b'{"error":{"code":400,"message":"model is not loaded","type":"x"}}')


@pytest.mark.parametrize("refusal", [NOT_LOADED, LOADING, (500, b"proxy error: refused")])
def test_a_router_that_refuses_the_chat_sends_the_turn_to_the_look_then_again(
    refusal: tuple[int, bytes],
) -> None:
    """The same events as a look first; the chat goes again (nothing was generated), with
    the request's own autoload."""
    calls: dict[str, list[CallAnswer]] = {
        "/models": [models(("m", "unloaded")), models(("m", "loaded"))],
        "/models/load": [(200, b'{"success":true}')],
    }
    server = Server([status(*refusal), answer()], calls=calls)
    run = drive(turn(conf=config(model="m"), known=a_router()), server)
    assert run.paths() == [
        "/v1/chat/completions?autoload=false",
        "/models",
        "/models/load",
        "/models",
        "/v1/chat/completions",
    ]
    assert before(run) == [
        ModelLoading("m", "unloaded"),
        ModelLoading("m", "loading"),
        ModelLoading("m", "loaded"),
    ]
    assert run.done.completion is not None


@pytest.mark.parametrize("code", [401, 404, 429])
def test_other_answers_to_an_optimistic_chat_are_the_chats_own(code: int) -> None:
    server = Server([status(code, b'{"error":{"code":1,"message":"no"}}')])
    run = drive(turn(conf=config(model="m", max_retries=0), known=a_router()), server)
    assert "/models" not in run.paths()
    assert isinstance(run.done.error, HTTPStatusError)
    assert run.done.error.status == code


def test_autoload_off_sends_the_chat_as_asked_and_never_looks() -> None:
    request = ChatRequest([UserMessage("hi")], autoload=False)
    run = drive(turn(request, conf=config(model="m"), known=a_router()), Server())
    assert run.paths() == ["/v1/chat/completions?autoload=false"]


def test_a_model_not_loaded_is_loaded_and_watched_until_ready() -> None:
    looks = [
        models(("m", "unloaded")),
        models(("m", "loading")),
        models(("m", "loading")),
        models(("m", "loaded")),
    ]
    _, run = routed({"/models": looks, "/models/load": [(200, b'{"success":true}')]})
    assert before(run) == [
        ModelLoading("m", "unloaded"),
        ModelLoading("m", "loading"),
        ModelLoading("m", "loaded"),
    ]
    [load] = [c for c in run.sent(Call) if c.path == "/models/load"]
    assert msgspec.json.decode(load.body) == {"model": "m"}
    assert Arm("load", 5.0) in run.commands


def test_a_model_already_loading_is_only_watched() -> None:
    _, run = routed({"/models": [models(("m", "loading")), models(("m", "loaded"))]})
    assert "/models/load" not in run.paths()


def test_a_model_another_client_loaded_meanwhile_is_watched_all_the_same() -> None:
    looks = [models(("m", "unloaded")), models(("m", "loaded"))]
    already = (400, b'{"error":{"message":"model is already running"}}')
    _, run = routed({"/models": looks, "/models/load": [already]})
    assert before(run) == [ModelLoading("m", "unloaded"), ModelLoading("m", "loaded")]


@pytest.mark.parametrize(
    ("looks", "error"),
    [
        (
            [models(("m", "unloaded")), models(("m", "loading")), models(("m", "unloaded"))],
            ModelLoadError,
        ),
        ([models(("m", "unloaded")), models()], ModelLoadError),
        ([models(("m", "unloaded")), (200, b"junk")], ModelLoadError),
        ([models(("m", "unloaded")), (500, b"")], HTTPStatusError),
        ([models(("m", "unloaded")), Fail("connect")], ConnectError),
        ([models(("m", "unloaded")), FIRE], LoadTimeoutError),
    ],
)
def test_a_load_that_fails_or_outlasts_load_timeout(looks: list[object], error: type) -> None:
    _, run = routed({"/models": looks, "/models/load": [(200, b"")]})
    assert isinstance(run.done.error, error)


def test_a_watch_past_load_timeout_between_looks() -> None:
    known = Known()
    server = Server(calls={"/models": [models(("m", "loading"))]}, sleeps=[FIRE])
    run = drive(turn(conf=config(model="m"), known=known), server)
    assert isinstance(run.done.error, LoadTimeoutError)
    assert str(run.done.error) == "model 'm' was still loading after 5.0 s"


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ((404, b'{"error":{"message":"x"}}'), ModelNotFoundError),
        (Fail("timeout"), WaitTimeoutError),
    ],
)
def test_a_load_the_router_refuses(answer: object, error: type) -> None:
    _, run = routed({"/models": [models(("m", "unloaded"))], "/models/load": [answer]})
    assert isinstance(run.done.error, error)


@pytest.mark.parametrize("entries", [(("other", "unloaded"),), (("m", "unloaded"),)])
def test_unknown_models_and_autoload_off_are_the_chats_to_answer(
    entries: tuple[tuple[str, str], ...],
) -> None:
    request = ChatRequest([UserMessage("q")], autoload=False)
    known = Known()
    run = drive(
        turn(request, conf=config(model="m"), known=known),
        Server(calls={"/models": [models(*entries)]}),
    )
    assert run.paths() == ["/models", "/v1/chat/completions?autoload=false"]


def test_the_look_gets_the_chats_retries_and_loading_wait() -> None:
    calls = {
        "/models": [Fail("connect", "refused"), (502, b""), LOADING, models(("m", "loaded"))],
        "/health": [(200, b"")],
    }
    _, run = routed(calls)
    assert [type(e) for e in before(run)] == [Retrying, Retrying, Waiting]
    assert run.done.completion is not None


def test_a_look_that_cannot_reach_the_server_fails_after_the_retries() -> None:
    _, run = routed({"/models": [Fail("connect", "refused")]}, max_retries=1)
    assert isinstance(run.done.error, ConnectError)
    assert str(run.done.error) == "GET /models: refused"
    _, slow = routed({"/models": [Fail("timeout")]})
    assert isinstance(slow.done.error, WaitTimeoutError)


@pytest.mark.parametrize("answer", [(502, b""), (400, b""), (200, b"junk")])
def test_a_server_whose_models_cannot_be_read_is_taken_for_a_plain_one(answer: object) -> None:
    known, run = routed({"/models": [answer]}, max_retries=0)
    assert known.router is False
    assert run.done.completion is not None


def test_watch_step() -> None:
    loaded = ModelInfo("m", (), "loaded", False, None)
    assert watch_step(None, None) == (None, "gone")
    assert watch_step("loading", loaded) == ("loaded", "ready")
    assert watch_step("loaded", loaded) == (None, "ready")
    assert watch_step(None, ModelInfo("m", (), "unloaded", True, 1)) == ("unloaded", "failed")
    assert watch_step("loading", ModelInfo("m", (), "loading", False, None)) == (None, "wait")


# -- the pinned slot ------------------------------------------------------------------------
def pinned(wait: bool = True, **server: object) -> object:
    request = ChatRequest([UserMessage("q")], slot=1, wait=wait)
    return drive(turn(request), Server(**server))  # type: ignore[arg-type]


def slots(*busy: bool) -> tuple[int, bytes]:
    return 200, msgspec.json.encode([{"id": i, "is_processing": b} for i, b in enumerate(busy)])


def test_a_pinned_request_waits_its_turn_in_the_line() -> None:
    run = pinned(lines=[2, 2, 1, 0], calls={"/slots": [slots(False, False)]})
    assert run.events[:2] == [Queued(2), Queued(1)]  # type: ignore[attr-defined]
    lines = run.sent(Line)  # type: ignore[attr-defined]
    assert [c.ahead for c in lines] == [-1, 2, 2, 1]
    assert run.commands[-2] == Leave(1)  # type: ignore[attr-defined]


def test_a_slot_busy_elsewhere_is_reported_and_the_request_goes() -> None:
    run = pinned(calls={"/slots": [slots(False, True)]})
    assert run.events[0] == Waiting(slot_busy=True)  # type: ignore[attr-defined]
    assert run.done.completion is not None  # type: ignore[attr-defined]


def test_a_slot_busy_elsewhere_with_wait_off_is_a_busy_error() -> None:
    run = pinned(False, calls={"/slots": [slots(False, True)]})
    assert isinstance(run.done.error, BusyError)  # type: ignore[attr-defined]
    assert not run.sent(Send)  # type: ignore[attr-defined]


def test_a_slot_that_still_finishes_our_own_request_is_looked_at_again() -> None:
    run = pinned(False, released=1.4, calls={"/slots": [slots(False, True), slots(False, False)]})
    assert run.done.completion is not None  # type: ignore[attr-defined]
    still = pinned(False, released=1.4, calls={"/slots": [slots(False, True)]})
    assert isinstance(still.done.error, BusyError)  # type: ignore[attr-defined]
    assert len(still.paths()) == 3  # type: ignore[attr-defined]  # two looks, 0.05 s apart


@pytest.mark.parametrize(
    "answer",
    [(501, b""), (200, b"junk"), (200, b"{}"), (200, b"[]"), (200, b"[1]"), Fail("timeout")],
)
def test_a_slots_answer_that_cannot_tell_does_not_block(answer: object) -> None:
    run = pinned(False, calls={"/slots": [answer]})
    assert run.done.completion is not None  # type: ignore[attr-defined]


def test_the_slot_id_wraps_as_the_server_wraps_it() -> None:
    request = ChatRequest([UserMessage("q")], slot=3, wait=False)
    run = drive(turn(request), Server(calls={"/slots": [slots(False, True)]}))
    assert isinstance(run.done.error, BusyError)  # 3 % 2 == 1, the busy one
