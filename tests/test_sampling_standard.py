"""Each standard sampling parameter changes what it should, on SmolLM2."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_cpp import Llama

PROMPT = "Write a story about a dragon:"


@pytest.fixture(scope="module")
def llm(smollm2_model_path: Path):
    with Llama(str(smollm2_model_path), n_ctx=512, n_threads=2, verbose=False) as model:
        yield model


def _tokens(llm: Llama, n: int = 24, **kw) -> list[int]:
    gen = llm.generate(llm.tokenize(PROMPT.encode()), **kw)
    out = []
    for token in gen:
        out.append(token)
        if len(out) == n:
            break
    gen.close()
    return out


def test_top_k_1_equals_greedy(llm: Llama) -> None:
    greedy = _tokens(llm, temperature=0.0)
    assert _tokens(llm, temperature=1.5, top_k=1, top_p=1.0, min_p=0.0, seed=7) == greedy


def test_large_logit_bias_forces_a_token(llm: Llama) -> None:
    target = llm.tokenize(b" banana", add_bos=False)[0]
    assert set(_tokens(llm, 6, temperature=0.8, seed=3, logit_bias={target: 100.0})) == {target}


def test_same_seed_repeats_and_different_seeds_differ(llm: Llama) -> None:
    a = _tokens(llm, temperature=1.0, seed=11)
    assert _tokens(llm, temperature=1.0, seed=11) == a
    others = [_tokens(llm, temperature=1.0, seed=s) for s in (12, 13, 14)]
    assert any(o != a for o in others)


def test_repeat_penalty_reduces_repetition(llm: Llama) -> None:
    def distinct_ratio(tokens: list[int]) -> float:
        return len(set(tokens)) / len(tokens)

    plain = _tokens(llm, 64, temperature=0.0)
    penalized = _tokens(llm, 64, temperature=0.0, repeat_penalty=1.5, penalty_last_n=64)
    assert distinct_ratio(penalized) > distinct_ratio(plain)


def test_ignore_eos_is_applied_in_the_sampler(llm: Llama) -> None:
    eos = llm.token_eos()
    tokens = _tokens(llm, 32, temperature=0.0, ignore_eos=True, logit_bias={eos: 50.0})
    assert eos not in tokens and len(tokens) == 32


def test_per_call_seed_and_instance_seed(smollm2_model_path: Path) -> None:
    with Llama(str(smollm2_model_path), n_ctx=256, seed=5, n_threads=2, verbose=False) as a, \
            Llama(str(smollm2_model_path), n_ctx=256, seed=5, n_threads=2, verbose=False) as b:
        assert _tokens(a, temperature=1.0) == _tokens(b, temperature=1.0)
        b.set_seed(6)
        assert _tokens(a, temperature=1.0, seed=6) == _tokens(b, temperature=1.0)


def test_greedy_fast_path_equals_the_native_chain_with_bias(llm: Llama) -> None:
    """Greedy with a logit bias and ignore_eos skips llama.cpp's candidate array (numpy argmax);
    top_k=1 at temperature 1 takes the same decision through the full native chain."""
    bias = {llm.tokenize(b" the", add_bos=False)[0]: 3.0, llm.tokenize(b" a", add_bos=False)[0]: -2.0}
    fast = _tokens(llm, 48, temperature=0.0, logit_bias=bias, ignore_eos=True)
    chain = _tokens(llm, 48, temperature=1.0, top_k=1, top_p=1.0, min_p=0.0, logit_bias=bias, ignore_eos=True)
    assert fast == chain
