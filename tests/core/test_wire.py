"""The wire structs (``llamaclient._protocol.wire``): what the decoders accept and ignore."""

from __future__ import annotations

import msgspec
import pytest

from llamaclient._protocol.wire import (
    ANY_DECODER,
    CHUNK_DECODER,
    ENTRY_KEYS_DECODER,
    RESPONSE_DECODER,
    TIMINGS_DECODER,
    TOOL_CALL_DECODER,
    WireError,
)
from llamaclient._types.completion import Timings
from llamaclient._types.events import Progress


def test_chunk_reads_exactly_the_fields_we_use() -> None:
    chunk = CHUNK_DECODER.decode(
        b'{"id":"c","model":"m","object":"chat.completion.chunk","created":1,'
        b'"choices":[{"index":0,"finish_reason":null,"logprobs":null,'
        b'"delta":{"role":"assistant","content":"a","reasoning_content":"r",'
        b'"tool_calls":[{"index":0,"id":"t"}]}}],'
        b'"timings":{"predicted_n":3,"prompt_per_token_ms":1.0},'
        b'"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,'
        b'"prompt_tokens_details":{"cached_tokens":0}},'
        b'"prompt_progress":{"total":5,"cache":1,"processed":2,"time_ms":0.5}}'
    )
    assert (chunk.id, chunk.model, chunk.error) == ("c", "m", None)
    assert chunk.choices is not None
    choice = chunk.choices[0]
    assert (choice.index, choice.finish_reason) == (0, None)
    assert choice.delta is not None
    assert (choice.delta.content, choice.delta.reasoning_content) == ("a", "r")
    assert choice.delta.tool_calls == [msgspec.Raw(b'{"index":0,"id":"t"}')]
    assert TIMINGS_DECODER.decode(chunk.timings) == Timings(predicted_n=3)
    assert chunk.usage is not None
    assert (chunk.usage.prompt_tokens, chunk.usage.completion_tokens) == (1, 2)
    assert chunk.usage.prompt_tokens_details is not None
    assert chunk.usage.prompt_tokens_details.cached_tokens == 0
    assert chunk.prompt_progress == Progress(5, 1, 2, 0.5)


def test_chunk_defaults_when_fields_are_missing() -> None:
    chunk = CHUNK_DECODER.decode(b'{"choices":[{}]}')
    assert chunk.id is None
    assert chunk.choices is not None
    assert (chunk.choices[0].index, chunk.choices[0].delta) == (0, None)
    assert CHUNK_DECODER.decode(b"{}").choices is None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (b'{"error":"boom"}', "boom"),
        (b'{"error":{"message":"m","code":500,"type":"t"}}', WireError("m", 500, "t")),
        (b'{"error":{}}', WireError("", None, None)),
    ],
)
def test_error_as_text_or_object(text: bytes, error: object) -> None:
    assert CHUNK_DECODER.decode(text).error == error
    assert RESPONSE_DECODER.decode(text).error == error


@pytest.mark.parametrize("text", [b"[]", b'{"choices":{}}', b'{"error":5}'])
def test_wrong_shapes_are_decode_errors(text: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        CHUNK_DECODER.decode(text)


def test_timings_are_kept_as_sent_and_decoded_when_asked() -> None:
    # They come with every chunk: decoding them once at the end, not per chunk, is cheaper.
    chunk = CHUNK_DECODER.decode(b'{"timings":{"predicted_n":"3"}}')
    assert bytes(chunk.timings) == b'{"predicted_n":"3"}'
    with pytest.raises(msgspec.ValidationError):
        TIMINGS_DECODER.decode(chunk.timings)
    assert not CHUNK_DECODER.decode(b"{}").timings  # none sent: empty
    assert TIMINGS_DECODER.decode(CHUNK_DECODER.decode(b'{"timings":null}').timings) is None


def test_response_message() -> None:
    response = RESPONSE_DECODER.decode(
        b'{"id":"r","choices":[{"index":0,"finish_reason":"stop",'
        b'"message":{"role":"assistant","content":"x","tool_calls":[{"id":"t"}]}}]}'
    )
    assert response.choices is not None
    message = response.choices[0].message
    assert message is not None
    assert (message.content, message.reasoning_content) == ("x", None)
    assert message.tool_calls == [msgspec.Raw(b'{"id":"t"}')]


def test_tool_call_entry_and_its_keys() -> None:
    raw = b'{"index":1,"id":"t","type":"function","function":{"name":"f"},"sig":[1]}'
    entry = TOOL_CALL_DECODER.decode(raw)
    assert (entry.index, entry.id) == (1, "t")
    assert entry.function is not None
    assert (entry.function.name, entry.function.arguments) == ("f", None)
    keys = ENTRY_KEYS_DECODER.decode(raw)
    assert list(keys) == ["index", "id", "type", "function", "sig"]
    assert ANY_DECODER.decode(keys["sig"]) == [1]
