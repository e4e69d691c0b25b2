"""llama_cpp._internals: llama-cpp-python's wrappers over the low-level API, as the reference's own
tests use them (load, decode batch by batch, sample with a chain, free exactly once)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

import llama_cpp
import llama_cpp._internals as internals
from llama_cpp import Llama


def _pair(path: Path) -> tuple[internals.LlamaModel, internals.LlamaContext]:
    params = llama_cpp.llama_model_default_params()
    params.check_tensors = False
    model = internals.LlamaModel(path_model=str(path), params=params, verbose=False)
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = 64
    cparams.n_threads = cparams.n_threads_batch = 1
    return model, internals.LlamaContext(model=model, params=cparams, verbose=False)


def test_the_reference_decode_loop_gives_llama_s_greedy_tokens(tiny_model_path: Path) -> None:
    model, context = _pair(tiny_model_path)
    tokens = model.tokenize(b"Hello, world! The quick brown fox", add_bos=True, special=True)
    with Llama(str(tiny_model_path), n_ctx=64, verbose=False) as llm:
        assert tokens == llm.tokenize(b"Hello, world! The quick brown fox", special=True)
        expected = [t for _, t in zip(range(4), llm.generate(tokens, temp=0))]
    batch = internals.LlamaBatch(n_tokens=len(tokens), embd=0, n_seq_max=1)
    sampler = internals.LlamaSampler()
    sampler.add_greedy()
    feed, n_eval, out = tokens, 0, []
    for _ in range(4):
        batch.set_batch(feed, n_past=n_eval, logits_all=False)
        context.decode(batch)
        n_eval += len(feed)
        token = sampler.sample(context, -1)
        sampler.accept(token)
        feed = [token]
        out.append(token)
    assert out == expected
    logits = np.ctypeslib.as_array(context.get_logits_ith(-1), shape=(model.n_vocab(),))
    assert np.isfinite(logits).all()
    assert model.detokenize(out) == b"".join(model.token_to_piece(t) for t in out)  # no BOS: spaces stay
    for owner in (batch, sampler):
        owner.close()
        owner.close()  # exactly once
    model.close()
    assert context.ctx is None and model.model is None  # the model closed its context first
    model.close()


def test_a_chain_that_leaves_no_token_raises_instead_of_ending_the_process(tiny_model_path: Path) -> None:
    """A grammar after a logit bias of -inf on every token it allows: llama.cpp's grammar aborts on the token
    chosen anyway; the wrapper raises, and the same context samples normally afterwards."""
    model, context = _pair(tiny_model_path)
    tokens = model.tokenize(b"Once upon a time", add_bos=True, special=True)
    batch = internals.LlamaBatch(n_tokens=len(tokens), embd=0, n_seq_max=1)
    batch.set_batch(tokens, n_past=0, logits_all=False)
    context.decode(batch)
    grammar = llama_cpp.LlamaGrammar.from_string('root ::= "yes"', verbose=False)
    spelling = [t for t in range(model.n_vocab()) if model.token_to_piece(t) and b"yes".startswith(
        model.token_to_piece(t))]
    assert spelling  # "y", "ye", "yes"... whatever the vocabulary has
    banned = internals.LlamaSampler()
    banned.add_logit_bias(model.n_vocab(), {t: float("-inf") for t in spelling})
    banned.add_grammar(model, grammar)
    banned.add_greedy()
    with pytest.raises(ValueError, match="left no token to choose on output -1"):
        banned.sample(context, -1)
    allowed = internals.LlamaSampler()
    allowed.add_grammar(model, grammar)
    allowed.add_greedy()
    assert allowed.sample(context, -1) in spelling
    for owner in (banned, allowed, batch, context, model):
        owner.close()


def test_model_facts_and_metadata(tiny_model_path: Path) -> None:
    model, context = _pair(tiny_model_path)
    with Llama(str(tiny_model_path), n_ctx=64, verbose=False) as llm:
        assert model.metadata() == llm.metadata
        assert (model.n_vocab(), model.n_embd(), model.n_ctx_train(), model.token_bos(), model.token_eos()) == \
            (llm.n_vocab(), llm.n_embd(), llm.n_ctx_train(), llm.token_bos(), llm.token_eos())
        bos_hello = llm.tokenize(b"Hello World")
        assert model.detokenize(bos_hello) == llm.detokenize(bos_hello) == b"Hello World"
    assert "llama" in model.desc() and model.size() > 0 and model.n_params() > 0
    assert context.n_ctx() >= 64 and context.get_state_size() > 0  # llama.cpp pads n_ctx
    context.kv_cache_clear()
    model.close()


def test_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        internals.LlamaModel(path_model=str(tmp_path / "missing.gguf"), params=llama_cpp.llama_model_default_params())
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ValueError, match="Failed to load model from file"):
        internals.LlamaModel(path_model=str(broken), params=llama_cpp.llama_model_default_params(), verbose=False)


def test_a_batch_refuses_rows_past_its_size(tiny_model_path: Path) -> None:
    batch = internals.LlamaBatch(n_tokens=2, embd=0, n_seq_max=1)
    with pytest.raises(ValueError, match="do not fit a batch of 2"):
        batch.set_batch([1, 2, 3], n_past=0, logits_all=False)
    batch.add_sequence([1], seq_id=0, logits_all=True)
    assert batch.n_tokens() == 1


def test_rows_of_tokens_or_embeddings_and_their_limits(tiny_model_path: Path) -> None:
    model, context = _pair(tiny_model_path)
    n_embd = model.n_embd()
    tokens = internals.LlamaBatch(n_tokens=4, embd=0, n_seq_max=2)
    tokens.add_token(5, 0, [0, 1], True)  # one row in two sequences
    assert (tokens.batch.n_seq_id[0], tokens.batch.seq_id[0][1]) == (2, 1)
    with pytest.raises(ValueError, match="1 to n_seq_max=2"):
        tokens.add_token(6, 1, [0, 1, 2], False)
    with pytest.raises(ValueError, match="holds token ids"):
        tokens.add_embedding([0.0] * n_embd, 1, [0], False)
    rows = internals.LlamaBatch(n_tokens=3, embd=n_embd, n_seq_max=1)
    vectors = np.random.default_rng(0).standard_normal((3, n_embd)).astype(np.float32)
    rows.add_embeddings(vectors.tolist(), 0, 0, False)
    assert np.array_equal(np.ctypeslib.as_array(rows.batch.embd, shape=(3, n_embd)), vectors)
    assert [rows.batch.logits[i] for i in range(3)] == [0, 0, 1]
    with pytest.raises(ValueError, match="holds input embeddings"):
        rows.add_token(1, 3, [0], False)
    context.decode(rows)  # llama.cpp takes the embedding rows
    assert np.isfinite(np.ctypeslib.as_array(context.get_logits_ith(-1), shape=(model.n_vocab(),))).all()
    assert model.model_chat_template() is None  # the tiny model carries no template
    model.close()


def test_binding_a_function_by_hand() -> None:
    bind = llama_cpp.ctypes_function_for_shared_library(llama_cpp.llama_cpp._lib)

    @bind("llama_max_devices", [], ctypes.c_size_t)
    def llama_max_devices() -> int: ...

    assert llama_max_devices() == llama_cpp.LLAMA_MAX_DEVICES

    @bind(["no_such_function"], [], None, required=False)
    def absent() -> None: ...

    with pytest.raises(RuntimeError, match="no_such_function"):
        absent()
    with pytest.raises(AttributeError, match="no_such_function"):
        bind("no_such_function", [], None)(lambda: None)
