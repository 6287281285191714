"""Test your code against llama-server without a server: ``FakeLlama`` is a scripted
llama-server inside the test process. See ``docs/testing.md``.

    fake = FakeLlama()
    fake.reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}])
    fake.reply("The file says hello.")
    async with fake.client() as client:
        ...  # your agent
    assert fake.requests[1].last == ToolMessage(call_id, "hello")

With pytest, the ``fake_llama`` fixture (this package's plugin, registered as the
``llamaclient`` entry point in ``pytest11``) gives a fresh ``FakeLlama`` per test.
"""

from ._fake import FakeCall, FakeLlama, FakeRequest, Reply, stream_body
from ._recording import Recording, RecordingFormatError, load
from ._response import FakeResponse, FakeTransport
from ._serving import FakeModel

__all__ = [
    "FakeCall",
    "FakeLlama",
    "FakeModel",
    "FakeRequest",
    "FakeResponse",
    "FakeTransport",
    "Recording",
    "RecordingFormatError",
    "Reply",
    "load",
    "stream_body",
]
