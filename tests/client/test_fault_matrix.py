"""Survive any server: every named misbehaviour of ``tests/support/faults.py`` ends in exactly
its expected outcome (a Completion, or the typed error with its partial), on both transports
and both event loops, with the POST sent as many times as expected (never twice once the
server may have read it), whether the bytes arrive as written or one byte per write.

The table is data (``FAULTS``); this file only runs it. ``resume`` is off here: resuming has
its own suite (``test_resume.py``).
"""

from __future__ import annotations

from collections import Counter

import pytest

from llamaclient import (
    ChatEvent,
    Content,
    HTTPStatusError,
    InferError,
    Reasoning,
)
from tests.conftest import CHAT, ClientFactory, drain, user
from tests.support.faults import ELSEWHERE, FAULTS, Fault, render
from tests.support.faultserver import FaultServer, Json

pytestmark = pytest.mark.anyio

# Small bounds: the matrix runs hundreds of cases; timing faults set their own.
MATRIX = {"resume": False, "max_retries": 1, "wait_timeout": 3.0, "stall_timeout": 3.0}


def program(server: FaultServer, fault: Fault, drip: bool) -> None:
    server.route("POST", CHAT, *[render(script, drip=drip) for script in fault.scripts])
    server.route("GET", "/health", [Json(200, {"status": "ok"})])


async def run_fault(
    server: FaultServer,
    make_client: ClientFactory,
    transport: str,
    fault: Fault,
    *,
    drip: bool = False,
    **config: object,
) -> tuple[list[ChatEvent], BaseException | None]:
    """Run ``fault`` once through a fresh client; check everything the table says."""
    program(server, fault, drip)
    client = make_client(**{**MATRIX, **fault.config, **config})
    stream = client.chat(user())
    events, error = await drain(stream)
    expected = fault.outcome_on(transport)
    text = "".join(e.text for e in events if isinstance(e, (Content, Reasoning)))
    others = tuple(type(e) for e in events if not isinstance(e, (Content, Reasoning)))
    where = f"{fault.name} over {transport}{' (drip)' if drip else ''}: {error!r}"
    if expected.error is None:
        assert error is None, where
        assert stream.completion.content == expected.content, where
        assert text == expected.content, where
    else:
        assert type(error) is expected.error, where
        assert isinstance(error, InferError)
        partial = error.partial
        assert (None if partial is None else partial.content) == expected.content, where
        assert text == (expected.content or ""), where  # every event of the partial was shown
        if expected.status is not None:
            assert isinstance(error, HTTPStatusError)
            assert error.status == expected.status, where
    assert others == fault.events, where
    posts = Counter(r.path for r in server.requests)
    assert posts[CHAT] == fault.posts, where
    assert set(posts) <= {CHAT, "/health"}, posts  # a redirect is never followed
    return events, error


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_fault(
    server: FaultServer, make_client: ClientFactory, transport: str, fault: Fault
) -> None:
    await run_fault(server, make_client, transport, fault)


DRIPPED = [f for f in FAULTS if f.drip]


@pytest.mark.parametrize("fault", DRIPPED, ids=[f.name for f in DRIPPED])
async def test_fault_one_byte_per_write(
    server: FaultServer, make_client: ClientFactory, transport: str, fault: Fault
) -> None:
    """The outcome does not depend on how TCP split the bytes."""
    await run_fault(server, make_client, transport, fault, drip=True)


async def test_a_redirect_names_its_location(
    server: FaultServer, make_client: ClientFactory, transport: str
) -> None:
    fault = next(f for f in FAULTS if f.name == "redirect_307")
    _, error = await run_fault(server, make_client, transport, fault)
    assert isinstance(error, HTTPStatusError)
    assert ELSEWHERE in str(error)
    assert ELSEWHERE in error.body


def test_the_matrix_is_at_least_forty_faults_of_every_kind() -> None:
    kinds = Counter(f.kind for f in FAULTS)
    assert len(FAULTS) >= 40
    assert set(kinds) == {"head", "framing", "sse", "json", "timing", "status", "redirect",
                          "secret"}
