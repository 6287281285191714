"""Tools that run while the model writes the next call (docs/testing.md's example, verbatim)."""

from __future__ import annotations

import json

import anyio
import anyio.lowlevel
import pytest

from llamaclient import (
    ChatMessage,
    ChatRequest,
    Client,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from llamaclient.testing import FakeLlama, FakeRequest, Reply

READ_FILE = ToolSchema(
    "read_file",
    "Read a text file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
FILES = {"a.txt": "Apples.", "b.txt": "Bananas."}


async def read_file(call: ToolCall, results: list[ToolMessage], log: list[str]) -> None:
    log.append(f"{call.arguments} starts")
    await anyio.lowlevel.checkpoint()  # the tool's own work: any await
    results.append(ToolMessage(call.id, FILES[json.loads(call.arguments)["path"]]))
    log.append(f"{call.arguments} ends")


async def run_agent(client: Client, question: str, log: list[str]) -> str:
    """The agent under test: each tool call runs in a task of its own from the moment
    ``ToolCallDone`` says it is complete, while the model goes on writing."""
    messages: list[ChatMessage] = [UserMessage(question)]
    while True:
        results: list[ToolMessage] = []
        request = ChatRequest(messages, tools=[READ_FILE])
        async with anyio.create_task_group() as tools, client.chat(request) as stream:
            async for event in stream:
                if isinstance(event, ToolCallDelta):
                    log.append(f"model writes call {event.index}")
                elif isinstance(event, ToolCallDone):
                    log.append(f"call {event.index} done")
                    tools.start_soon(read_file, event.call, results, log)
        completion = stream.completion
        messages += [completion.message(), *results]
        if not results:
            return completion.content or ""


def model(request: FakeRequest) -> Reply:
    """The scripted model, decided by what the agent sent: it asks for both files, and
    answers once their contents are in the conversation."""
    if isinstance(request.last, ToolMessage):
        return Reply("Apples and bananas.")
    calls = [{"name": "read_file", "arguments": {"path": path}} for path in FILES]
    return Reply(tool_calls=calls, chunk=4, pace=0.01)  # 4 characters every 10 ms


@pytest.mark.anyio
async def test_the_first_tool_runs_while_the_model_writes_the_second_call(
    fake_llama: FakeLlama,
) -> None:
    fake_llama.reply(model)
    log: list[str] = []

    async with fake_llama.client() as client:
        answer = await run_agent(client, "What is in a.txt and b.txt?", log)

    assert answer == "Apples and bananas."
    first_tool_ends = log.index('{"path": "a.txt"} ends')
    assert log.index("call 0 done") < first_tool_ends < log.index("call 1 done")
    assert "model writes call 1" in log[first_tool_ends:]  # the model was still writing
    results = fake_llama.requests[1].messages[2:]
    assert [m.content for m in results if isinstance(m, ToolMessage)] == ["Apples.", "Bananas."]
