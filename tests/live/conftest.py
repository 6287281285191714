"""Fixtures for the live tests: a real llama-server running the scripted model.

The model is written once per session. Each test module gets its own server (module scope),
started with the flags in the module-level ``LLAMA_SERVER_FLAGS`` tuple (default:
``DEFAULT_FLAGS``). Every test under ``tests/live`` is marked ``live``. ``live_client`` is our
own ``Client`` for that server, once per transport (``live_transport``); the client tests run
on both event loops (``anyio_backend``, ``tests/conftest.py``: under trio the asyncio transport
is skipped), the raw-HTTP ones (``test_server_*.py``) on asyncio only. A missing
``llama-server`` binary is a failure, not a skip: the live suite must not pass silently.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devtools.llama_server import LlamaServer, LlamaServerNotFound, find_binary
from devtools.scripted_model import write_model
from llamaclient import Client
from tests.live.chat import TRANSPORTS, TransportName, live_config
from tests.live.fleet import fleet

DEFAULT_FLAGS: tuple[str, ...] = ("-np", "2", "-c", "16384", "-b", "64", "-ub", "64")
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test collected under ``tests/live`` as ``live``."""
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.live)


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    """The llama-server binary; fails the test (with install instructions) when missing."""
    try:
        return find_binary()
    except LlamaServerNotFound as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def scripted_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scripted GGUF model, written once per session."""
    return write_model(tmp_path_factory.mktemp("model") / "scripted.gguf")


@pytest.fixture(scope="module")
def live_server(
    request: pytest.FixtureRequest,
    llama_server_binary: Path,
    scripted_model_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LlamaServer]:
    """A running llama-server for this module (flags from ``LLAMA_SERVER_FLAGS``)."""
    flags = getattr(request.module, "LLAMA_SERVER_FLAGS", DEFAULT_FLAGS)
    log = tmp_path_factory.mktemp("server") / "llama-server.log"
    server = LlamaServer(scripted_model_path, *flags, log_path=log, binary=llama_server_binary)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def base_url(live_server: LlamaServer) -> str:
    """``http://127.0.0.1:<port>`` of this module's server."""
    return live_server.base_url


@pytest.fixture(params=TRANSPORTS)
def live_transport(request: pytest.FixtureRequest) -> TransportName:
    """Each test that uses it runs once per transport: ``"asyncio"`` and ``"httpx"``."""
    name: TransportName = request.param
    return name


@pytest.fixture
async def live_client(base_url: str, live_transport: TransportName) -> AsyncIterator[Client]:
    """Our ``Client`` for this module's server, over ``live_transport``; closed afterwards."""
    async with Client(live_config(base_url, live_transport)) as client:
        yield client


@pytest.fixture
def servers(
    llama_server_binary: Path,
    scripted_model_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[LlamaServer]]:
    """Three llama-servers with the scripted model, 2 slots each (``tests/live/fleet.py``),
    for the pool and balancer suites; stopped afterwards."""
    logs = tmp_path_factory.mktemp("fleet")
    with fleet(llama_server_binary, scripted_model_path, logs) as started:
        yield started
