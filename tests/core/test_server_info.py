"""Typed server info from real ``/props`` and ``/slots`` answers (``recordings/``), the error
envelope's fields on ``HTTPStatusError``, and llama-server's refusal of an image mapped to
``UnsupportedInputError``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devtools.recording import load
from llamaclient import (
    ContextOverflowError,
    HTTPStatusError,
    InferError,
    Modalities,
    Props,
    ProtocolError,
    Slot,
    TemplateCaps,
    UnsupportedInputError,
)
from llamaclient._protocol.info import metrics_from, props_from, slots_from
from llamaclient._protocol.status import status_error
from llamaclient._turn.secret import hide_key

RECORDINGS = Path(__file__).parents[2] / "recordings"


def recorded(name: str) -> Any:
    return json.loads(load(RECORDINGS / f"{name}.http").body)


def test_props_from_a_real_answer() -> None:
    raw = recorded("props")
    props = props_from(raw)
    assert props.raw == raw
    assert props.n_ctx == raw["default_generation_settings"]["n_ctx"] == 4096
    assert props.total_slots == 2
    assert props.model_alias == "scripted"
    assert props.model_path is not None
    assert props.model_path.endswith(".gguf")
    assert props.modalities == Modalities(vision=False, audio=False, video=False)
    assert props.chat_template_caps.supports_tools is True
    assert props.chat_template_caps.supports_preserve_reasoning is True
    assert props.chat_template_caps.supports_reasoning_effort is False
    assert props.chat_template is not None
    assert "<|im_start|>" in props.chat_template
    assert (props.bos_token, props.eos_token) == ("<|endoftext|>", "<|im_end|>")
    assert props.build_info == "b0-unknown"
    assert props.is_sleeping is False
    params = props.default_generation_settings.params
    assert params is not None
    assert params["top_k"] == 40
    # Unmodelled fields are in raw, and the old dict access still works.
    assert props["media_marker"] == raw["media_marker"]
    assert props.get("endpoint_slots") is True
    assert props.get("no such field", 7) == 7


def test_slots_from_a_real_answer() -> None:
    raw = recorded("slots")
    slots = slots_from(raw)
    assert [s.id for s in slots] == [0, 1]
    used, idle = slots
    assert (used.n_ctx, used.is_processing, used.speculative) == (4096, False, False)
    assert used.id_task is not None
    assert used.n_prompt_tokens is not None
    assert used.n_prompt_tokens > 0
    assert used.n_prompt_tokens_processed is not None
    assert used.n_prompt_tokens_cache is not None
    assert used.n_decoded == raw[0]["next_token"][0]["n_decoded"]
    assert used.n_remain == -1
    assert used.params["stream"] is True
    # A slot that never had a task has only the four fields.
    assert (idle.id_task, idle.n_prompt_tokens, idle.n_decoded, idle.n_remain) == (None,) * 4
    assert [s.raw for s in slots] == raw
    assert idle["is_processing"] is False


def test_a_sparse_answer_takes_the_defaults() -> None:
    assert props_from({}) == Props(raw={})
    assert props_from({}).modalities == Modalities()
    assert props_from({}).chat_template_caps == TemplateCaps()
    assert slots_from([{"id": 3}]) == [Slot(id=3, raw={"id": 3})]


def test_a_routers_own_props_decode() -> None:
    """A router answers ``/props`` without ``?model=`` itself, with ``params`` null (the
    answer of a real llama-server router, from tests/live/test_router_live.py)."""
    raw = json.loads(
        b'{"role":"router","max_instances":1,"models_autoload":true,"model_alias":"llama-server",'
        b'"model_path":"none","default_generation_settings":{"params":null,"n_ctx":0},'
        b'"ui_settings":{},"build_info":"b0-unknown","cors_proxy_enabled":false}'
    )
    props = props_from(raw)
    assert props.default_generation_settings.params is None
    assert props["role"] == "router"


def test_a_field_named_raw_does_not_replace_ours() -> None:
    props = props_from({"raw": 5, "total_slots": 1})
    assert props.raw == {"raw": 5, "total_slots": 1}
    assert props.total_slots == 1


@pytest.mark.parametrize(
    ("call", "answer", "message"),
    [
        (props_from, [], "GET /props: the answer is not a JSON object"),
        (props_from, {"total_slots": "two"}, "GET /props: Expected `int`, got `str`"),
        (props_from, {"modalities": {"vision": 1}}, "Expected `bool`, got `int`"),
        (slots_from, {}, "GET /slots: the answer is not a list of objects"),
        (slots_from, [1], "GET /slots: the answer is not a list of objects"),
        (slots_from, [{"n_ctx": 1}], "Object missing required field `id`"),
    ],
)
def test_an_answer_of_the_wrong_shape_is_a_protocol_error(
    call: Any, answer: Any, message: str
) -> None:
    with pytest.raises(ProtocolError, match=message.replace("[", r"\[")):
        call(answer)


# -- HTTPStatusError fields ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "kind", "code", "text"),
    [
        ("validation_error", "invalid_request_error", 400, "Invalid tool_choice: bogus"),
        ("validation_error_500", "server_error", 500, "Unknown reasoning format: bogus"),
        ("not_found", "not_found_error", 404, "File Not Found"),
        ("context_overflow", "exceed_context_size_error", 400, "request ("),
    ],
)
def test_the_envelope_fields_of_real_error_bodies(
    name: str, kind: str, code: int, text: str
) -> None:
    recording = load(RECORDINGS / f"{name}.http")
    error = status_error(recording.status, recording.body)
    assert isinstance(error, HTTPStatusError)
    assert (error.type, error.code, error.status) == (kind, code, recording.status)
    assert error.message is not None
    assert error.message.startswith(text)
    assert error.body == recording.body.decode()
    assert str(error) == f"HTTP {code} {kind}: {error.message}"


def test_the_overflow_error_keeps_its_numbers_and_gets_the_fields() -> None:
    recording = load(RECORDINGS / "context_overflow.http")
    error = status_error(recording.status, recording.body)
    assert isinstance(error, ContextOverflowError)
    assert error.n_prompt_tokens > error.n_ctx > 0
    assert error.message is not None
    assert "exceeds the available context size" in error.message


@pytest.mark.parametrize(
    "body",
    [
        b"<html>Bad Gateway</html>",
        b'{"error": "no"}',
        b"",
    ],
)
def test_a_body_that_is_not_the_envelope_leaves_the_fields_none(body: bytes) -> None:
    error = status_error(502, body)
    assert isinstance(error, HTTPStatusError)
    assert (error.message, error.type, error.code) == (None, None, None)
    assert str(error) == f"HTTP 502: {body.decode()}"


def test_an_envelope_without_a_message_keeps_its_code_and_shows_the_body() -> None:
    """A string code is a code (OpenAI, Groq, LiteLLM); with no message, the text is the
    body's."""
    body = b'{"error": {"code": "x"}}'
    error = status_error(502, body)
    assert isinstance(error, HTTPStatusError)
    assert (error.message, error.type, error.code) == (None, None, "x")
    assert str(error) == f"HTTP 502: {body.decode()}"


