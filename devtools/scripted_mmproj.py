"""A tiny random-weight vision projector (``--mmproj``) for the scripted model.

A LLaVA-style CLIP projector (``clip.projector_type: mlp``): a two-layer ViT, 32 wide, over
28x28 images cut into 14x14 patches, then a two-layer MLP into the text model's embedding
width. Its weights are random (seeded), so what the model "sees" is noise, but llama-server
loads it, reports ``modalities.vision: true`` and runs every image through it: each image
becomes ``(image_size / patch_size) ** 2`` = 4 prompt tokens, which the live tests count.

Usage: ``python -m devtools.scripted_mmproj OUT.gguf``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gguf
import numpy as np

from devtools.scripted_model import _dims

__all__ = ["IMAGE_SIZE", "IMAGE_TOKENS", "PATCH_SIZE", "write_mmproj"]

IMAGE_SIZE = 28
PATCH_SIZE = 14
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # prompt tokens per image
_WIDTH, _HIDDEN, _LAYERS, _HEADS = 32, 64, 2, 2


def write_mmproj(path: str | Path, text_embedding_length: int | None = None) -> Path:
    """Write the projector to ``path`` (about 200 kB) for a text model whose embedding width
    is ``text_embedding_length`` (default: the scripted model's); return the path."""
    path = Path(path)
    n_embd = text_embedding_length if text_embedding_length is not None else _dims()[1]
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name("scripted-vision")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "mlp")
    for key, value in {
        "embedding_length": _WIDTH,
        "feed_forward_length": _HIDDEN,
        "block_count": _LAYERS,
        "projection_dim": n_embd,
        "attention.head_count": _HEADS,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH_SIZE,
    }.items():
        w.add_uint32(f"clip.vision.{key}", value)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_bool("clip.use_gelu", True)
    for name, tensor in _tensors(n_embd).items():
        w.add_tensor(name, tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _tensors(n_embd: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    ones, zeros = np.ones(_WIDTH, np.float32), np.zeros(_WIDTH, np.float32)
    tensors = {
        # numpy shapes are ggml's ne reversed: the patch convolution is ne [14, 14, 3, 32].
        "v.patch_embd.weight": rand(_WIDTH, 3, PATCH_SIZE, PATCH_SIZE).astype(np.float16),
        "v.patch_embd.bias": rand(_WIDTH),
        "v.position_embd.weight": rand(IMAGE_TOKENS, _WIDTH),
        "v.pre_ln.weight": ones,
        "v.pre_ln.bias": zeros,
        "mm.0.weight": rand(_HIDDEN, _WIDTH),
        "mm.0.bias": rand(_HIDDEN),
        "mm.2.weight": rand(n_embd, _HIDDEN),
        "mm.2.bias": rand(n_embd),
    }
    for i in range(_LAYERS):
        block = f"v.blk.{i}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors[f"{block}.{name}.weight"] = rand(_WIDTH, _WIDTH)
            tensors[f"{block}.{name}.bias"] = rand(_WIDTH)
        for name in ("ln1", "ln2"):
            tensors[f"{block}.{name}.weight"] = ones
            tensors[f"{block}.{name}.bias"] = zeros
        tensors[f"{block}.ffn_up.weight"] = rand(_HIDDEN, _WIDTH)
        tensors[f"{block}.ffn_up.bias"] = rand(_HIDDEN)
        tensors[f"{block}.ffn_down.weight"] = rand(_WIDTH, _HIDDEN)
        tensors[f"{block}.ffn_down.bias"] = rand(_WIDTH)
    return tensors


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    print(write_mmproj(parser.parse_args(argv).out))


if __name__ == "__main__":
    main()
