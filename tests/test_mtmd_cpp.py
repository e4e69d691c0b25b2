"""llama_cpp.mtmd_cpp: mtmd's C API by its C names, as the seed's module offered it."""

from __future__ import annotations

import ctypes
import enum

from llama_cpp import llama_cpp, mtmd_cpp


def test_the_seeds_functions_are_there_under_their_c_names() -> None:
    for name in ("mtmd_init_from_file", "mtmd_free", "mtmd_context_params_default", "mtmd_tokenize",
                 "mtmd_input_chunks_init", "mtmd_input_chunk_get_n_tokens", "mtmd_input_chunk_get_n_pos",
                 "mtmd_bitmap_init", "mtmd_bitmap_init_from_audio", "mtmd_encode_chunk", "mtmd_get_output_embd",
                 "mtmd_support_vision", "mtmd_support_audio", "mtmd_default_marker", "mtmd_helper_eval_chunks",
                 "mtmd_helper_eval_chunk_single", "mtmd_helper_bitmap_init_from_buf",
                 "mtmd_helper_bitmap_init_from_file", "mtmd_helper_log_set", "mtmd_batch_init"):
        assert getattr(mtmd_cpp, name) is getattr(llama_cpp, name)
    assert not [name for name in mtmd_cpp.__all__ if name.startswith("llama_")]


def test_enums_and_constants() -> None:
    assert issubclass(mtmd_cpp.mtmd_input_chunk_type, enum.IntEnum)
    kinds = mtmd_cpp.mtmd_input_chunk_type
    assert [kinds.MTMD_INPUT_CHUNK_TYPE_TEXT, kinds.MTMD_INPUT_CHUNK_TYPE_IMAGE, kinds.MTMD_INPUT_CHUNK_TYPE_AUDIO] \
        == [mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT, mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE,
            mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_AUDIO] == [0, 1, 2]


def test_default_params_and_marker() -> None:
    params = mtmd_cpp.mtmd_context_params_default()
    assert params.use_gpu and params.warmup  # llama.cpp's defaults; tests turn warmup off
    params.warmup = False
    assert not params.warmup
    assert mtmd_cpp.default_marker() == "<__media__>"
    assert mtmd_cpp.mtmd_default_marker() == b"<__media__>"  # const char *: bytes, as with ctypes
    assert isinstance(params, mtmd_cpp.mtmd_context_params) and mtmd_cpp.mtmd_context_p_ctypes is ctypes.c_void_p