def test_the_disabled_feature_body_has_no_code() -> None:
    body = b'{"error":{"message":"this feature is disabled","type":"feature_disabled"}}'
    error = status_error(403, body)
    assert isinstance(error, HTTPStatusError)
    assert (error.message, error.type, error.code) == (
        "this feature is disabled",
        "feature_disabled",
        None,
    )
    assert str(error) == "HTTP 403 feature_disabled: this feature is disabled"


def test_str_stays_short_whatever_the_message() -> None:
    message = "m" * 100_000
    body = json.dumps({"error": {"code": 500, "message": message, "type": "server_error"}})
    error = status_error(500, body.encode())
    assert isinstance(error, HTTPStatusError)
    assert error.message == message
    assert len(str(error)) < 600


def test_the_key_is_hidden_in_every_field() -> None:
    key = "sk-secret-key-0123456789"
    body = json.dumps({"error": {"code": 401, "message": f"bad key {key}", "type": key}})
    error = status_error(401, body.encode())
    hide_key(error, key)
    assert isinstance(error, HTTPStatusError)
    for text in (str(error), error.body, error.message, error.type, repr(error.args)):
        assert text is not None
        assert key not in text
        assert key[:12] not in text


# -- the server's refusal of an image ------------------------------------------------------------
def test_the_servers_image_refusal_is_an_unsupported_input_error() -> None:
    recording = load(RECORDINGS / "image_unsupported.http")
    error = status_error(recording.status, recording.body)
    assert isinstance(error, UnsupportedInputError)
    assert isinstance(error, InferError)
    assert (error.modality, error.status) == ("vision", 500)
    assert error.message.startswith("image input is not supported - hint:")
    assert error.body == recording.body.decode()
    assert str(error) == error.message


@pytest.mark.parametrize(("word", "modality"), [("audio", "audio"), ("video", "video")])
def test_the_audio_and_video_refusals_too(word: str, modality: str) -> None:
    # The same message, from the same function (server-common.cpp, oaicompat_content_load_media).
    hint = "if this is unexpected, you may need to provide the mmproj"
    message = f"{word} input is not supported - hint: {hint}"
    body = json.dumps({"error": {"code": 500, "message": message, "type": "server_error"}})
    error = status_error(500, body.encode())
    assert isinstance(error, UnsupportedInputError)
    assert error.modality == modality


def test_a_message_that_only_mentions_images_is_not_a_refusal() -> None:
    body = b'{"error":{"code":500,"message":"failed: image input is not supported","type":"x"}}'
    assert type(status_error(500, body)) is HTTPStatusError


def test_metrics_text_is_read_sample_by_sample() -> None:
    text = (
        b"# HELP llamacpp:requests_processing Number of requests processing.\n"
        b"# TYPE llamacpp:requests_processing gauge\n"
        b"llamacpp:requests_processing 2\n"
        b'llamacpp:tokens{slot="0"} 7.5 1700000000\n'
        b"\n"
        b"not_a_sample\n"
        b"llamacpp:bad nan-ish\n"
        b'llamacpp:empty{x="y"}\n'
    )
    assert metrics_from(text) == {
        "llamacpp:requests_processing": 2.0,
        'llamacpp:tokens{slot="0"}': 7.5,
    }
