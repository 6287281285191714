"""A chat through a proxy (LiteLLM's): found from the answer's headers, said once per client
(``Proxied``), nothing resumed through it, the thinking budget carried in the body; and the
proxy's error envelopes read for what they mean. Synchronous, on scripted answers; the real
proxy is in tests/live/test_litellm_live.py."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from llamaclient import (
    ChatRequest,
    Content,
    ContextOverflowError,
    HTTPStatusError,
    ModelNotFoundError,
    Proxied,
    StreamClosedEarlyError,
    ThinkingCapped,
    UnsupportedInputError,
    UserMessage,
)
from llamaclient._protocol.body import build_body
from llamaclient._protocol.proxies import LITELLM_LOST, proxy_of
from llamaclient._protocol.status import status_error
from llamaclient._turn.commands import Call
from llamaclient._turn.known import Known
from tests.support import streams
from tests.support.streams import ROLE, chunk, timings
from tests.turn.script import SSE, Answer, Fail, Server, answer, config, drive, stream_body, turn

LITELLM = {**SSE, "x-litellm-version": "1.108.7", "x-litellm-model-group": "scripted"}
BODY = stream_body(streams.reasoning_answer())
SAID = Proxied("LiteLLM 1.108.7", LITELLM_LOST)
CONTROL = "/v1/chat/completions/control"


def test_litellm_is_known_by_its_version_header() -> None:
    assert proxy_of(LITELLM.get) == SAID
    assert proxy_of(SSE.get) is None
    assert proxy_of({"x-litellm-version": ""}.get) == Proxied("LiteLLM", LITELLM_LOST)
    assert proxy_of({"x-litellm-version": " " + "9" * 99}.get) == Proxied(
        "LiteLLM " + "9" * 40, LITELLM_LOST
    )


def test_the_first_answer_through_it_says_so_once_before_any_output() -> None:
    known = Known()
    first = drive(turn(known=known), Server([answer(headers=LITELLM)]))
    assert first.events[0] == SAID
    assert [e for e in first.events if isinstance(e, Proxied)] == [SAID]
    assert (known.proxy, known.resume) == ("LiteLLM 1.108.7", False)
    again = drive(turn(known=known), Server([answer(headers=LITELLM)]))
    assert not [e for e in again.events if isinstance(e, Proxied)]
    assert again.done.completion == first.done.completion


def test_a_server_answering_itself_says_nothing() -> None:
    known = Known()
    run = drive(turn(known=known), Server([answer()]))
    assert not [e for e in run.events if isinstance(e, Proxied)]
    assert known.proxy is None


def test_a_break_through_it_ends_the_turn_at_once_with_its_partial() -> None:
    """The proxy passes neither the conversation id nor the resume routes: no reconnect is
    tried (it could only 404), and the error carries what the events delivered."""
    end = BODY.index(b"\n\n", BODY.index(b"Done")) + 2  # the event with "Done", whole
    cut = Answer(headers=LITELLM, body=[BODY[:end], Fail("read", "cut")])
    run = drive(turn(), Server([cut]))
    error = run.done.error
    assert type(error) is StreamClosedEarlyError
    assert not [p for p in run.paths() if p.startswith("/v1/stream")]
    assert error.partial is not None
    assert error.partial.reasoning_content == "Let me check é ✓."
    assert error.partial.content == "Done"


# -- the thinking budget ------------------------------------------------------------------
def thinking(n: int) -> list[dict[str, Any]]:
    out = [chunk(ROLE)]
    out += [chunk({"reasoning_content": f"r{i} "}, timings=timings(i + 1)) for i in range(n)]
    return [*out, chunk({"content": "ok"}, timings=timings(n + 1)), chunk({}, "stop")]


def budgeted(limit: int, grace: int = 256, known: Known | None = None) -> Any:
    request = ChatRequest([UserMessage("q")], thinking_budget=limit)
    known = known or Known()
    known.router = False  # a plain server: no look at /models
    return turn(request, conf=config(thinking_grace=grace, model="m"), known=known)


def test_the_body_carries_the_servers_budget() -> None:
    """A backstop ``grace`` tokens past the budget (the control call ends it first); through
    a proxy, which passes no control call, the budget itself; ``extra`` still wins."""
    conf = config(thinking_budget=100, thinking_grace=20)

    def sent(request: ChatRequest, proxied: bool = False) -> Any:
        return msgspec.json.decode(build_body(conf, request, proxied=proxied)).get(
            "reasoning_budget_tokens"
        )

    hi = [UserMessage("hi")]
    assert sent(ChatRequest(hi)) == 120
    assert sent(ChatRequest(hi), proxied=True) == 100
    assert sent(ChatRequest(hi, thinking_budget=7)) == 27
    assert sent(ChatRequest(hi, thinking_budget=0)) is None
    assert sent(ChatRequest(hi, extra={"reasoning_budget_tokens": -1})) == -1
    assert "reasoning_budget_tokens" not in build_body(config(), ChatRequest(hi)).decode()
    by_default = msgspec.json.decode(build_body(conf, ChatRequest(hi)))
    assert by_default["reasoning_budget_tokens"] == 120  # not through a proxy unless told


def test_through_a_proxy_the_servers_own_budget_ends_the_reasoning_and_that_is_shown() -> None:
    """llama-server's budget of n ends the reasoning after n - 1 tokens as predicted_n
    counts them; no control call goes (the proxy would 404 it)."""
    known = Known()
    known.proxy = "LiteLLM 1.108.7"
    run = drive(budgeted(3, known=known), Server([answer(thinking(2), headers=LITELLM)]))
    assert not run.sent(Call)
    kinds = [type(e) for e in run.events]
    assert kinds.index(ThinkingCapped) == kinds.index(Content) - 1  # said before the answer
    assert ThinkingCapped(2) in run.events
    completion = run.done.completion
    assert completion is not None
    assert completion.thinking_capped
    assert completion.content == "ok"


def test_a_model_that_stops_thinking_on_its_own_first_is_not_capped() -> None:
    known = Known()
    known.proxy = "LiteLLM 1.108.7"
    run = drive(budgeted(5, known=known), Server([answer(thinking(3))]))
    assert not [e for e in run.events if isinstance(e, ThinkingCapped)]
    assert run.done.completion is not None
    assert not run.done.completion.thinking_capped


@pytest.mark.parametrize(("n", "capped"), [(4, True), (3, False)])
def test_a_control_call_that_cannot_reach_the_server_leaves_the_backstop(
    n: int, capped: bool
) -> None:
    """The first turn through a proxy not known yet: the call 404s, and the server's own
    budget (2 + 3) ends the reasoning with no error; ending earlier is the model's own."""
    server = Server([answer(thinking(n), headers=LITELLM)], {CONTROL: [(404, b"")]})
    run = drive(budgeted(2, grace=3), server)
    assert len(run.sent(Call)) == 1
    assert run.done.completion is not None
    assert run.done.completion.thinking_capped is capped
    assert (ThinkingCapped(n) in run.events) is capped


