"""ChatTurn before the chat, at the edges the other suites leave open (found by mutation
testing, ``devtools/mutation.py turn``): which answers of ``/props``, ``/models`` and
``/slots`` are read at all (an error status is never taken for the facts it would carry),
a router's model list with several models, a model that is downloading, the statuses a
watch shows once each, the errors a load or a watch ends with. Synchronous."""

from __future__ import annotations

import msgspec
import pytest

from llamaclient import (
    BusyError,
    ChatRequest,
    HTTPStatusError,
    ImagePart,
    ModelLoadError,
    ModelLoading,
    ModelNotFoundError,
    UnsupportedInputError,
    UserMessage,
    Waiting,
    WaitTimeoutError,
)
from llamaclient._turn.commands import Arm, Sleep
from llamaclient._turn.known import Known
from tests.turn.script import CallAnswer, Fail, Server, config, drive, status, turn

PICTURE = ChatRequest([UserMessage([ImagePart(url="https://x/a.png")])])
LOADING = (503, b'{"error":{"code":503,"message":"Loading model"}}')
OK = (200, b'{"success":true}')


def models(*entries: tuple[str, str], code: int = 200, alias: str = "") -> CallAnswer:
    """A router's ``GET /models``: ``(id, status)`` per model (the last one has ``alias``)."""
    data = [{"id": name, "aliases": [], "status": {"value": value}} for name, value in entries]
    if alias:
        data[-1]["aliases"] = [alias]
    return code, msgspec.json.encode({"data": data})


def failed_load(exit_code: int) -> CallAnswer:
    entry = {"id": "m", "status": {"value": "unloaded", "failed": True, "exit_code": exit_code}}
    return 200, msgspec.json.encode({"data": [entry]})


def loading_events(run: object) -> list[object]:
    return [e for e in run.events if isinstance(e, ModelLoading)]  # type: ignore[attr-defined]


def on_router(calls: dict[str, list[CallAnswer]], **conf: object) -> tuple[Known, object]:
    known = Known()
    run = drive(turn(conf=config(model="m", **conf), known=known), Server(calls=calls))
    return known, run


# -- /props ---------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [400, 404])
def test_an_error_answer_to_the_props_look_is_never_read_for_modalities(code: int) -> None:
    """A 4xx body that happens to hold ``modalities`` is an error page, not the server's
    props: the request is not judged by it."""
    body = msgspec.json.encode({"total_slots": 1, "modalities": {"vision": False}})
    known = Known()
    run = drive(
        turn(PICTURE, media=frozenset({"vision"}), known=known),
        Server(calls={"/props": [(code, body)]}),
    )
    assert run.done.completion is not None
    assert (known.media_known, known.modalities) == (True, None)


def test_the_last_answer_under_400_is_read_for_modalities() -> None:
    body = msgspec.json.encode({"total_slots": 1, "modalities": {"vision": False}})
    run = drive(turn(PICTURE, media=frozenset({"vision"})), Server(calls={"/props": [(399, body)]}))
    assert isinstance(run.done.error, UnsupportedInputError)


