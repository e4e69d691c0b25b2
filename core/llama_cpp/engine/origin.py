"""Which model and context parameters a saved sequence state belongs to.

llama.cpp checks little when it reads a sequence state: a state from another
model of the same shape, or from a context with another KV type, can be
accepted and silently give wrong results.  A :class:`StateOrigin` travels
with every snapshot, so that caches and state files can refuse a foreign one
before llama.cpp sees it.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

import attrs
from llama_cpp_native import lib

from .model import gguf_header

FINGERPRINT_SAMPLES = 48  # blocks of tensor data in a model fingerprint
FINGERPRINT_BLOCK = 4096


class ForeignStateError(ValueError):
    """A sequence state saved from another model or under other context parameters."""


@attrs.frozen
class StateOrigin:
    """A model's fingerprint (hex digest) and the context parameters that shape its state, as
    ``(name, value)`` pairs in a fixed order."""

    model: str
    context: tuple[tuple[str, int], ...] = ()

    def differences(self, other: StateOrigin) -> str:
        """What differs between two origins, in words (for error messages)."""
        reasons = []
        if self.model != other.model:
            reasons.append(f"model {self.model[:16]}... vs {other.model[:16]}...")
        mine, theirs = dict(self.context), dict(other.context)
        for name in sorted(set(mine) | set(theirs)):
            if mine.get(name) != theirs.get(name):
                reasons.append(f"{name} {mine.get(name)} vs {theirs.get(name)}")
        return ", ".join(reasons) or "nothing"


def model_fingerprint(path: str | Path) -> str:
    """A sha256 hex digest that tells model files apart, cheap even for a file of many GB.

    It covers the file size, the whole GGUF header (metadata and tensor
    descriptions: architecture, shapes, types, tokenizer) and
    ``FINGERPRINT_SAMPLES`` blocks of 4 KiB spread evenly over the tensor
    data, so it costs a few MB of reads whatever the model's size.  Hashing
    every byte would take seconds per GB on each load.  Two files of the same
    shape with other weights (another fine-tune, another seed, another
    quantization) differ in practically every block, so they differ here; a
    file edited in a few bytes that no sample covers would not.
    """
    path = Path(path)
    size = path.stat().st_size
    data_offset = _gguf_data_offset(path)
    digest = hashlib.sha256(b"llama_cpp model fingerprint 1\0")
    digest.update(size.to_bytes(8, "little"))
    with open(path, "rb") as fh:
        remaining = data_offset
        while remaining:
            chunk = fh.read(min(remaining, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            remaining -= len(chunk)
        span = size - data_offset
        if span <= FINGERPRINT_SAMPLES * FINGERPRINT_BLOCK:
            digest.update(fh.read(span))
        else:
            last = span - FINGERPRINT_BLOCK
            for i in range(FINGERPRINT_SAMPLES):
                fh.seek(data_offset + last * i // (FINGERPRINT_SAMPLES - 1))
                digest.update(fh.read(FINGERPRINT_BLOCK))
    return digest.hexdigest()


def _gguf_data_offset(path: Path) -> int:
    """Where a GGUF file's tensor data starts."""
    with gguf_header(path) as gguf:
        return int(lib.gguf_get_data_offset(gguf))


def _f32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def context_signature(cparams: Any, ctx_ptr: Any) -> tuple[tuple[str, int], ...]:
    """The context parameters that decide what a sequence state holds and whether it means the same here.

    From the pinned llama.cpp (``llama_kv_cache::state_write`` /
    ``state_read``, ``llama_memory_recurrent``, ``llama_kv_cache_iswa``): a
    state holds the number of streams (1 with ``kv_unified``, else
    ``n_seq_max``; a mismatch is refused), per cell its position, and per
    layer the K and V rows with their types (``type_k``, ``type_v``; checked)
    and whether V is stored transposed (V is transposed when flash attention
    is off when the context is made: ``flash_attn_type`` disabled; checked).
    The cells fit only into a cache of ``n_ctx_seq`` cells; a sliding-window
    cache keeps the whole window only with ``swa_full``; recurrent states
    keep ``n_rs_seq`` rollback slots.  What llama.cpp does *not* check, but
    what changes the numbers in K: RoPE and YaRN scaling (K is stored after
    RoPE), the attention type and the context type (an MTP context).
    ``embeddings`` is included so that an embedding context and a generation
    context never share states.  Floats are given as their float32 bit
    patterns, so that the values compare exactly.
    """
    unified = bool(cparams.kv_unified)
    return (
        ("n_ctx_seq", int(lib.llama_n_ctx_seq(ctx_ptr))),
        ("n_stream", 1 if unified else int(lib.llama_n_seq_max(ctx_ptr))),
        ("type_k", int(cparams.type_k)),
        ("type_v", int(cparams.type_v)),
        ("v_trans", int(cparams.flash_attn_type == lib.LLAMA_FLASH_ATTN_TYPE_DISABLED)),
        ("swa_full", int(bool(cparams.swa_full))),
        ("n_rs_seq", int(lib.llama_n_rs_seq(ctx_ptr))),
        ("embeddings", int(bool(cparams.embeddings))),
        ("ctx_type", int(cparams.ctx_type)),
        ("attention_type", int(cparams.attention_type)),
        ("rope_scaling_type", int(cparams.rope_scaling_type)),
        ("rope_freq_base_f32", _f32_bits(cparams.rope_freq_base)),
        ("rope_freq_scale_f32", _f32_bits(cparams.rope_freq_scale)),
        ("yarn_ext_factor_f32", _f32_bits(cparams.yarn_ext_factor)),
        ("yarn_attn_factor_f32", _f32_bits(cparams.yarn_attn_factor)),
        ("yarn_beta_fast_f32", _f32_bits(cparams.yarn_beta_fast)),
        ("yarn_beta_slow_f32", _f32_bits(cparams.yarn_beta_slow)),
        ("yarn_orig_ctx", int(cparams.yarn_orig_ctx)),
    )


def state_origin(model_path: str | Path, cparams: Any, ctx_ptr: Any) -> StateOrigin:
    """The origin of every sequence state a context makes (computed once, when the context is made)."""
    return StateOrigin(model=model_fingerprint(model_path), context=context_signature(cparams, ctx_ptr))
