"""Llama's seed controls around a running context: external threadpools, eval's abort, the
``last_n_tokens_size`` of ``sample()``, and what ``verbose=True`` prints about speculation."""

from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from llama_cpp import llama_cpp as C
from llama_cpp.llama import Llama, LlamaDecodeAbort
from llama_cpp.llama_speculative import SpecConfig
from llama_cpp_native import ffi, lib


@pytest.fixture
def tiny(tiny_model_path: Path) -> Iterator[Llama]:
    with Llama(str(tiny_model_path), n_ctx=256, n_threads=1, verbose=False) as llm:
        yield llm


def _greedy(llm: Llama, n: int = 8) -> list[int]:
    out = []
    for token in llm.generate(llm.tokenize(b"Once upon a time"), temp=0.0):
        out.append(token)
        if len(out) == n:
            return out
    return out


def test_an_external_threadpool_computes_the_same_tokens(tiny: Llama) -> None:
    expected = _greedy(tiny)
    params = C.ggml_threadpool_params_default(1)
    pool = C.ggml_threadpool_new(ctypes.byref(params))  # the low-level API's int handle
    cparams = ffi.new("struct ggml_threadpool_params *", lib.ggml_threadpool_params_default(1))
    batch_pool = lib.ggml_threadpool_new(cparams)  # and cffi's pointer
    try:
        tiny.attach_threadpool(pool, batch_pool)
        assert _greedy(tiny) == expected
        tiny.detach_threadpool()
        tiny.attach_threadpool(pool)  # one pool for both
        assert _greedy(tiny) == expected
        tiny.detach_threadpool()
        assert _greedy(tiny) == expected
    finally:
        C.ggml_threadpool_free(pool)
        lib.ggml_threadpool_free(batch_pool)
    with pytest.raises(TypeError, match="ggml_threadpool"):
        tiny.attach_threadpool("not a pool")


def test_abort_stops_a_long_eval_with_llama_decode_abort(smollm2_model_path: Path) -> None:
    with Llama(str(smollm2_model_path), n_ctx=2048, n_batch=2048, n_threads=1, verbose=False) as llm:
        tokens = llm.tokenize(b" ".join([b"the quick brown fox jumps over the lazy dog"] * 180))[:1800]
        timer = threading.Timer(0.2, llm.abort)
        timer.start()
        started = time.perf_counter()
        with pytest.raises(LlamaDecodeAbort, match="abort\\(\\) stopped eval\\(\\)"):
            llm.eval(tokens)
        assert time.perf_counter() - started < 5.0  # inside the batch, not after it
        timer.join()
        assert llm.n_tokens == 0  # the interrupted batch is not in memory, and nothing needs resetting
        llm.eval(tokens[:8])  # later calls run normally
        assert llm.n_tokens == 8
    assert issubclass(LlamaDecodeAbort, RuntimeError)


def test_sample_takes_last_n_tokens_size_for_a_zero_penalty_history(tiny: Llama) -> None:
    history = tiny.tokenize(b"the the the the the the the the")
    tiny.eval(history)
    # the bias makes a token of the history the greedy pick, which the repeat penalty then takes down
    kw = {"temp": 0.0, "repeat_penalty": 100.0, "logit_bias": {history[-1]: 30.0}}
    assert tiny.sample(temp=0.0, logit_bias=kw["logit_bias"]) == history[-1]
    penalized = tiny.sample(**kw, penalty_last_n=64)
    assert penalized != history[-1]
    tiny.last_n_tokens_size = 64
    assert tiny.sample(**kw, penalty_last_n=0) == penalized
    tiny.last_n_tokens_size = 0
    assert tiny.sample(**kw, penalty_last_n=0) == history[-1]


@pytest.mark.parametrize("verbose", [True, False])
def test_verbose_prints_the_speculation_summary(tiny_spec_model: Callable[[str], Path], verbose: bool,
                                                capfd: pytest.CaptureFixture[str]) -> None:
    with Llama(str(tiny_spec_model("target")), n_ctx=256, n_threads=1, verbose=verbose,
               speculative=SpecConfig(spec_type="ngram-map-k")) as llm:
        capfd.readouterr()
        llm.create_completion("a b c a b c a b c a b", max_tokens=12, temperature=0.0)
        err = capfd.readouterr().err
    assert ("Llama.generate: " in err and " summary\n  Calls       begin 1 |" in err) is verbose
    assert ("  Acceptance  batches " in err) is verbose
