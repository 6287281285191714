"""Read and write recorded HTTP exchanges (``recordings/NAME.http``): the reader moved into
the package (``llamaclient.testing``: ``FakeLlama.replay`` and ``llamaclient replay`` play these
files); this module keeps the old import path for the recorder and the tests."""

from __future__ import annotations

from llamaclient.testing._recording import (
    Recording,
    RecordingFormatError,
    dechunk,
    dump,
    load,
    parse,
)

__all__ = ["Recording", "RecordingFormatError", "dechunk", "dump", "load", "parse"]
