"""The ``fake_llama`` fixture for these tests. Installed, the package's ``pytest11`` entry
point provides it everywhere; this import makes these tests independent of the install."""

from llamaclient.testing.plugin import fake_llama

__all__ = ["fake_llama"]
