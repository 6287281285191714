"""The dialects of OpenAI-compatible servers and proxies, in the pure core: string error codes,
``event: error``, thinking under ``reasoning``, a partial's finish reason, speculative-decoding
timings. Each stream is also fed split at every byte, through the SSE decoder and the
assembler together, as a client reads it."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from llamaclient import (
    Assembler,
    AssistantMessage,
    ChatRequest,
    Config,
    Content,
    FinishReason,
    HTTPStatusError,
    ProtocolError,
    Reasoning,
    ServerError,
    StreamClosedEarlyError,
    UserMessage,
)
from llamaclient._protocol.body import build_body
from llamaclient._protocol.sse import ErrorData, SSEDecoder
from llamaclient._protocol.status import status_error
from llamaclient._types.completion import Timings
from llamaclient._types.events import ChatEvent
from llamaclient._types.openai import from_openai, to_openai
from tests.support.streams import chunk


def sse(*payloads: dict[str, Any] | str, event: str | None = None) -> bytes:
    out = []
    for payload in payloads:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        head = f"event: {event}\n" if event else ""
        out.append(f"{head}data: {text}\n\n")
    return "".join(out).encode()


def run(body: bytes, *, splits: bool = True) -> list[tuple[list[ChatEvent], Exception | None]]:
    """The events (and the error that ended them) of ``body`` fed whole, then split in two
    at every byte: each run must say the same."""
    cuts = range(len(body) + 1) if splits else [len(body)]
    results = []
    for cut in cuts:
        decoder, asm = SSEDecoder(), Assembler()
        events: list[ChatEvent] = []
        error: Exception | None = None
        try:
            for piece in (body[:cut], body[cut:]):
                for payload in decoder.feed(piece):
                    events += asm.push(payload)
            for payload in decoder.flush():
                events += asm.push(payload)
        except (ServerError, StreamClosedEarlyError) as exc:
            error = exc
        results.append((events, error))
    return results


def same(results: list[tuple[list[ChatEvent], Exception | None]]) -> tuple[Any, Any]:
    events, error = results[0]
    for other_events, other_error in results[1:]:
        assert other_events == events
        assert type(other_error) is type(error)
        assert str(other_error) == str(error)
    return events, error


# -- 1. an error code may be a string -----------------------------------------------------
GROQ_ERROR = {
    "error": {
        "message": "Failed to call a function. Please adjust your prompt.",
        "type": "invalid_request_error",
        "code": "tool_use_failed",
    }
}


def test_an_in_band_error_with_a_string_code_is_a_server_error() -> None:
    body = sse(chunk({"content": "Let me"}), GROQ_ERROR)
    events, error = same(run(body))
    assert events == [Content("Let me")]
    assert isinstance(error, ServerError)
    assert (error.message, error.type, error.code) == (
        "Failed to call a function. Please adjust your prompt.",
        "invalid_request_error",
        "tool_use_failed",
    )
    assert error.partial is not None
    assert error.partial.content == "Let me"


def test_a_non_2xx_body_with_a_string_code_keeps_message_type_and_code() -> None:
    error = status_error(400, json.dumps(GROQ_ERROR).encode())
    assert isinstance(error, HTTPStatusError)
    assert (error.message, error.type, error.code) == (
        "Failed to call a function. Please adjust your prompt.",
        "invalid_request_error",
        "tool_use_failed",
    )
    assert str(error) == (
        "HTTP 400 invalid_request_error: Failed to call a function. Please adjust your prompt."
    )


def test_litellm_codes_are_strings_of_digits_and_stay_strings() -> None:
    body = b'{"error":{"message":"Authentication Error","type":"auth_error","param":"None",'
    body += b'"code":"401"}}'
    error = status_error(401, body)
    assert isinstance(error, HTTPStatusError)
    assert (error.message, error.type, error.code) == ("Authentication Error", "auth_error", "401")


def test_an_integer_code_stays_an_integer() -> None:
    error = status_error(500, b'{"error":{"code":500,"message":"x","type":"server_error"}}')
    assert isinstance(error, HTTPStatusError)
    assert error.code == 500


# -- 2. event: error ----------------------------------------------------------------------
def test_an_error_event_is_a_server_error_with_the_partial() -> None:
    body = sse(chunk({"content": "Hel"}), chunk({"content": "lo"}))
    body += sse(GROQ_ERROR, event="error")
    events, error = same(run(body))
    assert events == [Content("Hel"), Content("lo")]
    assert isinstance(error, ServerError)
    assert error.code == "tool_use_failed"
    assert error.message.startswith("Failed to call a function")
    assert error.partial is not None
    assert error.partial.content == "Hello"


def test_an_error_event_without_the_envelope_is_a_server_error_all_the_same() -> None:
    events, error = same(run(sse({"message": "overloaded", "code": 529}, event="error")))
    assert events == []
    assert isinstance(error, ServerError)
    assert (error.message, error.code) == ("overloaded", 529)
    events, error = same(run(sse("upstream went away", event="error")))
    assert isinstance(error, ServerError)
    assert error.message == "upstream went away"


def test_an_error_event_that_looks_like_a_chunk_still_raises() -> None:
    """``event: error`` means an error, whatever its data looks like."""
    events, error = same(run(sse(chunk({"content": "x"}), event="error")))
    assert events == []
    assert isinstance(error, ServerError)


def test_other_unknown_event_types_are_still_ignored() -> None:
    body = sse(chunk({"content": "a"}))
    body += sse({"type": "ping"}, event="ping") + sse("whatever", event="response.created")
    body += sse(chunk({}, finish="stop")) + b"data: [DONE]\n\n"
    events, error = same(run(body))
    assert error is None
    assert events == [Content("a")]


# -- 3. thinking under ``reasoning`` --------------------------------------------------------
def reasoning_stream(field: str) -> bytes:
    return sse(
        chunk({"role": "assistant", "content": None}),
        chunk({field: "Let me "}),
        chunk({field: "think."}),
        chunk({"content": "Done."}),
        chunk({}, finish="stop"),
    ) + b"data: [DONE]\n\n"


def completion_of(body: bytes) -> Any:
    decoder, asm = SSEDecoder(), Assembler()
    for payload in decoder.feed(body):
        asm.push(payload)
    return asm.finish()


def test_reasoning_under_reasoning_is_reasoning() -> None:
    events, error = same(run(reasoning_stream("reasoning")))
    assert error is None
    assert events == [Reasoning("Let me "), Reasoning("think."), Content("Done.")]
    completion = completion_of(reasoning_stream("reasoning"))
    assert completion.reasoning_content == "Let me think."
    assert completion.reasoning_field == "reasoning"


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_the_thinking_goes_back_under_the_name_it_came_under(field: str) -> None:
    completion = completion_of(reasoning_stream(field))
    body = json.loads(
        build_body(Config("http://x"), ChatRequest([UserMessage("q"), completion.message()]))
    )
    sent = body["messages"][1]
    assert sent[field] == "Let me think."
    other = {"reasoning": "reasoning_content", "reasoning_content": "reasoning"}[field]
    assert other not in sent
    assert to_openai([completion.message()])[0][field] == "Let me think."


def test_an_openai_dict_with_reasoning_reads_back_under_that_name() -> None:
    [message] = from_openai([{"role": "assistant", "content": "x", "reasoning": "hm"}])
    assert message == AssistantMessage("x", "hm", reasoning_field="reasoning")
    assert to_openai([message]) == [{"role": "assistant", "content": "x", "reasoning": "hm"}]


def test_a_delta_with_both_names_counts_the_thinking_once() -> None:
    """Servers in a rename send both for a while (the same text twice)."""
    body = sse(
        chunk({"reasoning_content": "hm", "reasoning": "hm"}),
        chunk({"content": "ok"}, finish="stop"),
    )
    events, _ = same(run(body))
    assert events == [Reasoning("hm"), Content("ok")]
    completion = completion_of(body)
    assert completion.reasoning_content == "hm"
    assert completion.reasoning_field == "reasoning_content"


def test_reasoning_in_a_whole_response() -> None:
    body = json.dumps(
        {
            "id": "r",
            "choices": [
                {"index": 0, "finish_reason": "stop",
                 "message": {"content": "x", "reasoning": "thought"}}
            ],
        }
    )
    completion = Assembler.from_response(body)
    assert (completion.reasoning_content, completion.reasoning_field) == ("thought", "reasoning")


def test_a_message_that_never_reasoned_encodes_as_before() -> None:
    """The new field is left out at its default: saved histories keep their bytes."""
    message = AssistantMessage("x")
    assert msgspec.json.encode(message) == b'{"role":"assistant","content":"x"}'


# -- 4. a partial keeps a finish reason that arrived --------------------------------------
def test_an_error_after_the_finish_chunk_keeps_the_finish_reason_in_the_partial() -> None:
    body = sse(
        chunk({"content": "All done."}),
        chunk({}, finish="stop"),
        {"error": {"code": 500, "message": "late failure", "type": "server_error"}},
    )
    events, error = same(run(body))
    assert events == [Content("All done.")]
    assert isinstance(error, ServerError)
    assert error.partial is not None
    assert error.partial.finish_reason is FinishReason.STOP
    assert error.partial.content == "All done."


# -- 5. speculative decoding ----------------------------------------------------------------
def test_draft_timings_are_kept() -> None:
    timings = {"cache_n": 0, "prompt_n": 9, "predicted_n": 12, "draft_n": 10,
               "draft_n_accepted": 7}
    body = sse(chunk({"content": "x"}, timings=timings), chunk({}, finish="stop"))
    completion = completion_of(body)
    assert completion.timings == Timings(
        prompt_n=9, predicted_n=12, draft_n=10, draft_n_accepted=7
    )
    assert completion.timings.draft_acceptance == pytest.approx(0.7)


def test_no_draft_no_acceptance() -> None:
    assert Timings(predicted_n=3).draft_acceptance is None
    assert Timings(draft_n=0, draft_n_accepted=0).draft_acceptance is None


# -- 6. an empty id is no id ----------------------------------------------------------------
# Azure OpenAI's first chunk carries only the prompt's content-filter results, under id "" and
# model "" (recorded in tests/peers/vercel-ai/azure_model_router); the real id comes after.
AZURE_FILTER = {"choices": [], "created": 0, "id": "", "model": "", "object": "",
                "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]}


def test_an_empty_id_is_no_id_and_the_first_real_one_names_the_completion() -> None:
    body = sse(AZURE_FILTER, chunk({"content": "Capital"}), chunk({}, finish="stop"))
    completion = completion_of(body)
    assert completion.id == chunk()["id"]
    assert completion.model == chunk()["model"]
    assert completion.content == "Capital"


def test_a_stream_whose_every_id_is_empty_still_has_no_id() -> None:
    body = sse(dict(chunk({"content": "4"}, finish="stop"), id=""))
    with pytest.raises(ProtocolError, match="no chunk carried a completion id") as info:
        completion_of(body)
    assert info.value.partial is not None
    assert info.value.partial.content == "4"


def test_an_error_events_own_fields_are_kept_when_they_have_their_types() -> None:
    typed = ErrorData(b'{"message": "slow down", "code": "rate_limit", "type": "tokens"}')
    with pytest.raises(ServerError) as caught:
        Assembler().push(typed)
    assert (caught.value.message, caught.value.code, caught.value.type) == (
        "slow down",
        "rate_limit",
        "tokens",
    )
    odd = ErrorData(b'{"message": "m", "code": [1], "type": 5}')
    with pytest.raises(ServerError) as caught:
        Assembler().push(odd)
    assert (caught.value.code, caught.value.type) == (None, None)


def test_an_error_event_that_is_not_utf8_is_its_text_with_replacements() -> None:
    with pytest.raises(ServerError) as caught:
        Assembler().push(ErrorData(b"\xff overloaded"))
    assert caught.value.message == "\ufffd overloaded"


def test_a_delta_with_content_and_thinking_under_reasoning_gives_both() -> None:
    """Not the plain-text shortcut: the thinking (vLLM's ``reasoning``) comes first."""
    asm = Assembler()
    events = asm.push(json.dumps(chunk({"content": "a", "reasoning": "b"})))
    assert [type(e).__name__ for e in events] == ["Reasoning", "Content"]
    assert [getattr(e, "text", None) for e in events] == ["b", "a"]
