"""Messages: a role-tagged union that saves and loads as JSON, content parts on the wire as
llama-server reads them, and bodies that stay byte for byte what they were."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llamaclient import (
    AssistantMessage,
    AudioPart,
    ChatMessage,
    ChatRequest,
    Config,
    ImagePart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolSchema,
    UserMessage,
    build_body,
)
from llamaclient._types.messages import media_kinds

CFG = Config(base_url="http://127.0.0.1:8080", model="m", max_tokens=64)
PNG = bytes.fromhex("89504e470d0a1a0a")  # a PNG file's first bytes: enough for the wire

HISTORY: list[ChatMessage] = [
    SystemMessage("be brief"),
    UserMessage("what is in /etc/hosts?"),
    AssistantMessage(
        content=None,
        reasoning_content="I should read it.",
        tool_calls=(ToolCall("call_1", "read_file", '{"path": "/etc/hosts"}', {"x_extra": 1}),),
    ),
    ToolMessage("call_1", "127.0.0.1 localhost"),
    AssistantMessage("It maps localhost."),
    UserMessage("thanks"),
]
# build_body's bytes for HISTORY before messages became a tagged union with content parts
# (commit 04dcd92): the prompt cache and exact echo depend on them never changing.
GOLDEN = (
    b'{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user",'
    b'"content":"what is in /etc/hosts?"},{"role":"assistant","content":"","reasoning_content"'
    b':"I should read it.","tool_calls":[{"id":"call_1","type":"function","function":{"name":'
    b'"read_file","arguments":"{\\"path\\": \\"/etc/hosts\\"}"},"x_extra":1}]},{"role":"tool",'
    b'"content":"127.0.0.1 localhost","tool_call_id":"call_1"},{"role":"assistant","content":'
    b'"It maps localhost."},{"role":"user","content":"thanks"}],"tools":[{"type":"function",'
    b'"function":{"name":"read_file","description":"Read a file","parameters":{"type":"object",'
    b'"properties":{}}}}],"cache_prompt":true,"stream":true,"stream_options":{"include_usage":'
    b'true},"return_progress":true,"timings_per_token":true,"reasoning_control":true,'
    b'"max_tokens":64,"seed":1,"chat_template_kwargs":{"enable_thinking":false}}'
)


def wire_messages(*messages: ChatMessage) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(build_body(CFG, ChatRequest(list(messages))))["messages"]
    return out


# -- the body is unchanged -----------------------------------------------------------------------
def test_the_body_of_existing_messages_is_byte_for_byte_what_it_was() -> None:
    request = ChatRequest(HISTORY, tools=[ToolSchema("read_file", "Read a file")], seed=1)
    assert build_body(CFG, request) == GOLDEN


def test_a_history_loaded_from_json_builds_the_same_bytes() -> None:
    loaded = msgspec.json.decode(msgspec.json.encode(HISTORY), type=list[ChatMessage])
    request = ChatRequest(loaded, tools=[ToolSchema("read_file", "Read a file")], seed=1)
    assert build_body(CFG, request) == GOLDEN


def test_name_is_sent_only_when_set_and_last() -> None:
    assert wire_messages(UserMessage("hi", name="ann"), SystemMessage("s", name="ops")) == [
        {"role": "user", "content": "hi", "name": "ann"},
        {"role": "system", "content": "s", "name": "ops"},
    ]
    call = ToolCall("c", "f", "{}")
    got = wire_messages(
        UserMessage("u"), AssistantMessage(tool_calls=(call,)), ToolMessage("c", "r", name="f")
    )
    assert got[2] == {"role": "tool", "content": "r", "tool_call_id": "c", "name": "f"}
    assert list(got[2]) == ["role", "content", "tool_call_id", "name"]


# -- tagged JSON ---------------------------------------------------------------------------------
def test_a_history_round_trips_through_json_with_its_roles() -> None:
    data = msgspec.json.encode(HISTORY)
    assert [m["role"] for m in json.loads(data)] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert msgspec.json.decode(data, type=list[ChatMessage]) == HISTORY


def test_saved_json_is_compact_and_readable() -> None:
    saved = json.loads(msgspec.json.encode([UserMessage([TextPart("hi"), ImagePart(PNG)])]))
    assert saved == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "data": base64.b64encode(PNG).decode()},
            ],
        }
    ]


def test_an_unknown_role_or_a_bad_part_does_not_decode() -> None:
    with pytest.raises(msgspec.ValidationError, match="Invalid value 'robot'"):
        msgspec.json.decode(b'[{"role": "robot", "content": "x"}]', type=list[ChatMessage])
    with pytest.raises(msgspec.ValidationError, match="exactly one of data= or url="):
        msgspec.json.decode(
            b'[{"role": "user", "content": [{"type": "image"}]}]', type=list[ChatMessage]
        )


def test_user_content_given_as_a_list_is_kept_as_a_tuple() -> None:
    parts = [TextPart("a"), TextPart("b")]
    message = UserMessage(parts)
    assert message.content == tuple(parts)
    assert message == UserMessage(tuple(parts))
    hash(message)  # frozen all the way down


texts = st.text(max_size=20)
parts = st.one_of(
    st.builds(TextPart, texts),
    st.builds(
        ImagePart, data=st.binary(max_size=20), mime=st.sampled_from(["image/png", "image/jpeg"])
    ),
    st.builds(ImagePart, url=st.text(min_size=1, max_size=20)),
    st.builds(AudioPart, st.binary(max_size=20), st.sampled_from(["wav", "mp3"])),
)
names = st.none() | texts
calls = st.builds(
    ToolCall,
    texts,
    texts,
    texts,
    st.dictionaries(
        st.text(max_size=5).filter(lambda k: k not in ("id", "type", "function", "index")),
        st.integers() | texts,
        max_size=2,
    ),
)
messages: st.SearchStrategy[ChatMessage] = st.one_of(
    st.builds(SystemMessage, texts, name=names),
    st.builds(UserMessage, texts | st.lists(parts, min_size=1, max_size=4), name=names),
    st.builds(
        AssistantMessage,
        st.none() | texts,
        st.none() | texts,
        st.lists(calls, max_size=3).map(tuple),
        name=names,
    ),
    st.builds(ToolMessage, texts, texts, name=names),
)
histories = st.lists(messages, max_size=8)


@given(histories)
def test_any_history_round_trips_through_json(history: list[ChatMessage]) -> None:
    data = msgspec.json.encode(history)
    assert msgspec.json.decode(data, type=list[ChatMessage]) == history
    assert msgspec.json.encode(msgspec.json.decode(data, type=list[ChatMessage])) == data


# -- content parts on the wire -------------------------------------------------------------------
def test_content_parts_have_llama_servers_wire_shapes() -> None:
    message = UserMessage(
        [
            TextPart("What is this?"),
            ImagePart(PNG),
            ImagePart(PNG, mime="image/jpeg"),
            ImagePart(url="https://example.com/cat.png"),
            AudioPart(b"RIFF", "wav"),
        ]
    )
    png = base64.b64encode(PNG).decode()
    assert wire_messages(message) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{png}"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
            ],
        }
    ]


@given(st.lists(parts, min_size=1, max_size=5))
def test_a_body_with_parts_is_deterministic(content: list[Any]) -> None:
    first = build_body(CFG, ChatRequest([UserMessage(content)]))
    again = build_body(CFG, ChatRequest([UserMessage(list(content))]))
    loaded = msgspec.json.decode(
        msgspec.json.encode([UserMessage(content)]), type=list[ChatMessage]
    )
    assert first == again == build_body(CFG, ChatRequest(loaded))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ImagePart(), "exactly one of data= or url="),
        (lambda: ImagePart(PNG, url="https://x"), "exactly one of data= or url="),
        (lambda: ImagePart(PNG, mime="text/plain"), "mime must start with 'image/'"),
    ],
)
def test_an_image_part_says_what_is_wrong(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([], "messages[0].content must be a str, not empty sequence"),
        (b"raw", "messages[0].content must be a str, not bytes"),
        (["text"], "messages[0].content holds a str, not a TextPart, ImagePart or AudioPart"),
        ([TextPart(5)], "messages[0].content must be a str, not int"),  # type: ignore[arg-type]
    ],
)
def test_bad_content_is_refused_before_any_network(content: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build_body(CFG, ChatRequest([UserMessage(content)]))


def test_media_kinds_are_what_the_server_must_take() -> None:
    assert media_kinds(HISTORY) == frozenset()
    assert media_kinds([UserMessage([TextPart("a")])]) == frozenset()
    assert media_kinds([UserMessage([ImagePart(url="https://x")])]) == {"vision"}
    both = [UserMessage([AudioPart(b"", "wav")]), UserMessage([TextPart("a"), ImagePart(PNG)])]
    assert media_kinds(both) == {"vision", "audio"}
