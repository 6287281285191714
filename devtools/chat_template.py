"""The ChatML/Hermes-style Jinja chat template of the scripted model.

Written with explicit ``{{- '...' }}`` strings so every byte of whitespace is deliberate.

Properties the live tests rely on:

- Thinking is forced open: the generation prompt ends with ``<think>\\n``; with
  ``chat_template_kwargs.enable_thinking=false`` it ends with ``<think>\\n\\n</think>\\n\\n``.
- Tools are rendered in a Hermes-style system block, and assistant ``tool_calls`` as
  ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``, so llama-server reports
  ``chat_template_caps.supports_tool_calls: true`` and parses the calls.
- Every assistant turn is rendered with its ``reasoning_content`` (never dropped), and it starts
  with exactly the generation prompt, so an exact echo of a turn re-renders the previous prompt
  as a prefix of the next one (the prompt cache hits).
"""

from __future__ import annotations

__all__ = ["CHAT_TEMPLATE"]

_TOOLS_INTRO = (
    "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>"
)
_TOOLS_OUTRO = (
    "\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n'
)

CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' -%}"
    "{%- set system_message = messages[0].content -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set system_message = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if system_message -%}{{- system_message + '\\n\\n' -}}{%- endif -%}"
    "{{- '" + _TOOLS_INTRO + "' -}}"
    "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson -}}{%- endfor -%}"
    "{{- '" + _TOOLS_OUTRO + "' -}}"
    "{%- elif system_message -%}"
    "{{- '<|im_start|>system\\n' + system_message + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message.role == 'user' or message.role == 'system' -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n' -}}"
    "{%- if message.reasoning_content is string and message.reasoning_content -%}"
    "{{- message.reasoning_content -}}"
    "{%- else -%}"
    "{{- '\\n' -}}"
    "{%- endif -%}"
    "{{- '</think>\\n\\n' -}}"
    "{%- if message.content is string -%}{{- message.content -}}{%- endif -%}"
    "{%- if message.tool_calls -%}"
    "{%- for tool_call in message.tool_calls -%}"
    "{%- if tool_call.function is defined -%}{%- set tool_call = tool_call.function -%}"
    "{%- endif -%}"
    "{%- if (loop.first and message.content) or (not loop.first) -%}{{- '\\n' -}}{%- endif -%}"
    '{{- \'<tool_call>\\n{"name": "\' -}}{{- tool_call.name -}}{{- \'", "arguments": \' -}}'
    "{%- if tool_call.arguments is string -%}{{- tool_call.arguments -}}"
    "{%- else -%}{{- tool_call.arguments | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content"
    " + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)
