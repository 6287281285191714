"""``llamaclient.__all__`` lists exactly the public names, and each private module's too."""

from __future__ import annotations

import importlib
import pkgutil

import llamaclient


def test_all_is_exactly_the_public_names() -> None:
    public = {name for name in dir(llamaclient) if not name.startswith("_")}
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

    def kind(url: str, transport: str = "auto") -> str:
        client = llamaclient.Client(llamaclient.Config(url, transport=transport))  # type: ignore[arg-type]
        return type(client._transport).__name__

    assert kind("http://127.0.0.1:1") == "AsyncioTransport"
    assert kind("HTTPS://example.invalid") == "HttpxTransport"
    assert kind("http://127.0.0.1:1", "httpx") == "HttpxTransport"
    with pytest.raises(ValueError, match="http:// only"):
        kind("https://example.invalid", "asyncio")
