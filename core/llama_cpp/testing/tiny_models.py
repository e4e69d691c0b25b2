"""Tiny random GGUF models written with the ``gguf`` package.

They load and run through exactly the code paths of a real model of the same
architecture, in milliseconds, which is what tests need; their output is
deterministic noise and says nothing about quality.  The vocabulary is a real
one, copied from one of llama.cpp's ``models/ggml-vocab-*.gguf`` files, so
tokenization, special tokens and detokenization behave as in a real model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .assets import vocab_file


@dataclass(frozen=True)
class TinyLlamaSpec:
    """Shape of a tiny llama-architecture model; every field changes the file."""

    vocab: str = "llama-spm"  # a models/ggml-vocab-<name>.gguf of the pinned source
    # "llama", or "qwen2vl": the same tensors with M-RoPE, whose KV cache cannot shift
    arch: str = "llama"
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx_train: int = 4096
    seed: int = 1234
    chat_template: str | None = None
    extra_metadata: tuple[tuple[str, Any], ...] = field(default=())

    def file_name(self) -> str:
        key = hashlib.sha256(repr(self).encode()).hexdigest()[:12]
        return f"tiny-{self.arch}-{self.vocab}-{self.n_embd}x{self.n_layer}-{key}.gguf"


def _finish(writer: Any, tmp: Path, path: Path) -> Path:
    """Write the file under a temporary name and move it into place, so a cache never holds half a model."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def _copy_tokenizer(writer: Any, vocab_path: Path) -> int:
    """Copy every ``tokenizer.*`` key of a vocab GGUF; returns the vocabulary size."""
    import gguf

    reader = gguf.GGUFReader(str(vocab_path))
    n_vocab = 0
    for key, fld in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = fld.contents()
        if fld.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, value, fld.types[0], sub_type=fld.types[-1])
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        else:
            writer.add_key_value(key, value, fld.types[0])
    if not n_vocab:
        raise ValueError(f"{vocab_path} has no tokenizer.ggml.tokens")
    return n_vocab


def write_tiny_llama(path: Path, spec: TinyLlamaSpec = TinyLlamaSpec()) -> Path:
    """Write a random llama-architecture GGUF (F32 weights) to ``path``."""
    import gguf

    if spec.n_embd % spec.n_head or spec.n_head % spec.n_head_kv:
        raise ValueError("n_embd must divide by n_head, and n_head by n_head_kv")
    if spec.arch not in ("llama", "qwen2vl"):
        raise ValueError(f"arch must be 'llama' or 'qwen2vl', got {spec.arch!r}")
    rng = np.random.default_rng(spec.seed)
    head_dim = spec.n_embd // spec.n_head

    def weight(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(spec.n_embd)).astype(np.float32)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), arch=spec.arch)
    writer.add_name("tiny-llama")
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    if spec.arch == "qwen2vl":  # M-RoPE: the rotary dimensions split over (t, h, w, extra) positions
        quarter = head_dim // 8
        writer.add_rope_dimension_sections([head_dim // 2 - 2 * quarter, quarter, quarter, 0])
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    n_vocab = _copy_tokenizer(writer, vocab_file(spec.vocab))
    writer.add_vocab_size(n_vocab)
    if spec.chat_template is not None:
        writer.add_chat_template(spec.chat_template)
    for key, value in spec.extra_metadata:
        writer.add_string(key, value) if isinstance(value, str) else writer.add_uint32(key, int(value))

    # Large embedding/output scales keep the logits well apart, so greedy
    # decoding has no near-ties that rounding differences could flip.
    writer.add_tensor("token_embd.weight", weight(n_vocab, spec.n_embd, 1.0))
    for i in range(spec.n_layer):
        kv = spec.n_head_kv * head_dim
        writer.add_tensor(f"blk.{i}.attn_norm.weight", norm())
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(spec.n_embd, spec.n_embd, 0.2))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(kv, spec.n_embd, 0.2))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(kv, spec.n_embd, 0.2))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(spec.n_embd, spec.n_embd, 0.2))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", norm())
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(spec.n_ff, spec.n_embd, 0.2))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(spec.n_ff, spec.n_embd, 0.2))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(spec.n_embd, spec.n_ff, 0.2))
    writer.add_tensor("output_norm.weight", norm())
    writer.add_tensor("output.weight", weight(n_vocab, spec.n_embd, 0.5))

    return _finish(writer, tmp, path)


def write_tiny_lora(path: Path, spec: TinyLlamaSpec = TinyLlamaSpec(), *, rank: int = 4, alpha: float = 8.0,
                    seed: int = 99, scale: float = 1.0) -> Path:
    """Write a random LoRA adapter (on attn_q and attn_v of every layer) for the tiny llama of ``spec``."""
    import gguf

    rng = np.random.default_rng(seed)
    head_dim = spec.n_embd // spec.n_head
    targets = {"attn_q": spec.n_embd, "attn_v": spec.n_head_kv * head_dim}  # name -> output rows
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), arch="llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", alpha)
    for i in range(spec.n_layer):
        for name, rows in targets.items():
            # ggml's shapes are numpy's reversed: lora_a is (n_embd in, rank), lora_b is (rank, rows out)
            a = (rng.standard_normal((rank, spec.n_embd)) * scale).astype(np.float32)
            b = (rng.standard_normal((rows, rank)) * scale).astype(np.float32)
            writer.add_tensor(f"blk.{i}.{name}.weight.lora_a", a)
            writer.add_tensor(f"blk.{i}.{name}.weight.lora_b", b)
    return _finish(writer, tmp, path)


def write_control_vector(path: Path, directions: dict[int, np.ndarray]) -> Path:
    """Write a control-vector GGUF as llama.cpp's tools read it: one F32 ``direction.<layer>`` per layer (from 1)."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), arch="controlvector")
    for layer, direction in sorted(directions.items()):
        if layer < 1:
            raise ValueError(f"control vector layers start at 1, got {layer}")
        writer.add_tensor(f"direction.{layer}", np.asarray(direction, dtype=np.float32))
    return _finish(writer, tmp, path)
