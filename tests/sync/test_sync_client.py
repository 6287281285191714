"""``llamaclient.sync``: the async client's methods, blocking, on an event-loop thread of its
own; inside a running event loop (a Jupyter cell), and from several threads at once.

FakeLlama serves these (its transport runs in the sync client's loop); Ctrl-C, with a real
SIGINT and a real socket, is ``test_interrupt.py``."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import msgspec
import pytest

from llamaclient import (
    ChatRequest,
    Completion,
    Config,
    Content,
    HTTPStatusError,
    OutputError,
    Progress,
    Routed,
    RunOutcome,
    StalledError,
    StreamState,
    ToolCallDone,
    ToolMessage,
    ToolResult,
    Tools,
    UserMessage,
    sync,
)
from llamaclient.testing import FakeLlama, FakeRequest, Reply

FAST: dict[str, Any] = {"stall_timeout": 1.0, "wait_timeout": 5.0, "retry_backoff": 0.01}


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "llamaclient-sync"]


@pytest.fixture
def fake() -> FakeLlama:
    return FakeLlama()


@pytest.fixture
def client(fake: FakeLlama) -> Iterator[sync.Client]:
    with sync.Client(Config(fake.url, **FAST), transport=fake.transport()) as client:
        yield client


def hi(text: str = "Hi") -> ChatRequest:
    return ChatRequest([UserMessage(text)])


class City(msgspec.Struct):
    name: str


def test_a_chat_iterates_its_events_then_has_the_completion(
    client: sync.Client, fake: FakeLlama
) -> None:
    fake.reply("Hello there, friend.", reasoning="Greet back.")
    with client.chat(hi()) as stream:
        before = stream.state
        events = list(stream)
    assert before is StreamState.PENDING
    texts = [e.text for e in events if isinstance(e, Content)]
    assert "".join(texts) == "Hello there, friend."
    assert isinstance(events[0], Progress)
    assert stream.completion.content == "Hello there, friend."
    assert stream.completion.reasoning_content == "Greet back."
    assert stream.finished
    assert stream.state is StreamState.FINISHED
    assert stream.error is None
    assert stream.partial is stream.completion
    assert stream.conversation_id is not None
    assert stream.route is None
    assert stream.request.messages == [UserMessage("Hi")]


def test_complete_and_parse_return_directly(client: sync.Client, fake: FakeLlama) -> None:
    fake.reply("Done.")
    fake.reply('{"name": "Paris"}')
    fake.reply('{"nom": 1}')
    completion = client.complete(hi())
    assert isinstance(completion, Completion)
    assert completion.content == "Done."
    assert client.parse(hi("Where?"), City) == City("Paris")
    assert fake.requests[1].settings["response_format"]["type"] == "json_schema"
    with pytest.raises(OutputError):
        client.parse(hi("Where?"), City)


def test_the_other_methods_return_what_the_async_ones_do(
    client: sync.Client, fake: FakeLlama
) -> None:
    assert client.health() == {"status": "ok"}
    assert client.props().total_slots == 1
    assert [s.id for s in client.slots()] == [0]
    assert [m.id for m in client.models()] == [fake.model]
    assert client.cancel("abc") is False  # this fake has no resumable streams
    assert "sync.Client(base_url='http://fake-llama.test'" in repr(client)


def test_the_typed_errors_come_out_as_they_are(client: sync.Client, fake: FakeLlama) -> None:
    fake.fail(error="model exploded")
    with pytest.raises(HTTPStatusError, match="model exploded") as failed:
        client.complete(hi())
    assert failed.value.status == 500
    fake.fail(stall=True, cut_after=2).reply("one two three")
    stream = client.chat(hi())
    with pytest.raises(StalledError) as stalled:
        for _ in stream:
            pass
    assert stream.error is stalled.value
    assert stream.state is StreamState.FAILED
    assert stream.partial.content == "one two"
    with pytest.raises(RuntimeError, match="StalledError"):
        stream.completion  # noqa: B018


def test_a_bad_request_is_a_value_error_before_any_network(client: sync.Client) -> None:
    with pytest.raises(ValueError, match="output= sets response_format"):
        client.chat(ChatRequest([UserMessage("x")], json_schema={}), output=City)


def test_leaving_a_stream_early_stops_the_turn_on_the_server(fake: FakeLlama) -> None:
    fake.resumable = True
    fake.reply("a b c d e f g h", pace=0.05)
    with sync.Client(Config(fake.url, **FAST), transport=fake.transport()) as client:
        with client.chat(hi()) as stream:
            for event in stream:
                if isinstance(event, Content):
                    break
        assert stream.state is StreamState.STOPPED
    assert ("DELETE", "/v1/stream") in [(c.method, c.path) for c in fake.calls]


def test_a_dropped_stream_closes_its_turn_in_its_own_loop(fake: FakeLlama) -> None:
    fake.resumable = True
    fake.reply("a b c d e f g h", pace=0.05)
    with sync.Client(Config(fake.url, **FAST), transport=fake.transport()) as client:
        stream = client.chat(hi())
        next(stream)
        del stream
        gc.collect()
        deadline = time.monotonic() + 5
        while ("DELETE", "/v1/stream") not in [
            (c.method, c.path) for c in fake.calls
        ] and time.monotonic() < deadline:
            time.sleep(0.01)
    assert ("DELETE", "/v1/stream") in [(c.method, c.path) for c in fake.calls]


def test_close_stops_the_loop_thread(fake: FakeLlama) -> None:
    before = len(loop_threads())
    client = sync.Client(Config(fake.url), transport=fake.transport())
    assert len(loop_threads()) == before + 1
    client.close()
    client.close()  # once is enough; twice is harmless
    assert len(loop_threads()) == before
    with pytest.raises(RuntimeError, match="this sync client is closed"):
        client.complete(hi())


def test_the_sync_client_works_inside_a_running_event_loop_as_in_jupyter(
    fake: FakeLlama,
) -> None:
    """A notebook cell runs inside the kernel's running asyncio loop: ``asyncio.run()`` is
    refused there, and a blocking call must not need that loop. The sync client's own loop
    thread does the work while the cell's loop is blocked."""
    fake.reply("From a cell.")
    fake.reply("Again.")

    async def cell() -> tuple[str | None, list[str]]:
        refused = asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="cannot be called from a running event loop"):
            asyncio.run(refused)
        refused.close()
        with sync.Client(Config(fake.url, **FAST), transport=fake.transport()) as client:
            answer = client.complete(hi()).content
            with client.chat(hi()) as stream:
                texts = [e.text for e in stream if isinstance(e, Content)]
        return answer, texts

    answer, texts = asyncio.run(cell())
    assert answer == "From a cell."
    assert "".join(texts) == "Again."


