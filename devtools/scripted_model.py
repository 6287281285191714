"""A tiny *scripted* GGUF model: an exact bigram table, so llama-server's output is known.

The network is llama-architecture with one layer whose attention and feed-forward weights are
all zero, so the residual stream is the token embedding. Embeddings are one-hot (width >= vocab)
and the output matrix holds the bigram table of :mod:`devtools.vocab`: next token =
f(current token). With ``temperature: 0`` the same request always gives the same stream.

The scripts, the request fields that select them and what the server streams for each are in
:mod:`devtools.scripts`; ``SCRIPTS`` and ``request_body`` are re-exported here.

Usage: ``python -m devtools.scripted_model OUT.gguf``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gguf
import numpy as np

from devtools.chat_template import CHAT_TEMPLATE
from devtools.scripts import SCRIPTS, Script, request_body
from devtools.vocab import DEFAULT_NEXT, GRAPH, LEVELS, PAIR, TOKEN_IDS, VOCAB

__all__ = ["SCRIPTS", "TOKEN_IDS", "Script", "request_body", "write_model"]


def _dims() -> tuple[int, int, int]:
    n_vocab = len(VOCAB)
    n_embd = -(-n_vocab // 64) * 64
    return n_vocab, n_embd, n_embd // 4


def _output_matrix(n_vocab: int, n_embd: int) -> np.ndarray:
    """``logits = W @ rms_norm(onehot)``; rms_norm scales a one-hot vector by sqrt(n_embd)."""
    out = np.zeros((n_vocab, n_embd), dtype=np.float32)
    scale = 1.0 / float(np.sqrt(n_embd))
    out[TOKEN_IDS[DEFAULT_NEXT], :] = LEVELS[0] * scale
    for token, nexts in GRAPH.items():
        col = TOKEN_IDS[token]
        out[:, col] = 0.0
        for level, nxt in zip(LEVELS, nexts, strict=False):
            out[TOKEN_IDS[nxt], col] = level * scale
    return out


def write_model(path: str | Path, *, ffn_width: int = 32) -> Path:
    """Write the scripted model to ``path`` (2 MB, well under a second); return the path.

    ``ffn_width`` only changes the size of the (all-zero) feed-forward tensors, not the output:
    ``ffn_width=300_000`` gives a ~700 MB model that takes long enough to load (with
    ``--no-mmap``) to observe the server's 503 "Loading model" phase.
    """
    path = Path(path)
    n_vocab, n_embd, head_dim = _dims()
    n_ff, n_head, n_head_kv = ffn_width, 4, 1
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("scripted")
    w.add_context_length(32768)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list([text for text, _ in VOCAB])
    w.add_token_scores([1.0 if text == PAIR else 0.0 for text, _ in VOCAB])
    w.add_token_types([int(kind) for _, kind in VOCAB])
    w.add_unk_token_id(TOKEN_IDS["<unk>"])
    w.add_bos_token_id(TOKEN_IDS["<|endoftext|>"])
    w.add_pad_token_id(TOKEN_IDS["<|endoftext|>"])
    w.add_eos_token_id(TOKEN_IDS["<|im_end|>"])
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(CHAT_TEMPLATE)

    def zeros(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=np.float16)

    ones = np.ones(n_embd, dtype=np.float32)
    w.add_tensor("token_embd.weight", np.eye(n_vocab, n_embd, dtype=np.float32))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", _output_matrix(n_vocab, n_embd))
    w.add_tensor("blk.0.attn_norm.weight", ones)
    w.add_tensor("blk.0.attn_q.weight", zeros(n_embd, n_embd))
    w.add_tensor("blk.0.attn_k.weight", zeros(head_dim * n_head_kv, n_embd))
    w.add_tensor("blk.0.attn_v.weight", zeros(head_dim * n_head_kv, n_embd))
    w.add_tensor("blk.0.attn_output.weight", zeros(n_embd, n_embd))
    w.add_tensor("blk.0.ffn_norm.weight", ones)
    w.add_tensor("blk.0.ffn_gate.weight", zeros(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_up.weight", zeros(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_down.weight", zeros(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m devtools.scripted_model OUT.gguf``."""
    parser = argparse.ArgumentParser(description="Write the scripted GGUF model.")
    parser.add_argument("out", type=Path, help="where to write the .gguf file")
    args = parser.parse_args(argv)
    print(write_model(args.out))


if __name__ == "__main__":
    main()
