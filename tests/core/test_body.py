"""build_body: seed 001's table, its rules, determinism, and clear errors for bad requests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamaclient import (
    AssistantMessage,
    ChatMessage,
    ChatRequest,
    Config,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSchema,
    UserMessage,
    build_body,
)

CFG = Config(
    base_url="http://127.0.0.1:8080",
    model="m",
    max_tokens=512,
    temperature=0.6,
    top_p=0.95,
    top_k=20,
)
TOOL = ToolSchema(
    "read_file",
    "Read a file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def body(request: ChatRequest, config: Config = CFG) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(build_body(config, request))
    return out


def test_seed_example_with_one_tool_and_thinking() -> None:
    got = body(ChatRequest([UserMessage("hi")], tools=[TOOL], slot=3, thinking=True))
    assert got == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file",
                    "parameters": TOOL.parameters,
                },
            }
        ],
        "id_slot": 3,
        "cache_prompt": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_progress": True,
        "timings_per_token": True,
        "reasoning_control": True,
        "max_tokens": 512,
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "chat_template_kwargs": {"enable_thinking": True},
    }


@pytest.mark.parametrize(
    ("message", "wire"),
    [
        (SystemMessage("s"), {"role": "system", "content": "s"}),
        (UserMessage("u"), {"role": "user", "content": "u"}),
        (AssistantMessage("text"), {"role": "assistant", "content": "text"}),
        (
            AssistantMessage(None, "why", (ToolCall("c1", "read_file", '{"path": "a"}'),)),
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "why",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a"}'},
                    }
                ],
            },
        ),
    ],
)
def test_each_message_kind(message: Any, wire: dict[str, Any]) -> None:
    assert body(ChatRequest([message]))["messages"] == [wire]


def test_tool_message_follows_its_call() -> None:
    call = ToolCall("c1", "read_file", "{}")
    msgs: list[ChatMessage] = [
        UserMessage("u"),
        AssistantMessage(tool_calls=(call,)),
        ToolMessage("c1", "data"),
    ]
    assert body(ChatRequest(msgs))["messages"][2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "data",
    }


def test_arguments_stay_the_exact_string() -> None:
    raw = '{ "b":1.50, "a" : "\\u00e9" }'
    msgs = [AssistantMessage(tool_calls=(ToolCall("c", "f", raw),))]
    assert raw.encode() in build_body(CFG, ChatRequest(msgs)).replace(b'\\"', b'"').replace(
        b"\\\\", b"\\"
    )
    assert body(ChatRequest(msgs))["messages"][0]["tool_calls"][0]["function"]["arguments"] == raw


def test_tool_call_extra_fields_go_back() -> None:
    call = ToolCall("c", "f", "{}", {"extra_content": {"sig": "x"}})
    wire = body(ChatRequest([AssistantMessage(tool_calls=(call,))]))["messages"][0]
    assert wire["tool_calls"][0]["extra_content"] == {"sig": "x"}


def test_left_out_when_empty_or_none() -> None:
    got = body(ChatRequest([UserMessage("u")]), Config("http://x"))
    for key in (
        "tools",
        "id_slot",
        "model",
        "max_tokens",
        "temperature",
        "stop",
        "logit_bias",
        "tool_choice",
        "seed",
    ):
        assert key not in got
    assert got["chat_template_kwargs"] == {"enable_thinking": False}


def test_request_overrides_config_and_extra_overrides_all() -> None:
    req = ChatRequest(
        [UserMessage("u")],
        max_tokens=7,
        temperature=0.0,
        extra={"cache_prompt": False, "n_probs": 2},
    )
    got = body(req)
    assert (got["max_tokens"], got["temperature"], got["top_k"]) == (7, 0.0, 20)
    assert got["cache_prompt"] is False
    assert got["n_probs"] == 2


def test_sampling_and_constraints() -> None:
    bias: dict[int | str, float] = {"Done.": -100.0, 5: 2.0, "364": -1.0, "٣": 1.0, "-3": 0.5}
    req = ChatRequest(
        [UserMessage("u")],
        stop=["\n"],
        seed=1,
        min_p=0.1,
        logit_bias=bias,
        tool_choice="required",
        parallel_tool_calls=False,
        json_schema={"type": "object"},
        sse_ping_interval=5,
    )
    got = body(req)
    assert got["stop"] == ["\n"]
    # decimal-string keys are token ids (the OpenAI form); other strings are text to tokenize
    assert got["logit_bias"] == [["Done.", -100.0], [5, 2.0], [364, -1.0], ["٣", 1.0], ["-3", 0.5]]
    assert got["tool_choice"] == "required"
    assert got["parallel_tool_calls"] is False
    assert got["json_schema"] == {"type": "object"}
    assert got["sse_ping_interval"] == 5


def test_same_inputs_same_bytes() -> None:
    def make() -> ChatRequest:
        return ChatRequest(
            [SystemMessage("s"), UserMessage("u")], tools=[TOOL], extra={"b": 1, "a": 2}
        )

    assert build_body(CFG, make()) == build_body(CFG, make())


def test_non_streamed_body() -> None:
    got = json.loads(build_body(CFG, ChatRequest([UserMessage("u")]), stream=False))
    assert "stream" not in got
    assert "return_progress" not in got


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (ChatRequest([]), "no messages"),
        (
            ChatRequest([UserMessage("u"), ToolMessage("nope", "x")]),
            "answers tool call 'nope', which no earlier assistant",
        ),
        (
            ChatRequest([UserMessage("u")], tools=[ToolSchema("f", "", {"type": "array"})]),
            "tool 'f': parameters must be a JSON Schema object",
        ),
        (
            ChatRequest([UserMessage("u")], tools=[ToolSchema("f"), ToolSchema("f")]),
            "two tools are named 'f'",
        ),
        (ChatRequest([UserMessage("u")], tools=[ToolSchema("")]), "non-empty name"),
        (
            ChatRequest([UserMessage("u")], tool_choice="f"),  # type: ignore[arg-type]
            "tool_choice must be one of",
        ),
        (ChatRequest([UserMessage("u")], slot=-1), "slot must be >= 0"),
        (ChatRequest(["hello"]), "messages\\[0\\] is a str"),  # type: ignore[list-item]
        (ChatRequest("hello"), "not a string"),  # type: ignore[arg-type]
        (ChatRequest([UserMessage(5)]), "messages\\[0\\].content must be a str"),  # type: ignore[arg-type]
        (ChatRequest([UserMessage("u")], thinking_budget=-1), "thinking_budget"),
        (ChatRequest([UserMessage("u")], stop="\n"), "stop must be a sequence"),
    ],
)
def test_invalid_requests_raise_value_error(request_: ChatRequest, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_body(CFG, request_)


def test_logit_bias_pairs_go_as_given() -> None:
    """Pairs are llama-server's own form: a str there is text, even when it is all digits."""
    got = body(ChatRequest([UserMessage("u")], logit_bias=[("364", -1.0), (7, 2.0)]))
    assert got["logit_bias"] == [["364", -1.0], [7, 2.0]]