def test_the_sync_client_works_inside_a_running_trio_loop_too(fake: FakeLlama) -> None:
    fake.reply("From trio.")

    async def main() -> str | None:
        with sync.Client(Config(fake.url, **FAST), transport=fake.transport()) as client:
            return client.complete(hi()).content

    assert anyio.run(main, backend="trio") == "From trio."


def test_several_threads_use_one_client_at_once(fake: FakeLlama) -> None:
    """Eight threads, each its own question: every request reaches the server before the
    first answer is over (they run together on the one loop), and each thread gets its own
    answer, streamed or whole."""
    arrived: list[float] = []

    def echo(request: FakeRequest) -> Reply:
        arrived.append(time.monotonic())
        last = request.last
        assert isinstance(last, UserMessage)
        assert isinstance(last.content, str)
        return Reply(f"echo {last.content}", pace=0.3)  # 3 chunks: about 0.9 s

    fake.reply(echo)
    answers: dict[int, str | None] = {}
    finished: list[float] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker(client: sync.Client, i: int) -> None:
        try:
            barrier.wait(5)
            if i % 2:
                answers[i] = client.complete(hi(str(i))).content
            else:
                with client.chat(hi(str(i))) as stream:
                    answers[i] = "".join(e.text for e in stream if isinstance(e, Content))
            finished.append(time.monotonic())
        except BaseException as exc:
            errors.append(exc)

    with sync.Client(Config(fake.url, **FAST), transport=fake.transport()) as client:
        threads = [threading.Thread(target=worker, args=(client, i)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert errors == []
    assert answers == {i: f"echo {i}" for i in range(8)}
    assert len(arrived) == 8
    assert max(arrived) < min(finished)


def test_a_pool_routes_first_and_answers(fake: FakeLlama) -> None:
    other = FakeLlama()
    fake.reply("from one")
    other.reply("from one")
    configs = [Config("http://a.test", **FAST), Config("http://b.test", **FAST)]
    with sync.Pool(configs, transports=[fake.transport(), other.transport()]) as pool:
        with pool.chat(hi()) as stream:
            events = list(stream)
        assert isinstance(events[0], Routed)
        assert stream.route == events[0]
        assert stream.completion.content == "from one"
        assert "sync.Pool(" in repr(pool)


def test_a_sync_run_runs_plain_tools_in_worker_threads(
    client: sync.Client, fake: FakeLlama
) -> None:
    threads: set[int] = set()

    def read_file(path: str) -> str:
        """Read a file."""
        threads.add(threading.get_ident())
        return f"contents of {path}"

    def model(request: FakeRequest) -> Reply:
        if isinstance(request.last, ToolMessage):
            return Reply("Read.")
        calls = [{"name": "read_file", "arguments": {"path": p}} for p in ("a", "b")]
        return Reply(tool_calls=calls)

    fake.reply(model)
    with client.run_tools(hi("Read a and b."), Tools([read_file])) as run:
        events = list(run)
    assert run.outcome is RunOutcome.ANSWERED
    assert run.completion.content == "Read."
    assert [e.message.content for e in events if isinstance(e, ToolResult)] == [
        "contents of a",
        "contents of b",
    ]
    assert threading.get_ident() not in threads
    assert not {t.ident for t in loop_threads()} & threads
    assert run.turns == 2
    assert run.generated_tokens > 0
    assert run.usage.prompt_tokens
    assert run.stream is not None
    assert run.stream.finished
    assert isinstance(run.messages[-1].content, str)
    assert len(run.completions) == 2
    assert run.error is None


def test_a_run_iterated_without_with_closes_itself_at_its_end(
    client: sync.Client, fake: FakeLlama
) -> None:
    fake.reply(tool_calls=[{"name": "now", "arguments": {}}])
    fake.reply("It is noon.")

    def now() -> str:
        return "noon"

    run = client.run_tools(hi("Time?"), Tools([now]))
    dones = [e for e in run if isinstance(e, ToolCallDone)]
    assert len(dones) == 1
    assert run.completion.content == "It is noon."
    assert run._held is None  # released: no task holds its task group any more
    assert client.run_tools(hi("Again"), Tools([now]), max_turns=1) is not None


def test_a_plain_tool_may_call_the_sync_client_itself(client: sync.Client, fake: FakeLlama) -> None:
    """A tool runs in a worker thread, not in the loop: a nested blocking call works (no
    deadlock), while one from the loop's own thread is refused with a clear error."""

    def ask(question: str) -> str:
        return client.complete(hi(question)).content or ""

    async def ask_inline(question: str) -> str:
        return client.complete(hi(question)).content or ""

    def model(request: FakeRequest) -> Reply | str:
        last = request.last
        if isinstance(last, ToolMessage):
            return f"The helper said: {last.content}"
        if request.tools:
            name = "ask" if len(fake.requests) == 1 else "ask_inline"
            return Reply(tool_calls=[{"name": name, "arguments": {"question": "inner"}}])
        return "inner answer"

    fake.reply(model)
    assert client.run_tools(hi("Use the helper."), Tools([ask])).collect().content == (
        "The helper said: inner answer"
    )
    run = client.run_tools(hi("Again."), Tools([ask_inline]))
    run.collect()
    text = run.messages[2].content
    assert isinstance(text, str)
    assert text.startswith(
        "error: RuntimeError: the sync client was called from its own event loop"
    )


def test_stopping_a_run_early_stops_its_turn(fake: FakeLlama) -> None:
    fake.resumable = True
    fake.reply("a b c d e f g h", pace=0.05)
    with sync.Client(Config(fake.url, **FAST), transport=fake.transport()) as client:
        with client.run_tools(hi(), Tools([])) as run:
            for event in run:
                if isinstance(event, Content):
                    break
        assert run.outcome is None
        assert run.stream is not None
        assert run.stream.state is StreamState.STOPPED
    assert ("DELETE", "/v1/stream") in [(c.method, c.path) for c in fake.calls]
