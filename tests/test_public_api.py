"""``llamaclient.__all__`` lists exactly the public names, and each private module's too."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import llamaclient


def test_all_is_exactly_the_public_names() -> None:
    # Public subpackages (``llamaclient.testing``) are imported on their own, not re-exported.
    public = {
        name
        for name in dir(llamaclient)
        if not name.startswith("_") and not isinstance(getattr(llamaclient, name), ModuleType)
    }
    assert set(llamaclient.__all__) == public | {"__version__"}
    assert len(llamaclient.__all__) == len(set(llamaclient.__all__))


def test_every_private_module_declares_all_and_it_is_reexported() -> None:
    for info in pkgutil.walk_packages(llamaclient.__path__, "llamaclient."):
        if info.ispkg:
            continue
        module = importlib.import_module(info.name)
        assert hasattr(module, "__all__"), info.name
        for name in module.__all__:
            assert getattr(module, name) is not None


def test_config_repr_hides_the_api_key() -> None:
    config = llamaclient.Config("http://127.0.0.1:1", api_key="sk-secret-123")
    assert "sk-secret-123" not in repr(config)
    assert "sk-secret-123" not in str(config)


def test_config_rich_repr_hides_the_api_key() -> None:
    config = llamaclient.Config("http://127.0.0.1:1", api_key="sk-secret-123")
    assert "sk-secret-123" not in repr(list(config.__rich_repr__()))


def test_an_api_key_that_cannot_be_a_header_is_refused_without_showing_it() -> None:
    import pytest

    for key in ("sk-secret\r\nX-Evil: 1", "sk-sécret", "sk-secret\n"):
        with pytest.raises(ValueError, match="printable ASCII") as info:
            llamaclient.Client(llamaclient.Config("http://127.0.0.1:1", api_key=key))
        assert "secret" not in str(info.value)


def test_transport_choice_follows_the_url() -> None:
    import pytest

    from llamaclient._transports.choose import choose_transport

    def kind(url: str, transport: str = "auto", backend: str = "asyncio") -> str:
        config = llamaclient.Config(url, transport=transport)  # type: ignore[arg-type]
        return type(choose_transport(config, backend=backend)).__name__  # type: ignore[arg-type]

    assert kind("http://127.0.0.1:1") == "AsyncioTransport"
    assert kind("HTTPS://example.invalid") == "AsyncioTransport"  # TLS on our own stack
    assert kind("https://example.invalid", "asyncio") == "AsyncioTransport"
    assert kind("http://127.0.0.1:1", "httpx") == "HttpxTransport"
    assert kind("http://127.0.0.1:1", backend="other") == "HttpxTransport"  # trio
    assert kind("https://example.invalid", backend="other") == "HttpxTransport"
    with pytest.raises(ValueError, match="asyncio event loop"):
        kind("http://127.0.0.1:1", "asyncio", backend="other")


def test_a_proxy_in_the_environment_routes_through_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    from llamaclient._transports.choose import choose_transport

    config = llamaclient.Config("http://10.1.2.3:8080")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert type(choose_transport(config, backend="asyncio")).__name__ == "HttpxTransport"
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    assert type(choose_transport(config, backend="asyncio")).__name__ == "AsyncioTransport"
