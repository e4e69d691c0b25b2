"""The low-level API in the ctypes form that code written for llama-cpp-python uses (guidance, outlines,
llguidance, the seed README): ctypes arrays, ``byref``, buffers and ``None`` for pointers, handles as
ints, ``llama_batch`` as a writable Structure, C arrays through ``numpy.ctypeslib``, CFUNCTYPE
callbacks, and a decode loop on ``Llama.ctx`` that the engine notices."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest
from llama_cpp_native import ffi, lib

import llama_cpp
from llama_cpp import Llama
from llama_cpp import llama_cpp as C

N_PREDICT = 8


def _greedy(llm: Llama, prompt: list[int]) -> list[int]:
    return [token for _, token in zip(range(N_PREDICT), llm.generate(prompt, temp=0))]


def _decode_loop(llm: Llama, prompt: list[int], n_predict: int) -> list[int]:
    """guidance's way (models/_llama_cpp.py): its own batch, every row's logits, seq_rm on the memory,
    llama_decode on llm.ctx, the logits through numpy.ctypeslib; greedy on top."""
    n_vocab = llm.n_vocab()
    batch = C.llama_batch_init(llm.n_batch, 0, llm.n_ctx())
    try:
        C.llama_memory_seq_rm(C.llama_get_memory(llm.ctx), -1, 0, -1)
        tokens, feed, out = [], list(prompt), []
        for _ in range(n_predict):
            batch.n_tokens = len(feed)
            for j, token in enumerate(feed):
                batch.token[j] = token
                batch.pos[j] = len(tokens) + j
                batch.seq_id[j][0] = 0
                batch.n_seq_id[j] = 1
                batch.logits[j] = True
            assert C.llama_decode(llm.ctx, batch) == 0
            logits = np.ctypeslib.as_array(C.llama_get_logits(llm.ctx), shape=(len(feed), n_vocab)).copy()
            tokens += feed
            feed = [int(np.argmax(logits[-1]))]
            out += feed
        return out
    finally:
        C.llama_batch_free(batch)


def test_a_ctypes_decode_loop_on_llm_ctx_gives_generate_s_tokens(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        prompt = llm.tokenize(b"Hello there, how are you")
        plain = _greedy(llm, prompt)
        assert _decode_loop(llm, prompt, N_PREDICT) == plain


def test_the_engine_notices_what_the_low_level_api_put_in_its_memory(tiny_model_path: Path) -> None:
    """After a foreign decode of other text into sequence 0 (and a partial seq_rm), the next Llama call
    evaluates its prompt again instead of trusting the ledger of what the sequence held."""
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        prompt = llm.tokenize(b"Hello there, how are you")
        plain = _greedy(llm, prompt)
        other = llm.tokenize(b"Something else entirely, at the same positions")
        _decode_loop(llm, other, 3)
        assert _greedy(llm, prompt) == plain
        C.llama_memory_seq_rm(C.llama_get_memory(llm.ctx), 0, 3, -1)  # memory edits alone count too
        assert _greedy(llm, prompt) == plain
        assert llm.n_tokens == len(prompt) + N_PREDICT - 1


def test_handles_are_ints_that_both_forms_accept(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        assert isinstance(llm.model, int) and isinstance(llm.ctx, int)
        assert C.llama_get_model(llm.ctx) == llm.model
        assert C.llama_n_ctx(llm.ctx) == llm.n_ctx() and C.llama_n_batch(llm.ctx) == llm.n_batch
        assert lib.llama_n_ctx(ffi.cast("struct llama_context *", llm.ctx)) == llm.n_ctx()  # the cffi form
        assert (llm.n_threads, llm.n_threads_batch) == (C.llama_n_threads(llm.ctx), C.llama_n_threads_batch(llm.ctx))


def test_pointer_arguments_take_ctypes_arrays_buffers_byref_and_none(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        vocab = C.llama_model_get_vocab(llm.model)
        tokens = (llama_cpp.llama_token * 16)()
        n = C.llama_tokenize(vocab, b"Hello world", 11, tokens, 16, True, False)
        assert list(tokens[:n]) == llm.tokenize(b"Hello world")
        piece = (ctypes.c_char * 32)()  # outlines' form
        size = C.llama_token_to_piece(vocab, tokens[1], piece, 32, 0, True)
        assert piece[:size] == b" Hello"  # the SentencePiece piece, with its word-start space
        buf = ctypes.create_string_buffer(64)  # llguidance's form
        assert C.llama_token_to_piece(vocab, tokens[1], buf, 64, 0, True) == size
        assert C.llama_model_desc(llm.model, buf, 64) > 0 and buf.value
        value = ctypes.create_string_buffer(32)
        assert C.llama_model_meta_val_str(llm.model, b"general.architecture", value, 32) > 0
        assert value.value == b"llama"
        assert C.llama_model_chat_template(llm.model, None) is None  # NULL name: the default; this model has none
        state = C.llama_state_get_size(llm.ctx)
        assert state > 0
    # byref: a sampler applied to a ctypes llama_token_data_array writes its choice back into it
    data = (C.llama_token_data * 3)(C.llama_token_data(0, 0.5, 0.0), C.llama_token_data(1, 2.5, 0.0),
                                    C.llama_token_data(2, 1.0, 0.0))
    candidates = C.llama_token_data_array(data, 3, -1, False)
    greedy = C.llama_sampler_init_greedy()
    try:
        C.llama_sampler_apply(greedy, ctypes.byref(candidates))
    finally:
        C.llama_sampler_free(greedy)
    assert candidates.data[candidates.selected].id == 1


def test_the_ctypes_bindings_names_and_types() -> None:
    for name in ("llama_model_p", "llama_context_p", "llama_vocab_p", "llama_memory_t", "llama_adapter_lora_p",
                 "llama_sampler_p", "llama_token_p", "llama_batch_p", "llama_token_data_array_p"):
        assert hasattr(llama_cpp, name), name
    assert C.llama_model_p_ctypes is C.llama_context_p_ctypes is C.llama_memory_t_ctypes is ctypes.c_void_p
    assert llama_cpp.llama_token is ctypes.c_int32 and llama_cpp.c_bool is ctypes.c_bool
    assert C.llama_token_p is ctypes.POINTER(ctypes.c_int32)
    assert issubclass(C.llama_batch, ctypes.Structure) and issubclass(C.llama_model_kv_override_value, ctypes.Union)
    assert [f for f, _ in C.llama_batch._fields_] == ["n_tokens", "token", "embd", "pos", "n_seq_id", "seq_id",
                                                      "logits"]
    assert C.llama_decode.__name__ == "llama_decode"
    assert C._lib.llama_decode.argtypes == (ctypes.c_void_p, C.llama_batch)
    assert C.llama_get_logits.restype is ctypes.POINTER(ctypes.c_float)
    assert ctypes.cast(C._lib.llama_tokenize, ctypes.c_void_p).value == int(ffi.cast("uintptr_t",
                                                                                    ffi.addressof(lib, "llama_tokenize")))
    override = C.llama_model_kv_override()
    override.val_i64 = 7
    assert override.value.val_i64 == 7


def test_every_exported_function_is_bound_and_every_layout_is_the_compilers() -> None:
    functions = [n for n in dir(lib) if callable(getattr(lib, n)) and not n.startswith("llama_cpp_native_")]
    assert len(functions) > 900
    assert [n for n in functions if not callable(getattr(C, n, None))] == []
    for name, cls in vars(C).items():
        if isinstance(cls, type) and issubclass(cls, (ctypes.Structure, ctypes.Union)) and \
                cls.__module__ == C.__name__ and not name.endswith("_value"):
            c_name = name if name in ffi.list_types()[0] else f"struct {name}"  # a typedef, or a struct tag
            assert ctypes.sizeof(cls) == ffi.sizeof(c_name), name


def test_callbacks_are_cfunctype_prototypes(tiny_model_path: Path) -> None:
    progress: list[float] = []
    mparams = C.llama_model_default_params()
    on_progress = C.llama_progress_callback(lambda fraction, _data: progress.append(fraction) or True)
    mparams.progress_callback = on_progress
    model = C.llama_model_load_from_file(str(tiny_model_path).encode(), mparams)
    assert model and progress and progress[-1] == pytest.approx(1.0)
    cparams = C.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch = 128, 32
    ctx = C.llama_init_from_model(model, cparams)
    try:
        batch = C.llama_batch_get_one((C.llama_token * 4)(1, 2, 3, 4), 4)
        asked: list[int] = []
        abort = C.ggml_abort_callback(lambda _data: asked.append(1) is None)  # True: abort
        C.llama_set_abort_callback(ctx, abort, None)
        assert C.llama_decode(ctx, batch) == 2 and asked  # llama_decode's "aborted"
        C.llama_set_abort_callback(ctx, None, None)  # NULL callback: None
        assert C.llama_decode(ctx, batch) == 0
        row = np.ctypeslib.as_array(C.llama_get_logits_ith(ctx, -1), shape=(C.llama_vocab_n_tokens(
            C.llama_model_get_vocab(model)),))
        assert np.isfinite(row).all()
    finally:
        C.llama_free(ctx)
        C.llama_model_free(model)


def test_renamed_functions_keep_their_deprecated_names(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=128, verbose=False) as llm:
        with pytest.warns(DeprecationWarning, match="llama_set_adapter_cvec"):
            assert C.llama_apply_adapter_cvec(llm.ctx, None, 0, 64, -1, -1) == 0  # NULL data: clear
