"""``python -m llamaclient``: the ``llamaclient`` command."""

from __future__ import annotations

from ._cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
