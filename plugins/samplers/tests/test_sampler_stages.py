"""Which built-in stages a chain is made of, for given parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_cpp import Llama, LlamaGrammar
from llama_cpp.sampling import ChainContext, SamplerChain, SamplingParams


@pytest.fixture(scope="module")
def llm(tiny_model_path: Path):
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as model:
        yield model


def _active(llm: Llama, **params) -> list[str]:
    p = SamplingParams(**params)
    chain = SamplerChain(ChainContext(params=p, vocab=llm._vocab, n_vocab=llm.n_vocab(), n_ctx=256,
                                      eog_tokens=llm._eog_tokens() if p.ignore_eos else ()))
    try:
        return chain.active
    finally:
        chain.close()


def test_default_chain_in_the_seed_order(llm: Llama) -> None:
    assert _active(llm) == ["top_k", "top_p", "min_p", "temperature", "dist"]


def test_greedy_keeps_only_what_changes_the_argmax(llm: Llama) -> None:
    assert _active(llm, temperature=0.0) == ["greedy"]
    assert _active(llm, temperature=0.0, repeat_penalty=1.2, logit_bias={5: 1.0}) == [
        "logit_bias", "penalties", "greedy"]
    assert _active(llm, temperature=0.0, ignore_eos=True) == ["logit_bias", "greedy"]


def test_every_stage_can_be_switched_on(llm: Llama) -> None:
    active = _active(llm, grammar=LlamaGrammar.from_string('root ::= "a"'), logit_bias={5: 1.0},
                     repeat_penalty=1.1, dry_multiplier=0.8, top_n_sigma=1.5, typical_p=0.9, xtc_probability=0.5,
                     dynatemp_range=0.5)
    assert active == ["grammar", "logit_bias", "penalties", "dry", "top_n_sigma", "top_k", "typical_p", "top_p",
                      "min_p", "xtc", "temperature", "dist"]
    assert _active(llm, mirostat_mode=2)[-1] == "mirostat"
    assert _active(llm, adaptive_target=0.5)[-1] == "adaptive_p"


def test_samplers_overrides_the_order(llm: Llama) -> None:
    assert _active(llm, samplers=["temperature", "top_k"]) == ["temperature", "top_k", "dist"]
    with pytest.raises(ValueError, match="unknown sampler stage 'nope'"):
        _active(llm, samplers=["nope"])
    with pytest.raises(ValueError, match="filter stages only"):
        _active(llm, samplers=["greedy"])


def test_penalty_last_n_zero_disables_penalties(llm: Llama) -> None:
    assert "penalties" not in _active(llm, repeat_penalty=1.3, penalty_last_n=0)
