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
    for info in pkgutil.iter_modules(llamaclient.__path__):
        module = importlib.import_module(f"llamaclient.{info.name}")
        assert hasattr(module, "__all__"), info.name
        for name in module.__all__:
            assert getattr(module, name) is not None


def test_config_repr_hides_the_api_key() -> None:
    config = llamaclient.Config("http://127.0.0.1:1", api_key="sk-secret-123")
    assert "sk-secret-123" not in repr(config)
    assert "sk-secret-123" not in str(config)
