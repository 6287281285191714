"""Vocabulary and bigram table of the scripted model (see :mod:`devtools.scripted_model`).

Token ids are stable: they depend only on this file. Each token has up to three successors,
with logits 30, 20 and 10; a negative ``logit_bias`` (-100) on the stronger ones picks a weaker
one. Every token that is not in ``GRAPH`` is followed by ``<|im_end|>`` (end of turn).
"""

from __future__ import annotations

import string

import gguf

__all__ = ["DEFAULT_NEXT", "GRAPH", "LEVELS", "PAIR", "SCRIPT_TOKENS", "TOKEN_IDS", "VOCAB"]

_SPECIAL: list[tuple[str, gguf.TokenType]] = [
    ("<unk>", gguf.TokenType.UNKNOWN),
    ("<|endoftext|>", gguf.TokenType.CONTROL),
    ("<|im_start|>", gguf.TokenType.CONTROL),
    ("<|im_end|>", gguf.TokenType.CONTROL),
    ("<think>", gguf.TokenType.USER_DEFINED),
    ("</think>", gguf.TokenType.USER_DEFINED),
    ("<tool_call>", gguf.TokenType.USER_DEFINED),
    ("</tool_call>", gguf.TokenType.USER_DEFINED),
]

#: Multi-character tokens that exist only for the scripts, by short name. The texts are chosen so
#: that no prompt ever tokenizes into them (SentencePiece only merges pairs that are in the vocab).
SCRIPT_TOKENS: dict[str, str] = {
    "check": "Let me check the file.",
    "done": "Done.",
    "hmm": "Hmm,",
    "still": " still thinking. ",
    "count": "Counting:",
    "tick": " tick",
    "tock": " tock",
    "read_head": '\n{"name": "read_file", "arguments": {"path": "',
    "notes": "notes",
    "txt": ".txt",
    "tail": '"}}\n',
    "list_then_read": (
        '\n{"name": "list_dir", "arguments": {"path": "."}}\n</tool_call>\n<tool_call>\n'
    ),
    "read_head2": '{"name": "read_file", "arguments": {"path": "',
    "write_head": '\n{"name": "write_file", "arguments": {"path": "out.txt", "content": "',
    "w1": "# Notes\\n\\nFirst line of the file.\\n",
    "w2": 'She said \\"hello\\" and left.\\n',
    "w3": "\\tindented with a tab\\n",
    "w4": "a backslash \\\\ and a slash /\\n",
    "w5": 'last line, \\"quoted\\" too.',
}

PAIR = "\n\n"


def _build_vocab() -> list[tuple[str, gguf.TokenType]]:
    vocab = list(_SPECIAL)
    vocab += [(f"<0x{b:02X}>", gguf.TokenType.BYTE) for b in range(256)]
    chars = ["\u2581", "\n", "\t", "\r", *string.printable[:94]]  # no " ": SPM uses U+2581
    vocab += [(c, gguf.TokenType.NORMAL) for c in chars]
    vocab.append((PAIR, gguf.TokenType.NORMAL))
    vocab += [(t.replace(" ", "\u2581"), gguf.TokenType.NORMAL) for t in SCRIPT_TOKENS.values()]
    return vocab


#: (text as stored in the GGUF, type) for every token id.
VOCAB: list[tuple[str, gguf.TokenType]] = _build_vocab()
#: token id by the *stored* text of special tokens, single characters, and by script-token name.
TOKEN_IDS: dict[str, int] = {text: i for i, (text, _) in enumerate(VOCAB)}
TOKEN_IDS.update({name: TOKEN_IDS[t.replace(" ", "\u2581")] for name, t in SCRIPT_TOKENS.items()})

#: current token -> successors, strongest first (logits 30, 20, 10).
GRAPH: dict[str, list[str]] = {
    "\n": ["check", "hmm"],  # end of the forced-open "<think>\n" generation prompt
    "check": ["</think>"],
    "</think>": [PAIR],
    PAIR: ["done", "<tool_call>", "count"],  # end of "</think>\n\n"
    "done": ["<|im_end|>"],
    "hmm": ["still"],
    "still": ["hmm"],
    "count": ["tick"],
    "tick": ["tock"],
    "tock": ["tick"],
    "<tool_call>": ["read_head", "list_then_read", "write_head"],
    "read_head": ["notes"],
    "list_then_read": ["read_head2"],
    "read_head2": ["notes"],
    "notes": ["txt"],
    "txt": ["tail"],
    "write_head": ["w1"],
    "w1": ["w2"],
    "w2": ["w3"],
    "w3": ["w4"],
    "w4": ["w5"],
    "w5": ["tail"],
    "tail": ["</tool_call>"],
    "</tool_call>": ["<|im_end|>"],
}
LEVELS = (30.0, 20.0, 10.0)
DEFAULT_NEXT = "<|im_end|>"  # every token not in the graph ends the turn
