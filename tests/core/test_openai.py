"""OpenAI chat-format interop: ``to_openai``/``from_openai`` for messages and
``Completion.to_openai()``, checked against the OpenAI SDK's own response model."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import assume, given

from llamaclient import (
    AssistantMessage,
    AudioPart,
    ChatMessage,
    ChatRequest,
    Completion,
    Config,
    FinishReason,
    ImagePart,
    SystemMessage,
    TextPart,
    Timings,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
    build_body,
    from_openai,
    to_openai,
)
from tests.core.test_messages import HISTORY, PNG, histories

PNG64 = base64.b64encode(PNG).decode()


def canonical(history: list[ChatMessage]) -> bool:
    """from_openai reads a base64 image data URL as bytes: a url= part holding one is the
    only message that does not come back as it was."""
    return not any(
        isinstance(part, ImagePart) and (part.url or "").startswith("data:")
        for message in history
        if isinstance(message, UserMessage) and not isinstance(message.content, str)
        for part in message.content
    )


@given(histories.filter(canonical))
def test_any_history_round_trips_through_the_openai_format(history: list[ChatMessage]) -> None:
    dicts = to_openai(history)
    assert json.loads(json.dumps(dicts)) == dicts  # plain JSON values only
    assert from_openai(dicts) == history


@given(histories)
def test_to_openai_is_what_llama_server_gets_but_for_a_null_assistant_content(
    history: list[ChatMessage],
) -> None:
    try:
        body = build_body(Config("http://x"), ChatRequest(history))
    except ValueError as exc:  # build_body refuses what the server would: not this test's job
        assume("answers tool call" not in str(exc) and "no messages" not in str(exc))
        raise
    sent = json.loads(body)["messages"]
    expected = [
        {**m, "content": ""} if m["role"] == "assistant" and m["content"] is None else m
        for m in to_openai(history)
    ]
    assert sent == expected


def test_a_tool_turn_in_the_openai_format() -> None:
    assert to_openai(HISTORY[2:4]) == [
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "I should read it.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "/etc/hosts"}'},
                    "x_extra": 1,
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "127.0.0.1 localhost"},
    ]


def test_messages_as_an_openai_sdk_user_writes_them() -> None:
    dicts: list[dict[str, Any]] = [
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "system", "content": "Answer in English.", "name": "ops"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare these."},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"},
                },
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
            ],
        },
        {  # a message as the OpenAI SDK returns it, passed straight back
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": [],
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "look", "arguments": '{"at": "cat"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": [{"type": "text", "text": "a cat"}]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
            ],
        },
    ]
    assert from_openai(dicts) == [
        SystemMessage("Be brief."),
        SystemMessage("Answer in English.", name="ops"),
        UserMessage(
            [
                TextPart("Compare these."),
                ImagePart(PNG),
                ImagePart(url="https://example.com/cat.jpg"),
                AudioPart(b"RIFF", "wav"),
            ]
        ),
        AssistantMessage(tool_calls=(ToolCall("call_9", "look", '{"at": "cat"}'),)),
        ToolMessage("call_9", "a cat"),
        AssistantMessage("", tool_calls=(ToolCall("c2", "f", '{"a":1}'),)),
    ]


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png;base64,not base64!",
        "data:image/png,plain",
        "data:text/plain;base64,aGk=",
        "https://example.com/a.png",
    ],
)
def test_an_image_url_that_is_not_a_base64_image_stays_a_url(url: str) -> None:
    part = {"type": "image_url", "image_url": {"url": url}}
    assert from_openai([{"role": "user", "content": [part]}]) == [UserMessage([ImagePart(url=url)])]


def test_to_openai_refuses_what_is_not_a_message() -> None:
    with pytest.raises(TypeError, match="not a chat message: str"):
        to_openai(["hi"])  # type: ignore[list-item]


def test_a_data_url_that_does_not_re_encode_exactly_stays_a_url() -> None:
    odd = "data:image/png;base64,iVBORw0KGgp="  # padding bits set: not canonical base64
    got = from_openai(
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": odd}}]}]
    )
    assert got == [UserMessage([ImagePart(url=odd)])]
    assert to_openai(got)[0]["content"][0]["image_url"]["url"] == odd


@pytest.mark.parametrize(
    ("dicts", "message"),
    [
        ([{"role": "function", "content": "x"}], "messages[0] has role 'function'"),
        ([{"content": "x"}], "messages[0] has role None"),
        (["hi"], "messages[0] is a str, not a dict"),
        ([{"role": "user", "content": None}], "messages[0].content must be a str or a list"),
        ([{"role": "user", "content": [{"type": "file", "file": {}}]}], "is not a text, image_url"),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_audio", "input_audio": {"data": "!", "format": "wav"}}
                    ],
                }
            ],
            "input_audio data is not base64",
        ),
        ([{"role": "system", "content": [{"type": "image_url"}]}], "a list of text parts"),
        ([{"role": "system", "content": None}], "a list of text parts"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "not a text"),
        ([{"role": "user", "content": [{"type": "text"}]}], "not a text"),
        (
            [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": ""}}]}],
            "not a text",
        ),
        ([{"role": "tool", "content": "x"}], "needs a str tool_call_id"),
        ([{"role": "assistant", "tool_calls": {"a": 1}}], "tool_calls must be a list"),
        ([{"role": "assistant", "tool_calls": [{"id": "a"}]}], "needs a 'function' object"),
        ([{"role": "assistant", "tool_calls": [{"function": {}}]}], "needs a str name"),
        ([{"role": "user", "content": "x", "name": 3}], "messages[0].name must be a str"),
    ],
)
def test_from_openai_names_what_is_wrong(dicts: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        from_openai(dicts)


# -- Completion.to_openai ------------------------------------------------------------------------
COMPLETION = Completion(
    id="chatcmpl-abc",
    model="scripted",
    content=None,
    reasoning_content="Let me check the file.",
    tool_calls=(ToolCall("call_1", "read_file", '{"path": "notes.txt"}'),),
    finish_reason=FinishReason.TOOL_CALLS,
    timings=Timings(cache_n=3, prompt_n=20, predicted_n=7),
    usage=Usage(prompt_tokens=23, completion_tokens=7, cached_tokens=3),
)


def test_completion_to_openai_is_a_chat_completion() -> None:
    assert COMPLETION.to_openai(created=1_700_000_000) == {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "scripted",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "Let me check the file.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 23,
            "completion_tokens": 7,
            "total_tokens": 30,
            "prompt_tokens_details": {"cached_tokens": 3},
        },
    }


@pytest.mark.parametrize(
    "completion",
    [
        COMPLETION,
        Completion("id", None, "Hello.", None, (), FinishReason.STOP, None, Usage()),
        Completion("id", "m", "cut", None, (), FinishReason.LENGTH, None, Usage(5, 9)),
    ],
)
def test_the_openai_sdk_reads_completion_to_openai(completion: Completion) -> None:
    from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall

    parsed = ChatCompletion.model_validate(completion.to_openai())
    message = parsed.choices[0].message
    assert (parsed.id, parsed.object, parsed.choices[0].finish_reason) == (
        completion.id,
        "chat.completion",
        completion.finish_reason,
    )
    assert message.content == completion.content
    calls = [
        c for c in message.tool_calls or [] if isinstance(c, ChatCompletionMessageFunctionToolCall)
    ]
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        (c.id, c.name, c.arguments) for c in completion.tool_calls
    ]
    assert parsed.usage is not None
    assert parsed.usage.total_tokens == (completion.usage.prompt_tokens or 0) + (
        completion.usage.completion_tokens or 0
    )
