"""Slots on disk and hibernating idle sessions (llama-server's ``--slot-save-path``):
``save_slot``, ``restore_slot`` and ``erase_slot`` typed; ``Pool(hibernate_after=)`` saves
an idle session's slot and frees it for another, then restores it on the same server before
the session's next turn; every failure is a plain re-prefill, never an error."""

from __future__ import annotations

import anyio
import pytest

from llamaclient import (
    ChatRequest,
    Client,
    Config,
    HTTPStatusError,
    Pool,
    SlotErased,
    SlotRestored,
    SlotSaved,
    UserMessage,
)
from llamaclient._driver.hibernation import filename
from llamaclient.testing import FakeLlama

pytestmark = pytest.mark.anyio


async def test_save_restore_and_erase_are_typed() -> None:
    fake = FakeLlama(n_slots=2, slot_save_path=True)
    async with Client(Config(fake.url), transport=fake.transport()) as client:
        saved = await client.save_slot(1, "one.bin")
        restored = await client.restore_slot(0, "one.bin")
        erased = await client.erase_slot(1)
        with pytest.raises(HTTPStatusError) as missing:
            await client.restore_slot(0, "none.bin")
    assert saved == SlotSaved(
        id_slot=1, filename="one.bin", n_saved=110, n_written=44000, save_ms=1.0
    )
    assert restored == SlotRestored(
        id_slot=0, filename="one.bin", n_restored=110, n_read=44000, restore_ms=1.0
    )
    assert erased == SlotErased(id_slot=1, n_erased=110)
    assert missing.value.status == 400


async def test_without_a_slot_save_path_it_is_a_501() -> None:
    fake = FakeLlama()
    async with Client(Config(fake.url), transport=fake.transport()) as client:
        with pytest.raises(HTTPStatusError) as info:
            await client.save_slot(0, "x.bin")
    assert info.value.status == 501


def ask(session: str) -> ChatRequest:
    return ChatRequest([UserMessage("hi")], session=session)


def hibernating(fake: FakeLlama, after: float = 0.01) -> Pool:
    return Pool([Config("http://s0")], transports=[fake.transport()], hibernate_after=after)


async def test_an_idle_session_gives_its_slot_to_a_new_one_and_gets_its_cache_back() -> None:
    """One slot: "a" has it; idle, it is saved and erased, "b" takes the slot (pinned, its
    own); "b" idle in turn, "a" comes back: "b" is saved, "a" restored into the slot."""
    fake = FakeLlama(n_slots=1, slot_save_path=True)
    for _ in range(3):
        fake.reply("ok")
    async with hibernating(fake) as pool:
        await pool.complete(ask("a"))
        await anyio.sleep(0.02)
        await pool.complete(ask("b"))
        await anyio.sleep(0.02)
        await pool.complete(ask("a"))
        assert pool._hibernation is not None
        assert (pool._hibernation.saved, pool._hibernation.restored) == (2, 1)
    actions = [(c.query.get("action"), c.body.get("filename")) for c in fake.calls
               if c.path.startswith("/slots/")]  # fmt: skip
    assert actions == [
        ("save", filename("a")),
        ("erase", None),
        ("save", filename("b")),
        ("erase", None),
        ("restore", filename("a")),
    ]
    assert [r.settings.get("id_slot") for r in fake.requests] == [0, 0, 0]


async def test_a_session_that_is_not_idle_long_enough_keeps_its_slot() -> None:
    fake = FakeLlama(n_slots=1, slot_save_path=True).reply("ok").reply("ok")
    async with hibernating(fake, after=60) as pool:
        await pool.complete(ask("a"))
        await pool.complete(ask("b"))
    assert not [c for c in fake.calls if c.path.startswith("/slots/")]


async def test_without_a_slot_save_path_hibernation_falls_back_to_a_plain_prefill() -> None:
    fake = FakeLlama(n_slots=1).reply("ok").reply("ok").reply("ok")
    async with hibernating(fake) as pool:
        await pool.complete(ask("a"))
        await anyio.sleep(0.02)
        await pool.complete(ask("b"))
        await anyio.sleep(0.02)
        completion = await pool.complete(ask("a"))
    assert completion.content == "ok"
    assert pool._hibernation is not None
    assert pool._hibernation.saved == 0


def test_hibernate_after_must_be_positive() -> None:
    with pytest.raises(ValueError, match="hibernate_after must be > 0"):
        Pool([Config("http://s0")], hibernate_after=0)
