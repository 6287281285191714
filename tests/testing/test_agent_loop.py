"""An agent loop tested without a server (the example of docs/testing.md, verbatim)."""

from __future__ import annotations

import json

import pytest

from llamaclient import (
    AssistantMessage,
    ChatMessage,
    ChatRequest,
    Client,
    ToolCall,
    ToolCallDone,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from llamaclient.testing import FakeLlama

READ_FILE = ToolSchema(
    "read_file",
    "Read a text file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
FILES = {"notes.txt": "Buy milk."}


async def run_agent(client: Client, question: str) -> str:
    """The agent under test: ask, run each tool call as soon as it is complete, send the
    results back (the assistant turn echoed exactly), until the model answers."""
    messages: list[ChatMessage] = [UserMessage(question)]
    while True:
        results: list[ChatMessage] = []
        async with client.chat(ChatRequest(messages, tools=[READ_FILE])) as stream:
            async for event in stream:
                if isinstance(event, ToolCallDone):
                    path = json.loads(event.call.arguments)["path"]
                    results.append(ToolMessage(event.call.id, FILES.get(path, "no such file")))
        completion = stream.completion
        messages += [completion.message(), *results]
        if not results:
            return completion.content or ""


@pytest.mark.anyio
async def test_the_agent_reads_the_file_then_answers(fake_llama: FakeLlama) -> None:
    fake_llama.reply(
        reasoning="I should read the notes.",
        tool_calls=[{"id": "call-1", "name": "read_file", "arguments": {"path": "notes.txt"}}],
    )
    fake_llama.reply("Your notes say: Buy milk.")

    async with fake_llama.client() as client:
        answer = await run_agent(client, "What is in my notes?")

    assert answer == "Your notes say: Buy milk."
    first, second = fake_llama.requests
    assert first.tools == [READ_FILE]
    assert second.messages == [
        UserMessage("What is in my notes?"),
        AssistantMessage(
            reasoning_content="I should read the notes.",
            tool_calls=(ToolCall("call-1", "read_file", '{"path": "notes.txt"}'),),
        ),
        ToolMessage("call-1", "Buy milk."),
    ]
    assert fake_llama.pending == 0