# -- its error envelopes (recorded from LiteLLM 1.108.7 in front of llama-server) ----------
OVERFLOW = (
    b'{"error":{"message":"litellm.ContextWindowExceededError: litellm.BadRequestError: '
    b"ContextWindowExceededError: OpenAIException - request (45021 tokens) exceeds the "
    b"available context size (4096 tokens), try increasing it\\nmodel=scripted. "
    b"context_window_fallbacks=None. fallbacks=None.\\n\\nLiteLLM: model group 'scripted' "
    b'failed with the error above. No fallback was attempted.","type":"invalid_request_error",'
    b'"param":null,"code":"400"}}'
)
UNKNOWN_MODEL = (
    b'{"error":{"message":"/chat/completions: Invalid model name passed in model=nope. Call '
    b'`/v1/models` to view available models for your key.","type":"invalid_request_error",'
    b'"param":null,"code":"400","provider_specific_fields":{"error":"/chat/completions: '
    b'Invalid model name passed in model=nope."}}}'
)
IMAGE = (
    b'{"error":{"message":"litellm.BadRequestError: OpenAIException - image input is not '
    b'supported - hint: if this is unexpected, you may need to provide the mmproj",'
    b'"type":"invalid_request_error","param":null,"code":"400"}}'
)
BAD_FIELD = (
    b"{\"error\":{\"message\":\"litellm.BadRequestError: OpenAIException - Field 'n_probs': "
    b'[json.exception.type_error.302] type must be number, but is string","type":'
    b'"invalid_request_error","param":null,"code":"400"}}'
)


def test_a_prompt_over_the_context_is_an_overflow_with_the_numbers() -> None:
    error = status_error(400, OVERFLOW)
    assert isinstance(error, ContextOverflowError)
    assert (error.n_prompt_tokens, error.n_ctx) == (45021, 4096)
    assert (error.type, error.code) == ("invalid_request_error", "400")


def test_llama_servers_own_overflow_is_read_from_its_fields_whatever_its_words() -> None:
    body = (
        b'{"error":{"code":400,"message":"the prompt is too long","type":'
        b'"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}'
    )
    error = status_error(400, body)
    assert isinstance(error, ContextOverflowError)
    assert (error.n_prompt_tokens, error.n_ctx, error.code) == (5000, 4096, 400)


def test_a_model_the_proxy_does_not_route_is_not_found() -> None:
    error = status_error(400, UNKNOWN_MODEL)
    assert type(error) is ModelNotFoundError
    assert (error.status, error.type, error.code) == (400, "invalid_request_error", "400")
    assert error.message is not None
    assert error.message.startswith("/chat/completions: Invalid model name passed in model=nope")


def test_an_image_refused_behind_it_names_the_modality() -> None:
    error = status_error(400, IMAGE)
    assert isinstance(error, UnsupportedInputError)
    assert error.modality == "vision"


def test_any_other_refusal_is_a_status_error_with_the_servers_words() -> None:
    error = status_error(400, BAD_FIELD)
    assert type(error) is HTTPStatusError
    assert error.message is not None
    assert "Field 'n_probs'" in error.message