# -- a router's models ----------------------------------------------------------------------
def test_the_turns_model_is_found_among_several_by_id_or_alias() -> None:
    """Only the turn's own model (by id, or by one of its aliases) decides the load."""
    looks = [models(("other", "unloaded"), ("m", "loaded"))]
    _, run = on_router({"/models": looks})
    assert loading_events(run) == []
    assert run.paths() == ["/models", "/v1/chat/completions"]  # type: ignore[attr-defined]
    by_alias = [models(("other", "unloaded"), ("m.gguf", "loaded"), alias="m")]
    _, aliased = on_router({"/models": by_alias})
    assert loading_events(aliased) == []
    assert aliased.paths() == ["/models", "/v1/chat/completions"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("code", [400, 404])
def test_an_error_answer_to_the_models_look_is_not_a_model_list(code: int) -> None:
    """An error status means a plain server (or one without ``/models``), whatever its body
    holds: nothing is loaded."""
    known, run = on_router({"/models": [models(("m", "unloaded"), code=code)]}, max_retries=0)
    assert known.router is False
    assert run.paths() == ["/models", "/v1/chat/completions"]  # type: ignore[attr-defined]
    assert run.done.completion is not None  # type: ignore[attr-defined]


def test_a_model_being_downloaded_is_watched_not_loaded() -> None:
    looks = [models(("m", "downloading")), models(("m", "downloading")), models(("m", "loaded"))]
    _, run = on_router({"/models": looks})
    assert "/models/load" not in run.paths()  # type: ignore[attr-defined]
    assert loading_events(run) == [ModelLoading("m", "downloading"), ModelLoading("m", "loaded")]


def test_each_status_a_watch_sees_is_shown_once() -> None:
    looks = [
        models(("m", "loading")),
        models(("m", "loading")),
        models(("m", "downloading")),
        models(("m", "downloading")),
        models(("m", "downloading")),
        models(("m", "loaded")),
    ]
    _, run = on_router({"/models": looks})
    assert loading_events(run) == [
        ModelLoading("m", "loading"),
        ModelLoading("m", "downloading"),
        ModelLoading("m", "loaded"),
    ]
    assert run.done.completion is not None  # type: ignore[attr-defined]


def test_a_model_already_running_is_watched_from_the_status_the_look_showed() -> None:
    """``already running``: the watch goes on from the look's status, which is not shown
    again; here the model went back to ``unloaded`` (its load failed)."""
    already = (400, b'{"error":{"message":"model is already running"}}')
    looks = [models(("m", "unloaded")), models(("m", "unloaded"))]
    _, run = on_router({"/models": looks, "/models/load": [already]})
    assert loading_events(run) == [ModelLoading("m", "unloaded")]
    error = run.done.error  # type: ignore[attr-defined]
    assert isinstance(error, ModelLoadError)
    assert (error.model, error.exit_code) == ("m", None)


def test_already_running_only_means_so_with_400() -> None:
    already = (500, b'{"error":{"message":"model is already running"}}')
    _, run = on_router({"/models": [models(("m", "unloaded"))], "/models/load": [already]})
    assert isinstance(run.done.error, HTTPStatusError)  # type: ignore[attr-defined]
    assert run.done.error.status == 500  # type: ignore[attr-defined]
    assert run.paths() == ["/models", "/models/load"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("code", [200, 299])
def test_a_load_answered_2xx_is_watched(code: int) -> None:
    looks = [models(("m", "unloaded")), models(("m", "loaded"))]
    _, run = on_router({"/models": looks, "/models/load": [(code, b"")]})
    assert run.done.completion is not None  # type: ignore[attr-defined]


def test_a_load_answered_300_is_an_error() -> None:
    _, run = on_router({"/models": [models(("m", "unloaded"))], "/models/load": [(300, b"")]})
    assert isinstance(run.done.error, HTTPStatusError)  # type: ignore[attr-defined]
    assert run.done.error.status == 300  # type: ignore[attr-defined]


def test_a_load_of_an_unknown_model_names_it() -> None:
    """The router's 404 on its own load route: the model is unknown."""
    refused = (404, b'{"error":{"message":"model not found"}}')
    _, run = on_router({"/models": [models(("m", "unloaded"))], "/models/load": [refused]})
    error = run.done.error  # type: ignore[attr-defined]
    assert isinstance(error, ModelNotFoundError)
    assert error.status == 404


def test_a_failed_load_names_the_model_and_the_exit_code() -> None:
    looks = [models(("m", "unloaded")), models(("m", "loading")), failed_load(3)]
    _, run = on_router({"/models": looks, "/models/load": [OK]})
    error = run.done.error  # type: ignore[attr-defined]
    assert isinstance(error, ModelLoadError)
    assert (error.model, error.exit_code) == ("m", 3)
    assert str(error) == "the router could not load model 'm' (exit code 3)"


def test_a_model_gone_from_the_list_while_watched_has_no_exit_code() -> None:
    looks = [models(("m", "unloaded")), models(("other", "loaded"))]
    _, run = on_router({"/models": looks, "/models/load": [OK]})
    error = run.done.error  # type: ignore[attr-defined]
    assert isinstance(error, ModelLoadError)
    assert (error.model, error.exit_code) == ("m", None)


@pytest.mark.parametrize("code", [400, 404])
def test_an_error_answer_while_watching_fails_the_turn(code: int) -> None:
    looks = [models(("m", "unloaded")), models(("m", "loaded"), code=code)]
    _, run = on_router({"/models": looks, "/models/load": [OK]})
    assert isinstance(run.done.error, HTTPStatusError)  # type: ignore[attr-defined]
    assert run.done.error.status == code  # type: ignore[attr-defined]


def test_a_watch_answered_399_is_read() -> None:
    looks = [models(("m", "unloaded")), models(("m", "loaded"), code=399)]
    _, run = on_router({"/models": looks, "/models/load": [OK]})
    assert run.done.completion is not None  # type: ignore[attr-defined]


def test_a_slow_load_or_watch_is_a_wait_timeout_naming_the_exchange_and_the_bound() -> None:
    _, load = on_router(
        {"/models": [models(("m", "unloaded"))], "/models/load": [Fail("timeout")]},
        wait_timeout=7.0,
    )
    assert isinstance(load.done.error, WaitTimeoutError)  # type: ignore[attr-defined]
    assert str(load.done.error) == "POST /models/load: no answer within 7.0 s"  # type: ignore[attr-defined]
    _, watch = on_router(
        {"/models": [models(("m", "unloaded")), Fail("timeout")], "/models/load": [OK]},
        wait_timeout=7.0,
    )
    assert isinstance(watch.done.error, WaitTimeoutError)  # type: ignore[attr-defined]
    assert str(watch.done.error) == "GET /models: no answer within 7.0 s"  # type: ignore[attr-defined]


def test_the_whole_wait_for_a_model_is_armed_once() -> None:
    """The watch armed ``load_timeout``; a chat that then finds the model still loading
    (503) waits within the same bound: no second ``Arm``."""
    looks = [models(("m", "unloaded")), models(("m", "loaded"))]
    calls: dict[str, list[CallAnswer]] = {
        "/models": looks,
        "/models/load": [OK],
        "/health": [(200, b"")],
    }
    server = Server([status(*LOADING), Server().sends[0]], calls=calls)
    run = drive(turn(conf=config(model="m"), known=Known()), server)
    assert run.done.completion is not None
    assert [c for c in run.commands if isinstance(c, Arm)] == [Arm("load", 5.0)]
    assert Waiting(slot_busy=False) in run.events
    assert Sleep(0.05, "load") in run.commands


# -- the pinned slot ------------------------------------------------------------------------
def _slots(*busy: bool, code: int = 200) -> CallAnswer:
    return code, msgspec.json.encode([{"id": i, "is_processing": b} for i, b in enumerate(busy)])


@pytest.mark.parametrize("code", [400, 404])
def test_an_error_answer_to_the_slots_look_does_not_block(code: int) -> None:
    request = ChatRequest([UserMessage("q")], slot=0, wait=False)
    run = drive(turn(request), Server(calls={"/slots": [_slots(True, code=code)]}))
    assert run.done.completion is not None


def test_a_slots_answer_under_400_is_read() -> None:
    request = ChatRequest([UserMessage("q")], slot=0, wait=False)
    run = drive(turn(request), Server(calls={"/slots": [_slots(True, code=399)]}))
    assert isinstance(run.done.error, BusyError)
    assert str(run.done.error) == "slot 0 is busy"
    assert run.paths() == ["/slots"]  # refused before the chat was sent


def test_a_load_the_router_could_not_start_names_the_turns_model() -> None:
    body = b'{"error":{"code":500,"message":"failed to load model, model name=m"}}'
    _, run = on_router({"/models": [models(("m", "unloaded"))], "/models/load": [(500, body)]})
    error = run.done.error  # type: ignore[attr-defined]
    assert isinstance(error, ModelLoadError)
    assert (error.model, error.exit_code) == ("m", None)
