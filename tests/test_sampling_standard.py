"""Each standard sampling parameter changes what it should, on SmolLM2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from llama_cpp import Llama, sampling
from llama_cpp.engine import sampler as engine_sampler

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


def test_a_grammar_left_no_token_it_allows_is_an_error_not_an_abort(llm: Llama) -> None:
    """Every token the grammar allows taken away by a logits processor: llama.cpp's grammar throws when it is
    given the token chosen anyway, which used to end the process."""
    from llama_cpp import LlamaGrammar

    banana = llm.tokenize(b" banana", add_bos=False)[0]

    def only_banana(input_ids: Any, scores: np.ndarray) -> np.ndarray:
        scores[:] = -np.inf
        scores[banana] = 0.0
        return scores

    for temperature in (0.0, 0.8):
        with pytest.raises(ValueError, match="the sampler chain left no token to choose"):
            llm.create_completion(PROMPT, max_tokens=4, temperature=temperature, seed=1, logits_processor=only_banana,
                                  grammar=LlamaGrammar.from_string('root ::= "yes"', verbose=False))
    assert llm.create_completion(PROMPT, max_tokens=4, temperature=0.0,
                                 grammar=LlamaGrammar.from_string('root ::= "yes"', verbose=False),
                                 )["choices"][0]["text"] == "yes"


def test_a_chain_built_by_hand_that_leaves_no_token_raises(llm: Llama) -> None:
    """``SamplerChain.sample`` outside the engine: the same refusal as the engine's, not llama.cpp's abort."""
    from llama_cpp import LlamaGrammar

    spelling = [t for t in range(llm.n_vocab()) if llm.detokenize([t]) and b"yes".startswith(llm.detokenize([t]))]
    grammar = LlamaGrammar.from_string('root ::= "yes"', verbose=False)
    llm.reset()
    llm.eval(llm.tokenize(PROMPT.encode()))
    banned = {t: float("-inf") for t in spelling}
    chain = llm._chain(sampling.SamplingParams(temperature=0.0, grammar=grammar, logit_bias=banned))
    try:
        with pytest.raises(ValueError, match="left no token to choose"):
            chain.sample(llm._settled_ctx())
    finally:
        chain.close()
    chain = llm._chain(sampling.SamplingParams(temperature=0.0, grammar=grammar))
    try:
        assert chain.sample(llm._settled_ctx()) in spelling
    finally:
        chain.close()


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


class _TopPathCounts:
    """What the top-k path of every sequence sampler made from now on did, read from their native choices:
    tokens chosen from the tokens near the best logit (``cut``), and tokens left to the whole vocabulary."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.samplers: list[engine_sampler.SequenceSampler] = []
        init = engine_sampler.SequenceSampler.__init__

        def kept(sampler: engine_sampler.SequenceSampler, *args: Any, **kwargs: Any) -> None:
            init(sampler, *args, **kwargs)
            self.samplers.append(sampler)

        monkeypatch.setattr(engine_sampler.SequenceSampler, "__init__", kept)

    @property
    def cut(self) -> int:
        return sum(s.choice.n_top_cut for s in self.samplers)

    @property
    def whole(self) -> int:
        return sum(s.choice.n_top_whole for s in self.samplers)


def _whole_vocabulary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chains built from now on never declare a leading top-k: llama.cpp samples from the whole vocabulary."""
    ordered = sampling._ordered_stages

    def without_keeps_top(params: Any) -> Any:
        filters, finals = ordered(params)
        return [attrs.evolve(stage, keeps_top=None) for stage in filters], finals

    monkeypatch.setattr(sampling, "_ordered_stages", without_keeps_top)


def _round_to_halves(input_ids: Any, scores: np.ndarray) -> np.ndarray:
    return np.round(scores * 2.0) / 2.0  # many equal logits among the best


@pytest.mark.parametrize(("processor", "bias"), [(None, {}), (_round_to_halves, {}), (None, "strong")],
                         ids=["distinct", "ties", "biased"])
def test_top_k_candidates_choose_what_the_whole_vocabulary_chooses(llm: Llama, monkeypatch: pytest.MonkeyPatch,
                                                                    processor: Any, bias: Any) -> None:
    """A chain that begins with top-k (after at most a logit bias) is handed only the tokens that can be
    among the k best; with equal logits among the best (where llama.cpp's partial sort has an order of its
    own) it gets the whole vocabulary.  Either way it draws what it draws from the whole vocabulary, token
    for token; a bias that lifts weak tokens into the best and pushes strong ones out changes nothing there."""
    counts = _TopPathCounts(monkeypatch)
    if bias == "strong":
        greedy = _tokens(llm, 8, temperature=0.0)
        weak = [llm.tokenize(w.encode(), add_bos=False)[0] for w in (" banana", " umbrella", " seventeen")]
        bias = {**{t: -6.0 for t in greedy}, **{t: 9.0 for t in weak}}
    keywords = dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.02, seed=21, logits_processor=processor,
                    logit_bias=bias or None, ignore_eos=True)
    fast = _tokens(llm, 64, **keywords)
    if processor is None:
        assert counts.cut >= 64 and counts.whole == 0
    else:
        assert counts.whole > 0  # the ties sent some tokens to the whole vocabulary
    _whole_vocabulary(monkeypatch)
    counts.samplers.clear()
    assert _tokens(llm, 64, **keywords) == fast
    assert counts.cut == counts.whole == 0


@pytest.mark.parametrize(("keywords", "leading"), [
    (dict(temperature=0.8, top_k=40), 40),
    (dict(temperature=0.8, top_k=0), 0),  # no top-k: the chain begins with top-p
    (dict(temperature=0.8, top_k=40, logit_bias={5: 1.0}), 40),  # the bias, then the top-k
    (dict(temperature=0.8, top_k=40, ignore_eos=True), 40),  # -inf on EOG is a bias too
    (dict(temperature=0.8, top_k=40, repeat_penalty=1.2), 0),  # so do the penalties
    (dict(temperature=0.0, top_k=40), 0),  # greedy has no top-k stage at all
])
def test_a_chain_knows_its_leading_top_k(llm: Llama, keywords: dict, leading: int) -> None:
    chain = sampling.SamplerChain(sampling.ChainContext(params=sampling.SamplingParams(**keywords), vocab=llm._vocab,
                                                        n_vocab=llm.n_vocab(), n_ctx=256, eog_tokens=()))
    try:
        assert chain.leading_top == leading, chain.active
    finally:
        chain.close()
