"""Counting before sending: ``count_tokens`` (the server's ``input_tokens``, or its template
then its tokenizer on an older build, learnt once), ``tokenize``/``detokenize`` typed, and
the pre-flight: ``Config(preflight=True)`` (or per request) refuses a prompt that with
``max_tokens`` does not fit a slot's context before anything is evaluated, with the numbers;
the server's own overflow carries them too."""

from __future__ import annotations

import pytest

from llamaclient import (
    ChatRequest,
    Client,
    Config,
    ContextOverflowError,
    SystemMessage,
    TokenPiece,
    UserMessage,
)
from llamaclient.testing import FakeLlama
from llamaclient.testing._serving import fake_template

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
REQUEST = ChatRequest([SystemMessage("Be brief."), UserMessage("Hello!")], max_tokens=16)
PROMPT = len(fake_template([{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Hello!"}]))  # fmt: skip


def client(fake: FakeLlama, **config: object) -> Client:
    return Client(Config(fake.url, **config), transport=fake.transport())  # type: ignore[arg-type]


async def test_count_tokens_is_the_servers_own_count() -> None:
    fake = FakeLlama()
    async with client(fake) as c:
        assert await c.count_tokens(REQUEST) == PROMPT
    [call] = [c for c in fake.calls if c.method == "POST"]
    assert call.path == "/v1/chat/completions/input_tokens"
    assert call.body["messages"][1] == {"role": "user", "content": "Hello!"}  # the chat's body


class OldBuild(FakeLlama):
    """A build without ``/v1/chat/completions/input_tokens`` (404, as llama-server's)."""

    def _tokens(self, path: str, body: object):  # type: ignore[no-untyped-def]
        if path == "/v1/chat/completions/input_tokens":
            from llamaclient.testing._response import error_response

            return error_response(404, "File Not Found")
        return super()._tokens(path, body)


async def test_an_older_build_is_counted_by_its_template_and_tokenizer_learnt_once() -> None:
    fake = OldBuild()
    async with client(fake) as c:
        assert await c.count_tokens(REQUEST) == PROMPT
        assert await c.count_tokens(REQUEST) == PROMPT
    posts = [c.path for c in fake.calls if c.method == "POST"]
    assert posts == [
        "/v1/chat/completions/input_tokens",
        "/apply-template",
        "/tokenize",
        "/apply-template",
        "/tokenize",
    ]
    tokenize = next(c for c in fake.calls if c.path == "/tokenize")
    assert (tokenize.body["add_special"], tokenize.body["parse_special"]) == (True, True)


async def test_tokenize_and_detokenize_are_typed() -> None:
    fake = FakeLlama()
    async with client(fake) as c:
        ids = await c.tokenize("Hi")
        pieces = await c.tokenize("Hi", pieces=True)
        text = await c.detokenize(ids)
    assert ids == [ord("H"), ord("i")]
    assert pieces == [TokenPiece(ord("H"), "H"), TokenPiece(ord("i"), "i")]
    assert text == "Hi"


async def test_preflight_refuses_what_does_not_fit_before_sending() -> None:
    fake = FakeLlama(n_ctx=PROMPT + 10).reply("never")  # one slot: room for 10 tokens
    async with client(fake, preflight=True) as c:
        with pytest.raises(ContextOverflowError) as info:
            await c.complete(REQUEST)  # 16 tokens asked for
        error = info.value
    assert (error.n_prompt_tokens, error.max_tokens, error.n_ctx) == (PROMPT, 16, PROMPT + 10)
    assert error.preflight
    assert "counted before sending" in str(error)
    assert not fake.requests  # nothing was evaluated
    assert [c.path for c in fake.calls] == ["/props", "/v1/chat/completions/input_tokens"]


async def test_preflight_lets_through_what_fits_and_asks_props_once() -> None:
    fake = FakeLlama(n_ctx=PROMPT + 16).reply("ok").reply("ok")
    async with client(fake, preflight=True) as c:
        assert (await c.complete(REQUEST)).content == "ok"
        assert (await c.complete(REQUEST)).content == "ok"
    assert [c.path for c in fake.calls].count("/props") == 1


async def test_preflight_per_request_and_off_by_default() -> None:
    fake = FakeLlama(n_ctx=PROMPT + 1).reply("sent").reply("sent")
    async with client(fake) as c:
        assert (await c.complete(REQUEST)).content == "sent"  # off: the server decides
        with pytest.raises(ContextOverflowError):
            await c.complete(ChatRequest(REQUEST.messages, max_tokens=16, preflight=True))
    async with client(fake, preflight=True) as c:
        request = ChatRequest(REQUEST.messages, max_tokens=16, preflight=False)
        assert (await c.complete(request)).content == "sent"


async def test_a_count_that_fails_leaves_the_chat_to_go() -> None:
    class NoTokens(FakeLlama):
        def _tokens(self, path: str, body: object):  # type: ignore[no-untyped-def]
            from llamaclient.testing._response import error_response

            return error_response(500, "boom")

    fake = NoTokens(n_ctx=8).reply("ok")
    async with client(fake, preflight=True) as c:
        assert (await c.complete(REQUEST)).content == "ok"

