"""build_body: seed 001's table, its rules, determinism, and clear errors for bad requests."""

from __future__ import annotations

import json
import re
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
        (ChatRequest(["hello"]), "messages\\[0\\] is a str"),  # type: ignore[list-item]
        (ChatRequest([UserMessage(5)]), "messages\\[0\\].content must be a str"),  # type: ignore[arg-type]
    ],
)
def test_invalid_requests_raise_value_error(request_: ChatRequest, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_body(CFG, request_)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tools": [ToolSchema("f"), ToolSchema("f")]}, "two tools are named 'f'"),
        ({"tools": [ToolSchema("")]}, "non-empty name"),
        ({"tool_choice": "f"}, "tool_choice must be one of"),
        ({"slot": -1}, "slot must be a number >= 0"),
        ({"messages": "hello"}, "not a string"),
        ({"thinking_budget": -1}, "thinking_budget"),
        ({"stop": "\n"}, "stop must be a sequence"),
    ],
)
def test_invalid_settings_raise_value_error_when_the_request_is_made(
    fields: dict[str, Any], message: str
) -> None:
    """Settings are checked at construction, before any body is built or sent."""
    fields = {"messages": [UserMessage("u")], **fields}
    with pytest.raises(ValueError, match=message):
        ChatRequest(**fields)


def test_logit_bias_pairs_go_as_given() -> None:
    """Pairs are llama-server's own form: a str there is text, even when it is all digits."""
    got = body(ChatRequest([UserMessage("u")], logit_bias=[("364", -1.0), (7, 2.0)]))
    assert got["logit_bias"] == [["364", -1.0], [7, 2.0]]


# -- every setting reaches the body, and only when set --------------------------------------
def test_seed_min_p_and_response_format_are_sent() -> None:
    fmt = {"type": "json_object"}
    got = body(ChatRequest([UserMessage("u")], seed=1, min_p=0.1, response_format=fmt))
    assert (got["seed"], got["min_p"], got["response_format"]) == (1, 0.1, fmt)
    plain = body(ChatRequest([UserMessage("u")]))
    for key in ("seed", "min_p", "response_format", "json_schema", "sse_ping_interval"):
        assert key not in plain
    for key in ("parallel_tool_calls", "reasoning_content", "tools", "id_slot"):
        assert key not in plain


def test_request_sampling_overrides_the_config() -> None:
    req = ChatRequest([UserMessage("u")], max_tokens=9, temperature=1.5, top_p=0.5, top_k=3)
    got = body(req)
    assert (got["max_tokens"], got["temperature"], got["top_p"], got["top_k"]) == (9, 1.5, 0.5, 3)
    # a falsy request value is still a value: it overrides the config too
    zero = body(ChatRequest([UserMessage("u")], max_tokens=0, temperature=0.0, top_p=0.0, top_k=0))
    assert (zero["max_tokens"], zero["temperature"], zero["top_p"], zero["top_k"]) == (0, 0, 0, 0)
    # left None, the config's values apply
    got = body(ChatRequest([UserMessage("u")]))
    assert (got["max_tokens"], got["temperature"], got["top_p"], got["top_k"]) == (
        512,
        0.6,
        0.95,
        20,
    )


def test_non_streamed_body_has_no_streaming_fields() -> None:
    got = json.loads(build_body(CFG, ChatRequest([UserMessage("u")]), stream=False))
    for key in ("stream", "stream_options", "return_progress", "timings_per_token"):
        assert key not in got
    assert got["cache_prompt"] is True
    assert got["reasoning_control"] is True
    assert got["chat_template_kwargs"] == {"enable_thinking": False}


def test_streamed_body_asks_for_usage_progress_and_timings() -> None:
    got = body(ChatRequest([UserMessage("u")]))
    assert got["stream"] is True
    assert got["stream_options"] == {"include_usage": True}
    assert got["return_progress"] is True
    assert got["timings_per_token"] is True


def test_model_from_config() -> None:
    assert body(ChatRequest([UserMessage("u")]))["model"] == "m"
    assert "model" not in body(ChatRequest([UserMessage("u")]), Config("http://x", model=""))


@pytest.mark.parametrize("slot", [0, 1, 7])
def test_slot_boundaries(slot: int) -> None:
    assert body(ChatRequest([UserMessage("u")], slot=slot))["id_slot"] == slot


@pytest.mark.parametrize("max_tokens", [0, -1, 1])
def test_max_tokens_boundaries(max_tokens: int) -> None:
    assert body(ChatRequest([UserMessage("u")], max_tokens=max_tokens))["max_tokens"] == max_tokens


