"""The engine's greedy choice (``llama_cpp_native_choose`` with ``argmax``: the first maximum of the biased
row, found by vectorized scans without a candidate array) against llama.cpp's own chain of logit bias and
greedy sampler, on crafted rows: every length around the scans' 32-float steps, ties, NaN, infinities, and
biases that do and do not reach the best logit."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from llama_cpp_native import ffi, lib

from llama_cpp import Llama

LENGTHS = (1, 2, 3, 4, 5, 31, 32, 33, 63, 64, 65, 95, 96, 97, 1000, 32000)


@pytest.fixture(scope="module")
def row(tiny_model_path: Path) -> Iterator[tuple[Any, np.ndarray]]:
    """A context whose last decode left a logits row, and that row as a writable array (32000 floats)."""
    with Llama(str(tiny_model_path), n_ctx=64, n_threads=1, verbose=False) as llm:
        llm.eval([1, 450])
        ctx = ffi.cast("struct llama_context *", llm.ctx)
        logits = lib.llama_get_logits_ith(ctx, -1)
        yield ctx, np.frombuffer(ffi.buffer(logits, llm.n_vocab() * 4), dtype=np.float32)


def _ours(ctx: Any, n: int, bias: dict[int, float]) -> int:
    ids = sorted(bias)
    keep = [ffi.new("llama_token[]", ids), ffi.new("float[]", [bias[i] for i in ids])]
    choice = ffi.new("struct llama_cpp_native_choice *", {"n_vocab": n, "argmax": 1, "bias_ids": keep[0],
                                                          "bias_values": keep[1], "n_bias": len(ids)})
    return int(lib.llama_cpp_native_choose(choice, ctx, -1))


def _llama_cpp(values: np.ndarray, bias: dict[int, float]) -> int:
    """What llama.cpp's logit-bias sampler and greedy sampler select from the same logits, in id order."""
    n = len(values)
    data = ffi.new("llama_token_data[]", [{"id": i, "logit": float(v), "p": 0.0} for i, v in enumerate(values)])
    cur = ffi.new("llama_token_data_array *", {"data": data, "size": n, "selected": -1, "sorted": False})
    entries = ffi.new("llama_logit_bias[]", [{"token": t, "bias": b} for t, b in bias.items()])
    for smpl in (lib.llama_sampler_init_logit_bias(n, len(bias), entries), lib.llama_sampler_init_greedy()):
        lib.llama_sampler_apply(smpl, cur)
        lib.llama_sampler_free(smpl)
    return int(data[cur.selected].id)


def _rows(n: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Rows of n logits that exercise each branch of the scans."""
    base = rng.normal(0.0, 3.0, n).astype(np.float32)
    yield base
    for at in {0, n // 2, n - 1, (n // 32) * 32 - 1, (n // 32) * 32}:  # the best at the ends of the steps
        if 0 <= at < n:
            shaped = base.copy()
            shaped[at] = 50.0
            yield shaped
    tied = base.copy()
    tied[rng.choice(n, size=min(n, 3), replace=False)] = 40.0  # the first of equal maxima wins
    yield tied
    yield np.full(n, 1.5, dtype=np.float32)
    yield np.full(n, -np.inf, dtype=np.float32)
    nan = base.copy()
    nan[rng.choice(n, size=max(1, n // 7), replace=False)] = np.nan  # NaN never wins...
    yield nan
    lead = base.copy()
    lead[0] = np.nan  # ...unless the row starts with it: nothing compares greater
    yield lead
    peak = base.copy()
    peak[n // 3] = np.inf
    yield peak


@pytest.mark.parametrize("n", LENGTHS)
def test_the_first_maximum_equals_llama_cpps_greedy_sampler(row: tuple[Any, np.ndarray], n: int) -> None:
    ctx, logits = row
    rng = np.random.default_rng(n)
    for values in _rows(n, rng):
        logits[:n] = values
        best = _llama_cpp(values, {})
        assert _ours(ctx, n, {}) == best, values
        biases: list[dict[int, float]] = [
            {best: -100.0},  # the winner pushed down: every logit is ranked, biased
            {int(rng.integers(n)): 1000.0},  # a token lifted over the best
            {int(rng.integers(n)): 0.5, int(rng.integers(n)): -0.25},
        ]
        for bias in biases:
            assert _ours(ctx, n, bias) == _llama_cpp(values, bias), (values, bias)
