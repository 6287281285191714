"""The trial's program against a real llama-server, with and without a ``Limiter``:
``python -m bench.limiter_live [--busy N]``.

100 agent tasks, each a two-turn conversation (the second turn sends the first answer back
exactly), all started together, on a 4-slot llama-server with the scripted model
(``-np 4 --metrics``). Reported, for each way (no limiter, ``Limiter.from_server``, and two
spare places over it): the wall time, the client's CPU time, the p50 and p99 turn latency
(``chat()`` to its Completion), the TCP connections the client opened and the most open at
once (counted by a relay in front of the server), and the most requests the server had
deferred (``llamacpp:requests_deferred`` in ``/metrics``, read every 20 ms).

``--busy N`` runs N busy loops (processes spinning on the CPU) beside the server and the
client for the whole run: the loaded machine of the anomaly in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from devtools.llama_server import LlamaServer, find_binary
from devtools.scripted_model import write_model
from llamaclient import ChatMessage, ChatRequest, Client, Config, Limiter, UserMessage

TASKS, TURNS, SLOTS = 100, 2, 4
_DEFERRED = re.compile(rb"^llamacpp:requests_deferred (\S+)$", re.M)


@dataclass
class Relay:
    """A TCP relay in front of the server that counts the connections made through it."""

    target: int
    opened: int = 0
    open_now: int = 0
    most_open: int = 0
    port: int = 0
    _server: asyncio.Server | None = field(default=None, repr=False)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except OSError:
            pass
        finally:
            self.open_now -= 1
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def _deferred(base_url: str, stop: asyncio.Event) -> int:
    """The most requests the server had deferred at once, read every 20 ms."""
    most = 0
    async with httpx.AsyncClient() as http:
        while not stop.is_set():
            try:
                found = _DEFERRED.search((await http.get(f"{base_url}/metrics")).content)
            except httpx.HTTPError:
                found = None
            if found:
                most = max(most, int(float(found.group(1))))
            await asyncio.sleep(0.02)
    return most


async def _conversation(client: Client, latencies: list[float]) -> None:
    messages: list[ChatMessage] = [UserMessage("Count with me.")]
    for turn in range(TURNS):
        started = time.monotonic()
        completion = await client.complete(ChatRequest(list(messages), max_tokens=24))
        latencies.append(time.monotonic() - started)
        messages += [completion.message(), UserMessage(f"And again ({turn}).")]


async def run(server: LlamaServer, spare: int | None) -> dict[str, float]:
    """One run: no limiter (``spare`` None), or ``Limiter.from_server`` with ``spare``
    places over the server's slots."""
    relay = Relay(server.port)
    await relay.start()
    url = f"http://127.0.0.1:{relay.port}"
    config = Config(url, wait_timeout=600.0, stall_timeout=120.0, max_retries=3)
    stop = asyncio.Event()
    watch = asyncio.create_task(_deferred(server.base_url, stop))
    latencies: list[float] = []
    async with Client(config) as client:
        if spare is not None:
            limiter = await Limiter.from_server(client)
            limiter = Limiter(limiter.max_in_flight + spare)
            client = Client(config, limiter=limiter)
        started, cpu = time.monotonic(), time.process_time()
        await asyncio.gather(*(_conversation(client, latencies) for _ in range(TASKS)))
        wall, cpu = time.monotonic() - started, time.process_time() - cpu
        await client.aclose()
    stop.set()
    deferred = await watch
    await relay.stop()
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "wall s": wall,
        "client CPU s": cpu,
        "turn p50 s": statistics.median(latencies),
        "turn p99 s": cuts[98],
        "connections": relay.opened,
        "most open": relay.most_open,
        "most deferred": deferred,
    }


def _spin() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.limiter_live", description=__doc__)
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside the run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each way, alternated")
    parser.add_argument("--threads", type=int, help="llama-server's -t (default: its own)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    model = write_model(tmp / "scripted.gguf")
    flags: tuple[str, ...] = ("-np", str(SLOTS), "-c", str(SLOTS * 2048), "--metrics")
    if args.threads:
        flags += ("-t", str(args.threads))
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    with LlamaServer(model, *flags, log_path=tmp / "server.log", binary=find_binary()) as server:
        for spinner in spinners:
            spinner.start()
        try:
            for round_ in range(args.rounds):
                for spare in (None, 0, SLOTS // 2):
                    result = asyncio.run(run(server, spare))
                    shown = ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                      for k, v in result.items())  # fmt: skip
                    way = "no limiter" if spare is None else f"Limiter(slots + {spare})"
                    threads = f", -t {args.threads}" if args.threads else ""
                    print(f"round {round_ + 1}, busy {args.busy}{threads}, {way}: {shown}")
        finally:
            for spinner in spinners:
                spinner.kill()


if __name__ == "__main__":
    main()
