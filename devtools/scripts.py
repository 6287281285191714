"""The scripts of the scripted model: which request fields pick which output.

Every script is selected by the request fields in ``Script.fields``: a ``logit_bias`` object of
``{"<token id>": -100}`` (token *ids*: llama-server tokenizes string keys, and a string such as
``"Done."`` becomes single characters, not the script token), the ``tools`` the chain calls, and
``chat_template_kwargs`` where needed. ``request_body`` builds a whole streaming request.

=====================  =========================================  ==============================
script                 fields                                     stream
=====================  =========================================  ==============================
reasoning_answer       (none)                                     reasoning "Let me check the
                                                                  file.", content "Done.", stop
answer_no_thinking     enable_thinking=false                      content "Done.", stop
tool_call              bias done; tools [read_file]               reasoning, read_file
                                                                  {"path": "notes.txt"} in
                                                                  several fragments, tool_calls
two_tool_calls         bias done, read_head; tools [list_dir,     reasoning, list_dir {"path":
                       read_file]                                 "."}, read_file {...},
                                                                  tool_calls
write_file             bias done, read_head, list_then_read;      reasoning, write_file with a
                       tools [write_file]                         long escaped string, tool_calls
endless_reasoning      bias check                                 reasoning "Hmm, still
                                                                  thinking. " forever (length);
                                                                  after control reasoning_end:
                                                                  content "Done.", stop
long_answer            bias done, <tool_call>                     reasoning, content "Counting:
                                                                  tick tock tick ..." (length)
=====================  =========================================  ==============================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devtools.vocab import TOKEN_IDS

__all__ = [
    "AFTER_REASONING_END",
    "LIST_DIR_TOOL",
    "READ_FILE_TOOL",
    "SCRIPTS",
    "WRITE_FILE_TOOL",
    "Script",
    "bias",
    "request_body",
]


def _tool(name: str, description: str, props: dict[str, str]) -> dict[str, Any]:
    schema = {k: {"type": "string", "description": v} for k, v in props.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": schema, "required": list(props)},
        },
    }


READ_FILE_TOOL = _tool("read_file", "Read a text file.", {"path": "File path."})
LIST_DIR_TOOL = _tool("list_dir", "List a directory.", {"path": "Directory path."})
WRITE_FILE_TOOL = _tool(
    "write_file", "Write a text file.", {"path": "File path.", "content": "Text to write."}
)


def bias(*names: str) -> dict[str, float]:
    """``logit_bias`` object that suppresses the given tokens (script-token names or texts)."""
    return {str(TOKEN_IDS[n]): -100.0 for n in names}


@dataclass(frozen=True)
class Script:
    """One scripted behaviour: the request fields that select it and the expected stream.

    For endless scripts (``finish_reason == "length"``) ``reasoning``/``content`` give the start
    of the stream, which then repeats ``loop`` until ``max_tokens``.
    """

    name: str
    fields: dict[str, Any]
    reasoning: str | None
    content: str | None
    tool_calls: tuple[tuple[str, dict[str, str]], ...] = ()
    finish_reason: str = "stop"
    loop: str | None = None


_THINK = "Let me check the file."
_WRITTEN = (
    '# Notes\n\nFirst line of the file.\nShe said "hello" and left.\n\tindented with a tab\n'
    'a backslash \\ and a slash /\nlast line, "quoted" too.'
)


def _script(name: str, fields: dict[str, Any], **kw: Any) -> Script:
    return Script(name=name, fields=fields, **kw)


SCRIPTS: dict[str, Script] = {
    s.name: s
    for s in [
        _script("reasoning_answer", {}, reasoning=_THINK, content="Done."),
        _script(
            "answer_no_thinking",
            {"chat_template_kwargs": {"enable_thinking": False}},
            reasoning=None,
            content="Done.",
        ),
        _script(
            "tool_call",
            {"logit_bias": bias("done"), "tools": [READ_FILE_TOOL]},
            reasoning=_THINK,
            content=None,
            tool_calls=(("read_file", {"path": "notes.txt"}),),
            finish_reason="tool_calls",
        ),
        _script(
            "two_tool_calls",
            {"logit_bias": bias("done", "read_head"), "tools": [LIST_DIR_TOOL, READ_FILE_TOOL]},
            reasoning=_THINK,
            content=None,
            tool_calls=(("list_dir", {"path": "."}), ("read_file", {"path": "notes.txt"})),
            finish_reason="tool_calls",
        ),
        _script(
            "write_file",
            {
                "logit_bias": bias("done", "read_head", "list_then_read"),
                "tools": [WRITE_FILE_TOOL],
            },
            reasoning=_THINK,
            content=None,
            tool_calls=(("write_file", {"path": "out.txt", "content": _WRITTEN}),),
            finish_reason="tool_calls",
        ),
        _script(
            "endless_reasoning",
            {"logit_bias": bias("check")},
            reasoning="Hmm, still thinking. ",
            content=None,
            finish_reason="length",
            loop="Hmm, still thinking. ",
        ),
        _script(
            "long_answer",
            {"logit_bias": bias("done", "<tool_call>")},
            reasoning=_THINK,
            content="Counting: tick tock",
            finish_reason="length",
            loop=" tick tock",
        ),
    ]
}

#: Content that follows when ``endless_reasoning`` is ended by the control endpoint.
AFTER_REASONING_END = "Done."


def request_body(
    script: str,
    messages: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A streaming ``/v1/chat/completions`` body for ``script``; ``extra`` fields win.

    ``logit_bias`` and ``chat_template_kwargs`` in ``extra`` are merged with the script's.
    """
    fields = SCRIPTS[script].fields
    body: dict[str, Any] = {
        "messages": messages or [{"role": "user", "content": "hi"}],
        "stream": True,
        "temperature": 0,
    }
    body.update(fields)
    for key, value in extra.items():
        if key in ("logit_bias", "chat_template_kwargs") and key in fields:
            body[key] = {**fields[key], **value}
        else:
            body[key] = value
    return body
