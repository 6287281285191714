"""The pytest plugin of ``llamaclient.testing`` (entry point ``pytest11``: ``llamaclient``).

It provides the ``fake_llama`` fixture: a fresh :class:`~llamaclient.testing.FakeLlama` for
each test. Without the installed entry point, load it with ``-p llamaclient.testing.plugin``
(or ``pytest_plugins = ["llamaclient.testing.plugin"]`` in a conftest.py).
"""

from __future__ import annotations

import pytest

from ._fake import FakeLlama

__all__ = ["fake_llama"]


@pytest.fixture
def fake_llama() -> FakeLlama:
    """A scripted llama-server for this test: ``fake_llama.reply(...)``, then
    ``async with fake_llama.client() as client: ...``; ``fake_llama.requests`` afterwards."""
    return FakeLlama()
