"""The public vocabulary (``llamaclient._types``): what its values promise to a user."""

from __future__ import annotations

import msgspec
import pytest

from llamaclient._types.completion import Completion, FinishReason, Timings, Usage
from llamaclient._types.config import Config
from llamaclient._types.errors import (
    BusyError,
    ConnectError,
    ContextOverflowError,
    HTTPStatusError,
    InferError,
    LoadTimeoutError,
    ProtocolError,
    ServerError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
    WaitTimeoutError,
)
from llamaclient._types.messages import AssistantMessage, ToolCall, ToolSchema


def _completion(**changes: object) -> Completion:
    base = Completion(
        id="c",
        model="m",
        content="answer",
        reasoning_content="why",
        tool_calls=(ToolCall("i", "f", '{"a": 1}', {"x": 1}),),
        finish_reason=FinishReason.TOOL_CALLS,
        timings=Timings(predicted_n=3),
        usage=Usage(1, 2, 3),
        reasoning_tokens=2,
    )
    return msgspec.structs.replace(base, **changes)


# -- Completion -----------------------------------------------------------------------------
def test_completion_message_is_the_turn_as_it_arrived() -> None:
    completion = _completion()
    assert completion.message() == AssistantMessage(
        content="answer",
        reasoning_content="why",
        tool_calls=(ToolCall("i", "f", '{"a": 1}', {"x": 1}),),
    )
    empty = _completion(content=None, reasoning_content=None, tool_calls=())
    assert empty.message() == AssistantMessage()


def test_completion_defaults() -> None:
    completion = Completion("c", None, None, None, (), None, None, Usage())
    assert (completion.reasoning_tokens, completion.thinking_capped) == (0, False)
    assert Usage() == Usage(None, None, None)
    assert Timings() == Timings(0, 0, 0, None, None, None, None)


def test_finish_reason_values_are_the_wire_strings() -> None:
    assert [r.value for r in FinishReason] == ["stop", "tool_calls", "length"]
    assert FinishReason("length") is FinishReason.LENGTH
    assert str(FinishReason.STOP) == "stop"


def test_tool_schema_default_parameters_are_an_empty_object() -> None:
    assert ToolSchema("f").parameters == {"type": "object", "properties": {}}
    assert ToolSchema("f").description == ""
    assert ToolCall("i", "f", "{}").extra == {}


# -- Config ---------------------------------------------------------------------------------
def test_config_repr_shows_every_field_but_the_key() -> None:
    config = Config("http://h:1", model="m", api_key="sk-secret", max_tokens=5)
    text = repr(config)
    assert "sk-secret" not in text
    assert text.startswith("Config(base_url='http://h:1', model='m', api_key='***', max_tokens=5, ")
    assert text.endswith(
        "thinking_grace=256, transport='auto', tls=None, max_event_bytes=8388608, "
        "max_body_bytes=8388608, max_error_body_bytes=65536, session_header='X-Session-Id', "
        "affinity_cookie=None, preflight=False)"
    )
    assert text.count("=") == len(Config.__struct_fields__)
    assert "api_key=None" in repr(Config("http://h:1"))  # no key: nothing to hide


def test_config_rich_repr_hides_only_the_key() -> None:
    rich = Config("http://h:1", api_key="sk-secret", max_retries=7).__rich_repr__()
    assert [name for name, _ in rich] == list(Config.__struct_fields__)
    shown = dict(rich)
    assert shown["api_key"] == "***"
    assert shown["base_url"] == "http://h:1"
    assert shown["max_retries"] == 7
    assert dict(Config("http://h:1").__rich_repr__())["api_key"] is None


def test_config_defaults() -> None:
    config = Config("http://h:1")
    assert (config.model, config.api_key, config.transport) == ("", None, "auto")
    assert (config.connect_timeout, config.wait_timeout, config.stall_timeout) == (
        10.0,
        600.0,
        120.0,
    )
    assert (config.load_timeout, config.max_retries) == (600.0, 3)
    assert (config.retry_backoff, config.retry_max_backoff) == (0.25, 8.0)
    assert (config.thinking_budget, config.thinking_grace) == (None, 256)


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind",
    [
        BusyError,
        ConnectError,
        WaitTimeoutError,
        LoadTimeoutError,
        StalledError,
        StreamClosedEarlyError,
        ThinkingOverrunError,
    ],
)
def test_plain_errors_carry_message_and_partial(kind: type[InferError]) -> None:
    partial = _completion(finish_reason=None)
    error = kind("what happened", partial=partial)
    assert isinstance(error, InferError)
    assert str(error) == "what happened"
    assert error.partial is partial
    assert kind("x").partial is None


def test_http_status_error() -> None:
    error = HTTPStatusError(404, '{"error":"no"}')
    assert isinstance(error, InferError)
    assert str(error) == 'HTTP 404: {"error":"no"}'
    assert (error.status, error.body, error.partial) == (404, '{"error":"no"}', None)
    partial = _completion()
    assert HTTPStatusError(500, "", partial=partial).partial is partial


def test_http_status_error_clips_a_long_body_but_keeps_it() -> None:
    body = "x" * 500
    assert str(HTTPStatusError(500, body)) == f"HTTP 500: {body}"
    longer = "y" * 499 + "z" + "w"
    error = HTTPStatusError(500, longer)
    assert str(error) == f"HTTP 500: {'y' * 499}z... (501 chars)"
    assert error.body == longer


def test_context_overflow_error() -> None:
    error = ContextOverflowError(400, "too long", 5000, 4096)
    assert isinstance(error, HTTPStatusError)
    assert str(error) == "HTTP 400: too long"
    assert (error.status, error.body, error.n_prompt_tokens, error.n_ctx) == (
        400,
        "too long",
        5000,
        4096,
    )
    assert error.partial is None


def test_server_error() -> None:
    partial = _completion(finish_reason=None)
    error = ServerError("Context size has been exceeded.", 500, "server_error", partial=partial)
    assert str(error) == "server error 500: Context size has been exceeded."
    assert (error.message, error.code, error.type) == (
        "Context size has been exceeded.",
        500,
        "server_error",
    )
    assert error.partial is partial
    bare = ServerError("boom")
    assert (str(bare), bare.code, bare.type, bare.partial) == (
        "server error None: boom",
        None,
        None,
        None,
    )


def test_protocol_error_shows_the_offending_text() -> None:
    error = ProtocolError("bad chunk", '{"x": 1}')
    assert str(error) == "bad chunk: '{\"x\": 1}'"
    assert error.raw == '{"x": 1}'
    assert error.partial is None
    assert str(ProtocolError("bad chunk")) == "bad chunk"
    assert ProtocolError("bad chunk").raw == ""


def test_protocol_error_decodes_bytes_leniently() -> None:
    error = ProtocolError("bad", b"caf\xc3\xa9 \xff")
    assert error.raw == "café \ufffd"
    assert str(error) == "bad: 'café \ufffd'"
    assert str(ProtocolError("bad", b"")) == "bad"


def test_protocol_error_clips_long_text() -> None:
    raw = "a" * 600
    error = ProtocolError("bad", raw, partial=_completion())
    assert str(error) == f"bad: {'a' * 500 + '... (600 chars)'!r}"
    assert error.raw == raw
    assert error.partial == _completion()
