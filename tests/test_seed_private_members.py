"""The private members of llama-cpp-python's Llama that its tests and popular code read.

``_model`` and ``_ctx`` are this Llama's own model and context owners; they
carry the seed's ``.model`` / ``.ctx`` (the native pointers as the low-level
API takes them).  docs/differences.md lists the private members not provided.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from llama_cpp import Llama
from llama_cpp_native import ffi


def test_model_and_context_pointers(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        assert isinstance(llm._model.model, int) and isinstance(llm._ctx.ctx, int)
        assert ffi.cast("struct llama_model *", llm._model.model) == llm._model.ptr
        assert ffi.cast("struct llama_context *", llm._ctx.ctx) == llm._ctx.ptr
        assert (llm._n_vocab, llm._n_ctx) == (llm.n_vocab(), llm.n_ctx()) == (32000, 256)
        assert (llm._is_recurrent, llm._is_hybrid, llm.is_hybrid) == (False, False, False)
        assert llm._hybrid_cache_mgr is None


def test_a_hybrid_model_says_what_it_is(tiny_spec_model: Callable[[str], Path]) -> None:
    with Llama(str(tiny_spec_model("qwen35")), n_ctx=64, verbose=False) as llm:
        assert (llm._is_recurrent, llm._is_hybrid, llm.is_hybrid) == (False, True, True)
        assert llm._hybrid_cache_mgr is not None
