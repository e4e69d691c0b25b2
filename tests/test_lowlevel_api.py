"""llama_cpp.llama_cpp: the C API by its C names, enums, constants, callbacks."""

from __future__ import annotations

import enum
from pathlib import Path

import pytest

import llama_cpp
from llama_cpp import llama_cpp as C


def test_seed_readme_low_level_example(tiny_model_path: Path) -> None:
    """The README's low-level tokenization example as pasted, but for the reference's own two bugs: it
    loads the model with the context's parameters (ctypes refuses a llama_context_params where
    llama_model_params is due) and calls llama_tokenize with the context and without the text's length
    and parse_special (llama.h: vocab, text, text_len, tokens, n_tokens_max, add_special, parse_special)."""
    import ctypes

    llama_cpp.llama_backend_init(False)  # Must be called once at the start of each program
    params = llama_cpp.llama_context_default_params()
    # use bytes for char * params
    model = llama_cpp.llama_load_model_from_file(str(tiny_model_path).encode(),
                                                 llama_cpp.llama_model_default_params())  # bug 1: was params
    ctx = llama_cpp.llama_new_context_with_model(model, params)
    max_tokens = params.n_ctx
    # use ctypes arrays for array params
    tokens = (llama_cpp.llama_token * int(max_tokens))()
    vocab = llama_cpp.llama_model_get_vocab(model)  # bug 2: llama_tokenize takes the vocab and the length
    text = b"Q: Name the planets in the solar system? A: "
    n_tokens = llama_cpp.llama_tokenize(vocab, text, len(text), tokens, max_tokens, llama_cpp.c_bool(True), False)
    assert n_tokens > 5
    assert tokens[0] == llama_cpp.llama_vocab_bos(vocab)

    out = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_detokenize(vocab, tokens, n_tokens, out, 256, True, False)
    # SPM vocabularies decode the space they prefix to the first word
    assert out.raw[:n] == b" " + text
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)


def test_the_seed_example_as_pasted_fails_with_ctypes_own_errors(tiny_model_path: Path) -> None:
    """The reference's two bugs are refused before C sees them, as ctypes refuses them there."""
    import ctypes

    with pytest.raises(ctypes.ArgumentError, match="llama_model_params"):
        llama_cpp.llama_load_model_from_file(str(tiny_model_path).encode(), llama_cpp.llama_context_default_params())
    with pytest.raises(TypeError, match="7 arguments"):
        llama_cpp.llama_tokenize(None, b"x", (llama_cpp.llama_token * 8)(), 8, llama_cpp.c_bool(True))


def test_enums_are_intenums_with_the_c_values() -> None:
    assert issubclass(C.llama_split_mode, enum.IntEnum)
    assert C.llama_split_mode.LLAMA_SPLIT_MODE_LAYER == 1
    assert C.llama_load_mode.LLAMA_LOAD_MODE_AUTO == -1
    assert C.llama_pooling_type.LLAMA_POOLING_TYPE_RANK == 4
    assert C.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_AUTO == -1
    for name in ("llama_vocab_type", "llama_ftype", "llama_lazy_mode", "llama_rope_scaling_type",
                 "llama_attention_type", "llama_context_type", "llama_token_attr", "ggml_type"):
        cls = getattr(C, name)
        assert issubclass(cls, enum.IntEnum) and len(cls) > 1, name
        for member in cls:  # the values come from the compiler, not from a copy of the header
            assert getattr(C.lib, member.name) == member.value == getattr(C, member.name)


def test_module_level_constants_seed_users_import() -> None:
    assert llama_cpp.LLAMA_DEFAULT_SEED == 0xFFFFFFFF
    assert llama_cpp.LLAMA_TOKEN_NULL == -1
    assert llama_cpp.LLAMA_MAX_SEQ == 256
    assert llama_cpp.LLAMA_MAX_DEVICES >= 1
    assert llama_cpp.LLAMA_STATE_SEQ_FLAGS_NONE == 0
    assert llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY == 1
    assert llama_cpp.LLAMA_STATE_SEQ_FLAGS_ON_DEVICE == 2
    # enum members are module-level too (the reference docs promise this but lack it)
    assert llama_cpp.LLAMA_SPLIT_MODE_LAYER == 1
    assert llama_cpp.LLAMA_POOLING_TYPE_MEAN == 1
    assert llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED == 1


def test_struct_params_are_read_and_written_as_attributes() -> None:
    params = C.llama_context_default_params()
    assert params.n_ctx >= 0 and params.n_batch > 0
    params.n_ctx = 1234
    assert params.n_ctx == 1234
    mparams = C.llama_model_default_params()
    mparams.vocab_only = True
    assert mparams.vocab_only is True


def test_log_callback_receives_llama_cpp_messages(tiny_model_path: Path) -> None:
    seen: list[str] = []

    @C.llama_log_callback  # the ctypes binding's name for ggml_log_callback's prototype
    def on_log(level, text, user_data):  # noqa: ANN001 - C callback signature
        seen.append(text.decode("utf-8", "replace"))

    C.llama_log_set(on_log, None)
    try:
        params = C.llama_model_default_params()
        params.vocab_only = True
        model = C.llama_model_load_from_file(str(tiny_model_path).encode(), params)
        C.llama_model_free(model)
    finally:
        C.llama_log_set(None, None)
    assert any("llama" in line for line in seen)
