"""Real load balancers on loopback in front of llama-servers: nginx and HAProxy from Debian,
started with a configuration written for the test (``NGINX`` and ``HAPROXY`` below are what
``docs/balancers.md`` shows), as the user of the issue would run them.

``balancer(kind, ports, hashed)`` starts one in front of ``ports``: ``hashed`` keeps a
session on one backend by the ``X-Session-Id`` header (consistent hashing), else it is
round-robin. Both retry the next backend when one refuses the connection.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools.llama_server import free_port

__all__ = ["HAPROXY", "NGINX", "available", "balancer"]

# The nginx configuration (nginx -c FILE -p DIR): the `hash` line is the affinity; without
# it, nginx balances round-robin. Buffering off: the SSE stream goes through as it comes.
NGINX = """\
worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    upstream llama {{
        {hash}
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://llama;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
            proxy_next_upstream error timeout;
        }}
    }}
}}
"""
NGINX_HASH = "hash $http_x_session_id consistent;"

# The HAProxy configuration (haproxy -f FILE): `balance hdr(X-Session-Id)` with
# `hash-type consistent` is the affinity; without them, round-robin.
HAPROXY = """\
global
    maxconn 1024
defaults
    mode http
    timeout connect 2s
    timeout client 300s
    timeout server 300s
    retries 2
    option redispatch
frontend front
    bind 127.0.0.1:{port}
    default_backend llama
backend llama
    {hash}
{servers}
"""
HAPROXY_HASH = "balance hdr(X-Session-Id)\n    hash-type consistent"


def available(kind: str) -> bool:
    return shutil.which(kind) is not None


def _config(kind: str, prefix: Path, port: int, ports: list[int], hashed: bool) -> Path:
    if kind == "nginx":
        servers = "\n".join(f"        server 127.0.0.1:{p};" for p in ports)
        text = NGINX.format(
            prefix=prefix, port=port, servers=servers, hash=NGINX_HASH if hashed else ""
        )
        path = prefix / "nginx.conf"
    else:
        lines = (f"    server s{i} 127.0.0.1:{p} check inter 500ms" for i, p in enumerate(ports))
        servers = "\n".join(lines)
        text = HAPROXY.format(port=port, servers=servers, hash=HAPROXY_HASH if hashed else "")
        path = prefix / "haproxy.cfg"
    path.write_text(text)
    return path


@contextmanager
def balancer(kind: str, prefix: Path, ports: list[int], hashed: bool) -> Iterator[str]:
    """``kind`` ("nginx" or "haproxy") in front of ``ports`` on a free port; its URL."""
    prefix.mkdir(parents=True, exist_ok=True)
    port = free_port()
    path = _config(kind, prefix, port, ports, hashed)
    if kind == "nginx":
        argv = ["nginx", "-p", str(prefix), "-c", str(path), "-g", "daemon off;"]
    else:
        argv = ["haproxy", "-f", str(path), "-db"]
    log = prefix / f"{kind}.log"
    with log.open("wb") as err:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        try:
            _wait_listening(port, process, log)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the balancer exited: {log.read_text()}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("the balancer is not listening after 10 s")
