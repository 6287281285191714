"""LiteLLM's proxy (PyPI's ``litellm[proxy]``, installed by ``nox -s litellm``) on loopback in
front of llama-servers, started with the configuration ``docs/balancers.md`` shows: one
``model_list`` entry per server, each an ``openai/`` model at the server's ``/v1``.

``litellm_proxy(models)`` starts it (``models``: model name -> the server's base URL) and
yields its base URL; the client reaches it with ``KEY``. ``available()`` says whether the
proxy is installed here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from devtools.llama_server import free_port

__all__ = ["CONFIG", "KEY", "available", "executable", "litellm_proxy"]

KEY = "sk-llamaclient-test-0123456789abcdef"  # the proxy's master key (LiteLLM wants one)
START_TIMEOUT = 180.0  # seconds: LiteLLM imports for ~20 s on these machines

CONFIG = """\
model_list:
{models}
litellm_settings:
  drop_params: false
"""
MODEL = """\
  - model_name: {name}
    litellm_params:
      model: openai/{name}
      api_base: {url}/v1
      api_key: none
"""


def executable() -> str | None:
    """The ``litellm`` command of this interpreter's environment, or on the PATH."""
    beside = Path(sys.executable).with_name("litellm")
    return str(beside) if beside.exists() else shutil.which("litellm")


def available() -> bool:
    return executable() is not None


@contextmanager
def litellm_proxy(models: Mapping[str, str], workdir: Path) -> Iterator[str]:
    """LiteLLM's proxy in front of ``models`` (name -> a llama-server's base URL); its
    base URL, until the block ends."""
    command = executable()
    assert command is not None, "LiteLLM's proxy is not installed (nox -s litellm)"
    entries = "".join(MODEL.format(name=name, url=url) for name, url in models.items())
    config = workdir / "litellm.yaml"
    config.write_text(CONFIG.format(models=entries))
    port = free_port()
    env = {
        **os.environ,
        "LITELLM_MASTER_KEY": KEY,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch from GitHub at start-up
        "LITELLM_TELEMETRY": "False",
    }
    log = (workdir / "litellm.log").open("wb")
    process = subprocess.Popen(
        [command, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, workdir / "litellm.log")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"LiteLLM exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health/liveliness", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    tail = log.read_text()[-3000:]
    raise RuntimeError(f"LiteLLM did not start in {START_TIMEOUT:.0f} s:\n{tail}")
