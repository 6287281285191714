"""Affinity a load balancer can use, end to end (issue 24 part 1): the session header on
every request of a turn, and the one cookie a balancer pins by (``Config.affinity_cookie``)
kept per session and sent back; every other ``Set-Cookie`` ignored by both transports (the
httpx one kept and sent every cookie before). Real sockets for the transports; the
in-process fake behind a cookie-pinning balancer of a few lines for the resume."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from llamaclient import ChatRequest, Client, Resuming, Transport, UserMessage
from llamaclient._transports.base import Response
from llamaclient.testing import FakeLlama
from tests.conftest import CHAT, TransportName, drain, make_config
from tests.support.faultserver import FaultServer, Step, chat_chunks, stream

pytestmark = pytest.mark.anyio


def ask(session: str | None = None) -> ChatRequest:
    return ChatRequest([UserMessage("q")], session=session)


def answer(cookie: str | None) -> list[Step]:
    headers = {} if cookie is None else {"Set-Cookie": cookie}
    return stream(chat_chunks(["Hi"]), headers=headers)


async def test_the_affinity_cookie_is_kept_per_session_and_sent_back(
    transport: TransportName,
) -> None:
    async with FaultServer() as server:
        server.route(
            "POST",
            CHAT,
            answer("SRV=s1; Path=/"),  # a, first turn: the balancer inserts its cookie
            answer(None),  # a again
            answer("SRV=s2; Path=/; HttpOnly"),  # b, first turn
            answer(None),  # b again
            answer("other=1; Path=/"),  # a again: another cookie, ignored
            answer(None),  # a
        )
        async with Client(make_config(server.url, transport, affinity_cookie="SRV")) as client:
            for session in ("a", "a", "b", "b", "a", "a"):
                _, error = await drain(client.chat(ask(session)))
                assert error is None
        sent = [(r.headers.get("cookie"), r.headers.get("x-session-id")) for r in server.requests]
    assert sent == [
        (None, "a"),
        ("SRV=s1", "a"),
        (None, "b"),
        ("SRV=s2", "b"),
        ("SRV=s1", "a"),
        ("SRV=s1", "a"),
    ]


async def test_without_affinity_cookie_no_cookie_is_ever_sent(transport: TransportName) -> None:
    async with FaultServer() as server:
        server.route("POST", CHAT, answer("SRV=s1; Path=/"), answer("other=2"), answer(None))
        async with Client(make_config(server.url, transport)) as client:
            for _ in range(3):
                _, error = await drain(client.chat(ask("a")))
                assert error is None
        cookies = [r.headers.get("cookie") for r in server.requests]
    assert cookies == [None, None, None]


class CookieBalancer(Transport):
    """A balancer that pins by cookie, in a few lines: a request without its cookie gets a
    backend round-robin and the cookie naming it; one with the cookie goes there. Here the
    backends are one fake; what matters is what each request carried."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.sent: list[tuple[str, str, dict[str, str]]] = []
        self._next = 0

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
    ) -> Response:
        lower = {k.lower(): v for k, v in headers.items()}
        self.sent.append((method, url.split("?")[0].rsplit(":", 1)[-1], lower))
        response = await self.inner.send(method, url, headers, body, read_timeout=read_timeout)
        if "cookie" in lower:
            return response
        self._next += 1
        return _Cookied(response, f"BACKEND=b{self._next}; Path=/")

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Cookied(Response):
    def __init__(self, response: Response, cookie: str) -> None:
        self._response, self._cookie = response, cookie

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def fair_reads(self) -> bool:
        return self._response.fair_reads

    def header(self, name: str) -> str | None:
        if name.lower() == "set-cookie":
            return self._cookie
        return self._response.header(name)

    async def read(self) -> bytes:
        return await self._response.read()

    async def aclose(self) -> None:
        await self._response.aclose()


@pytest.mark.parametrize("session", ["agent-1", None])
async def test_a_resume_carries_the_chats_cookie_and_header(session: str | None) -> None:
    """With or without a session, the resume after a cut goes where the chat went: its
    cookie (a turn without a session keeps its own) and its session header (the session,
    else the conversation id)."""
    fake = FakeLlama(resumable=True).fail(cut_after=2).reply("one two three four")
    balancer = CookieBalancer(fake.transport())
    config = make_config(fake.url, "asyncio", affinity_cookie="BACKEND")
    async with Client(config, transport=balancer) as client:
        events, error = await drain(client.chat(ask(session)))
    assert error is None
    assert any(isinstance(e, Resuming) for e in events)
    [chat] = [h for m, _, h in balancer.sent if m == "POST" and "completions" in _]
    later = [h for m, _, h in balancer.sent if h is not chat]
    assert later, balancer.sent  # the resume GET (and the lookup, if any)
    key = session or chat["x-conversation-id"]
    assert chat["x-session-id"] == key
    assert "cookie" not in chat
    for headers in later:
        assert headers["cookie"] == "BACKEND=b1"
        assert headers["x-session-id"] == key
