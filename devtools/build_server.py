"""Install a *portable* llama-server into the running interpreter (the code lives in the
package, ``llamaclient._embedded.build``, which the CLI's embedded default uses too).

    python -m devtools.build_server          # build once (~5-7 min on 2 cores), then seconds
"""

from __future__ import annotations

from llamaclient._embedded.build import (
    CMAKE_FLAGS,
    PACKAGE,
    STAMP,
    build_key,
    cmake_args,
    ensure_installed,
    wheel_dir,
)

__all__ = [
    "CMAKE_FLAGS",
    "PACKAGE",
    "STAMP",
    "build_key",
    "cmake_args",
    "ensure_installed",
    "wheel_dir",
]

if __name__ == "__main__":
    print(ensure_installed())
