"""Embedding contexts llama.cpp would abort on, refused before it is asked to make one."""

from __future__ import annotations

from typing import Any

from llama_cpp_native import ffi, lib


def model_pooling_type(model: Any) -> int:
    """The pooling a model's GGUF asks for (``<arch>.pooling_type``), LLAMA_POOLING_TYPE_UNSPECIFIED if none."""
    buf = ffi.new("char[]", 128)
    if lib.llama_model_meta_val_str(model, b"general.architecture", buf, 128) < 0:
        return lib.LLAMA_POOLING_TYPE_UNSPECIFIED
    key = ffi.string(buf) + b".pooling_type"
    if lib.llama_model_meta_val_str(model, key, buf, 128) < 0:
        return lib.LLAMA_POOLING_TYPE_UNSPECIFIED
    try:
        return int(ffi.string(buf))
    except ValueError:
        return lib.LLAMA_POOLING_TYPE_UNSPECIFIED


def check_embedding_context(model: Any, cparams: Any) -> None:
    """Refuse the embedding contexts llama.cpp cannot create: a ValueError here instead of a process abort.

    With mean pooling, llama.cpp sizes its worst-case graph with the
    micro-batch rounded up to a multiple of ``n_seq_max`` but only
    ``n_ubatch`` output rows, and the pooling matrix then fails
    ``GGML_ASSERT(ggml_can_mul_mat(a, b))``, which aborts the process.
    """
    pooling = cparams.pooling_type
    if pooling == lib.LLAMA_POOLING_TYPE_UNSPECIFIED:
        pooling = model_pooling_type(model)
    n_seq_max = cparams.n_seq_max
    if pooling != lib.LLAMA_POOLING_TYPE_MEAN or n_seq_max <= 1:
        return
    n_ubatch = min(cparams.n_batch, cparams.n_ubatch)
    if n_ubatch % n_seq_max:
        fits = max(d for d in range(1, n_seq_max + 1) if n_ubatch % d == 0)
        raise ValueError(f"with mean pooling, n_ubatch ({n_ubatch}) must be a multiple of n_seq_max ({n_seq_max}): "
                         f"llama.cpp cannot build the pooling graph otherwise (it aborts); use n_seq_max={fits}, "
                         f"or n_ubatch={n_ubatch + n_seq_max - n_ubatch % n_seq_max} (and n_batch at least that)")
