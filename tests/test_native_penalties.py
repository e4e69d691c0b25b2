"""The engine's repetition penalties (``llama_cpp_native_penalties_init``) against llama.cpp's own sampler:
the same logits, bit for bit, whatever the window, the parameters and the order of the candidates."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest
from llama_cpp_native import ffi, lib

N_VOCAB = 500
CANDIDATE = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


def _pair(last_n: int, repeat: float, freq: float, present: float) -> Iterator[tuple[Any, Any]]:
    ours = lib.llama_cpp_native_penalties_init(last_n, repeat, freq, present)
    theirs = lib.llama_sampler_init_penalties(N_VOCAB, last_n, repeat, freq, present)
    try:
        yield ours, theirs
    finally:
        lib.llama_sampler_free(ours)
        lib.llama_sampler_free(theirs)


def _applied(smpl: Any, candidates: np.ndarray) -> tuple[np.ndarray, bool]:
    """The candidates after ``smpl``, and the array's ``sorted`` flag (set before: True)."""
    data = ffi.new("llama_token_data[]", len(candidates))
    view = np.frombuffer(ffi.buffer(data), dtype=CANDIDATE)
    view[:] = candidates
    cur = ffi.new("llama_token_data_array *", {"data": data, "size": len(candidates), "selected": -1,
                                               "sorted": True})
    lib.llama_sampler_apply(smpl, cur)
    return view.copy(), bool(cur.sorted)


def _arrays(rng: np.random.Generator) -> list[np.ndarray]:
    """The vocabulary in id order (as the engine's chain meets it), shuffled, and its best 40 by logit."""
    whole = np.zeros(N_VOCAB, dtype=CANDIDATE)
    whole["id"] = np.arange(N_VOCAB)
    whole["logit"] = rng.normal(0.0, 3.0, N_VOCAB).astype(np.float32)
    whole["logit"][rng.integers(0, N_VOCAB, 20)] = 0.0  # the sign rule's edge
    best = whole[np.argsort(-whole["logit"], kind="stable")[:40]]
    return [whole, rng.permutation(whole), best]


def _assert_same(ours: Any, theirs: Any, rng: np.random.Generator) -> None:
    for candidates in _arrays(rng):
        (got, got_sorted), (want, want_sorted) = _applied(ours, candidates), _applied(theirs, candidates)
        assert np.array_equal(got["id"], want["id"])
        assert np.array_equal(got["logit"].view(np.uint32), want["logit"].view(np.uint32))
        assert got_sorted == want_sorted


@pytest.mark.parametrize(("last_n", "repeat", "freq", "present"), [
    (64, 1.3, 0.1, 0.2), (3, 1.1, 0.0, 0.0), (1, 0.8, 0.5, 0.0), (128, 1.0, 0.25, 0.75), (2048, 1.5, 0.0, 1.0)])
def test_penalties_equal_llama_cpp_as_the_window_moves(last_n: int, repeat: float, freq: float,
                                                       present: float) -> None:
    rng = np.random.default_rng(last_n)
    for ours, theirs in _pair(last_n, repeat, freq, present):
        _assert_same(ours, theirs, rng)  # nothing accepted yet
        for step in range(300):
            # a small alphabet repeats; now and then an id no candidate has
            token = int(rng.integers(0, 12)) if step % 3 else int(rng.choice([rng.integers(0, N_VOCAB), N_VOCAB + 7,
                                                                                -1]))
            lib.llama_sampler_accept(ours, token)
            lib.llama_sampler_accept(theirs, token)
            if step % 7 == 0:
                _assert_same(ours, theirs, rng)


def test_a_clone_carries_the_window_and_reset_empties_it() -> None:
    rng = np.random.default_rng(3)
    for ours, theirs in _pair(16, 1.3, 0.1, 0.2):
        for token in rng.integers(0, 30, 40):
            lib.llama_sampler_accept(ours, int(token))
            lib.llama_sampler_accept(theirs, int(token))
        ours_copy, theirs_copy = lib.llama_sampler_clone(ours), lib.llama_sampler_clone(theirs)
        try:
            assert ffi.string(lib.llama_sampler_name(ours_copy)) == b"penalties"
            for token in (5, 5, 9):  # the clones move on; the originals stay
                lib.llama_sampler_accept(ours_copy, token)
                lib.llama_sampler_accept(theirs_copy, token)
            _assert_same(ours_copy, theirs_copy, rng)
            _assert_same(ours, theirs, rng)
            lib.llama_sampler_reset(ours_copy)
            lib.llama_sampler_reset(theirs_copy)
            _assert_same(ours_copy, theirs_copy, rng)
            untouched = _arrays(rng)[0]
            assert np.array_equal(_applied(ours_copy, untouched)[0], untouched)
        finally:
            lib.llama_sampler_free(ours_copy)
            lib.llama_sampler_free(theirs_copy)


@pytest.mark.parametrize(("last_n", "repeat", "freq", "present"), [(0, 1.3, 0.1, 0.2), (-1, 1.3, 0.0, 0.0),
                                                                    (64, 1.0, 0.0, 0.0)])
def test_disabled_penalties_change_nothing(last_n: int, repeat: float, freq: float, present: float) -> None:
    rng = np.random.default_rng(0)
    smpl = lib.llama_cpp_native_penalties_init(last_n, repeat, freq, present)
    try:
        for token in (1, 1, 2):
            lib.llama_sampler_accept(smpl, token)
        for candidates in _arrays(rng):
            after, still_sorted = _applied(smpl, candidates)
            assert np.array_equal(after, candidates) and still_sorted
    finally:
        lib.llama_sampler_free(smpl)