def test_thinking_budget_zero_is_valid_and_not_a_body_field() -> None:
    got = body(ChatRequest([UserMessage("u")], thinking_budget=0))
    assert "thinking_budget" not in got
    assert got == body(ChatRequest([UserMessage("u")]))


def test_logit_bias_int_keys_and_empty() -> None:
    bias: dict[int | str, float] = {5: 1.0, "10": -2.0}
    got = body(ChatRequest([UserMessage("u")], logit_bias=bias))
    assert got["logit_bias"] == [[5, 1.0], [10, -2.0]]
    assert body(ChatRequest([UserMessage("u")], logit_bias={}))["logit_bias"] == []


def test_tool_parameters_without_type_are_an_object() -> None:
    tool = ToolSchema("f", "d", {"properties": {"a": {"type": "string"}}})
    got = body(ChatRequest([UserMessage("u")], tools=[tool]))
    assert got["tools"][0]["function"]["parameters"] == {"properties": {"a": {"type": "string"}}}


def test_tool_results_may_answer_any_earlier_call() -> None:
    calls = (ToolCall("a", "f", "{}"), ToolCall("b", "g", "{}"))
    msgs: list[ChatMessage] = [
        UserMessage("u"),
        AssistantMessage(tool_calls=calls),
        ToolMessage("b", "2"),
        ToolMessage("a", "1"),
        AssistantMessage("ok"),
        ToolMessage("a", "again"),
    ]
    got = body(ChatRequest(msgs))["messages"]
    assert [m.get("tool_call_id") for m in got] == [None, None, "b", "a", None, "a"]


def test_assistant_empty_tool_calls_left_out() -> None:
    wire = body(ChatRequest([AssistantMessage("x", tool_calls=())]))["messages"][0]
    assert wire == {"role": "assistant", "content": "x"}


# -- errors say what was wrong and where ---------------------------------------------------
class _NamedThing:
    name = "f"


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (ChatRequest([]), "the request has no messages"),
        (
            ChatRequest([UserMessage("u")], tools=[_NamedThing()]),  # type: ignore[list-item]
            "tools must hold ToolSchema values, not _NamedThing",
        ),
        (
            ChatRequest([UserMessage("u")], tools=[ToolSchema("g", "", {"type": "array"})]),
            "tool 'g': parameters must be a JSON Schema object "
            '({"type": "object", "properties": {...}})',
        ),
        (
            ChatRequest([UserMessage("u")], tools=[ToolSchema("g", "", ["x"])]),  # type: ignore[arg-type]
            "tool 'g': parameters must be a JSON Schema object "
            '({"type": "object", "properties": {...}})',
        ),
        (
            ChatRequest([UserMessage("u"), 5]),  # type: ignore[list-item]
            "messages[1] is a int, not a SystemMessage, UserMessage, AssistantMessage "
            "or ToolMessage",
        ),
        (
            ChatRequest([SystemMessage("s"), UserMessage(5)]),  # type: ignore[arg-type]
            "messages[1].content must be a str, not int "
            "(or a non-empty sequence of TextPart, ImagePart and AudioPart)",
        ),
        (
            ChatRequest([UserMessage("u"), SystemMessage(None)]),  # type: ignore[arg-type]
            "messages[1].content must be a str, not NoneType",
        ),
        (
            ChatRequest([UserMessage("u"), UserMessage("v"), AssistantMessage(3)]),  # type: ignore[arg-type]
            "messages[2].content must be a str, not int",
        ),
        (
            ChatRequest(
                [
                    UserMessage("u"),
                    AssistantMessage(tool_calls=(ToolCall("c", "f", "{}"),)),
                    ToolMessage("c", b"x"),  # type: ignore[arg-type]
                ]
            ),
            "messages[2].content must be a str, not bytes",
        ),
        (
            ChatRequest(
                [UserMessage("u"), AssistantMessage(tool_calls=(ToolCall("c", "f", {"a": 1}),))]  # type: ignore[arg-type]
            ),
            "messages[1]: tool call 'c' arguments must be the raw JSON str",
        ),
        (
            ChatRequest(
                [
                    UserMessage("u"),
                    ToolMessage("c", "x"),
                    AssistantMessage(tool_calls=(ToolCall("c", "f", "{}"),)),
                ]
            ),
            "messages[1] answers tool call 'c', which no earlier assistant message made",
        ),
    ],
)
def test_error_messages_name_the_problem(request_: ChatRequest, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        build_body(CFG, request_)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"messages": b"hi"}, "ChatRequest.messages must be a sequence of messages, not a string"),
        ({"tools": [ToolSchema("")]}, "ChatRequest.tools: every tool needs a non-empty name"),
        ({"tools": [object()]}, "ChatRequest.tools: every tool needs a non-empty name"),
        (
            {"tools": [ToolSchema("f"), ToolSchema("g"), ToolSchema("f")]},
            "ChatRequest.tools: two tools are named 'f'",
        ),
        (
            {"tool_choice": "f"},
            "ChatRequest.tool_choice must be one of ('auto', 'none', 'required'), not 'f' "
            "(llama-server silently treats a named-function tool_choice as 'auto')",
        ),
        ({"slot": -1}, "ChatRequest.slot must be a number >= 0, not -1"),
        ({"max_tokens": -2}, "ChatRequest.max_tokens must be an int >= -1, not -2"),
        ({"max_tokens": 1.5}, "ChatRequest.max_tokens must be an int >= -1, not 1.5"),
        ({"thinking_budget": -1}, "ChatRequest.thinking_budget must be a number >= 0, not -1"),
        ({"stop": "\n"}, "ChatRequest.stop must be a sequence of strings, not one string"),
        ({"temperature": -0.1}, "ChatRequest.temperature must be a number >= 0, not -0.1"),
        ({"top_p": 1.5}, "ChatRequest.top_p must be a number from 0 to 1, not 1.5"),
        ({"min_p": -1}, "ChatRequest.min_p must be a number from 0 to 1, not -1"),
        ({"top_k": -2}, "ChatRequest.top_k must be an int >= -1, not -2"),
        ({"sse_ping_interval": -5}, "ChatRequest.sse_ping_interval must be a number >= -1, not -5"),
        ({"priority": 1.5}, "ChatRequest.priority must be an int, not 1.5"),
        ({"priority": "high"}, "ChatRequest.priority must be an int, not 'high'"),
    ],
)
def test_construction_errors_name_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        ChatRequest(**{"messages": [UserMessage("u")], **fields})
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"base_url": "127.0.0.1:8080"}, "Config.base_url must start with http:// or https://, "
         "not '127.0.0.1:8080' (for example 'http://127.0.0.1:8080')"),
        ({"base_url": "ftp://x"}, "Config.base_url must start with http:// or https://"),
        ({"base_url": "http://"}, "Config.base_url has no host: 'http://'"),
        ({"base_url": "http://:8080"}, "Config.base_url has no host: 'http://:8080'"),
        ({"base_url": "http://[::1"}, "Config.base_url is not a URL: 'http://[::1'"),
        ({"base_url": "http://h:x"}, "Config.base_url is not a URL: 'http://h:x'"),
        ({"base_url": "http://h:99999"}, "Config.base_url is not a URL: 'http://h:99999'"),
        ({"base_url": "http://h:0"}, "Config.base_url has port 0: 'http://h:0'"),
        ({"max_tokens": -5}, "Config.max_tokens must be an int >= -1, not -5"),
        ({"temperature": -1}, "Config.temperature must be a number >= 0, not -1"),
        ({"top_p": 2}, "Config.top_p must be a number from 0 to 1, not 2"),
        ({"connect_timeout": 0}, "Config.connect_timeout must be a number > 0, not 0"),
        ({"wait_timeout": -1}, "Config.wait_timeout must be a number > 0, not -1"),
        ({"stall_timeout": 0}, "Config.stall_timeout must be a number > 0, not 0"),
        ({"load_timeout": -3}, "Config.load_timeout must be a number > 0, not -3"),
        ({"max_retries": -1}, "Config.max_retries must be an int >= 0, not -1"),
        ({"retry_backoff": -0.5}, "Config.retry_backoff must be a number >= 0, not -0.5"),
        ({"thinking_budget": -1}, "Config.thinking_budget must be a number >= 0, not -1"),
        ({"transport": "aiohttp"}, "Config.transport must be one of ('auto', 'asyncio', 'httpx')"),
        ({"api_key": "k\u00e9y"}, "api_key must be printable ASCII (the value is not shown)"),
    ],
)
def test_config_errors_name_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        Config(**{"base_url": "http://127.0.0.1:8080", **fields})
    assert str(info.value).startswith(message)


def test_the_widest_good_values_are_taken() -> None:
    Config("https://h", max_tokens=-1, temperature=0, top_p=1, top_k=-1, max_retries=0,
           wait_timeout=None, stall_timeout=None, retry_backoff=0, thinking_budget=0)
    ChatRequest([UserMessage("u")], max_tokens=0, top_p=0, min_p=1, top_k=0, slot=0,
                sse_ping_interval=-1, temperature=2.5)
