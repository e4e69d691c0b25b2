"""llama-cpp-python's hand-driven sampling objects: LlamaSamplingParams, LlamaSamplingContext, CustomSampler."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import llama_cpp
from llama_cpp import _logger
from llama_cpp import llama_cpp as C
from llama_cpp.llama import Llama
from llama_cpp.sampling_context import CommonSamplerType, CustomSampler, LlamaSamplingContext, LlamaSamplingParams


@pytest.fixture
def llm(tiny_model_path: Path) -> Iterator[Llama]:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        llm.eval(llm.tokenize(b"Once upon a time"))
        yield llm


def test_the_seed_names_are_these_objects() -> None:
    for name in ("CommonSamplerType", "CustomSampler", "LlamaSamplingContext", "LlamaSamplingParams"):
        assert getattr(llama_cpp, name) is getattr(llama_cpp.llama, name) is getattr(llama_cpp.sampling_context, name)
    assert (CommonSamplerType.TOP_K, CommonSamplerType.ADAPTIVE_P, CommonSamplerType.CUSTOM) == (2, 12, 99)
    assert "temp = 0.800" in repr(LlamaSamplingParams())


def test_sampling_by_hand_picks_what_llama_picks(llm: Llama) -> None:
    greedy = LlamaSamplingContext(LlamaSamplingParams(temp=0.0), llm._model)
    assert greedy.sample(llm._ctx) == int(np.argmax(llm.logits_view()))
    for seed in (1, 2, 3):
        by_hand = LlamaSamplingContext(LlamaSamplingParams(seed=seed), llm)
        assert by_hand.sample(llm.ctx) == llm.sample(seed=seed)  # same chain, same seed, same logits
        by_hand.close()
    token = greedy.sample(llm)
    greedy.accept(token)
    assert greedy.last() == token and greedy.prev_str(None, 1) == llm.detokenize([token]).decode()
    greedy.reset()
    assert greedy.last() is None
    greedy.close()
    greedy.close()
    with pytest.raises(RuntimeError, match="closed"):
        greedy.sample(llm)
    with pytest.raises(RuntimeError, match="model must not be None"):
        LlamaSamplingContext(LlamaSamplingParams())


def test_logit_bias_takes_the_seeds_entries(llm: Llama) -> None:
    best = int(np.argmax(llm.logits_view()))
    entries = [C.llama_logit_bias(token=best, bias=float("-inf"))]
    for bias in (entries, {best: float("-inf")}):
        ctx = LlamaSamplingContext(LlamaSamplingParams(temp=0.0, logit_bias=bias), llm)
        assert ctx.sample(llm) != best
        ctx.close()
    with pytest.raises(ValueError, match="top_p"):
        LlamaSamplingContext(LlamaSamplingParams(top_p=2.0), llm)


def test_the_grammar_is_applied_first_or_checks_the_pick(llm: Llama) -> None:
    ctx = LlamaSamplingContext(LlamaSamplingParams(temp=0.8, seed=4, grammar='root ::= "yes" | "no"'), llm)
    for grammar_first in (True, False):
        token = ctx.sample(llm, grammar_first=grammar_first)
        assert llm.detokenize([token]).strip() in (b"yes", b"no", b"y", b"n", b"ye")
    copy = ctx.cp()
    assert copy.sample(llm) == ctx.sample(llm)
    copy.close()
    assert ctx.sample(llm) in range(llm.n_vocab())  # the original outlives its copy
    ctx.close()


def test_a_token_the_grammar_refuses_is_not_accepted(llm: Llama) -> None:
    """llama.cpp's grammar ends the process when it is made to accept a token it does not allow."""
    ctx = LlamaSamplingContext(LlamaSamplingParams(temp=0.0, grammar='root ::= "yes"'), llm)
    no = llm.tokenize(b" no", add_bos=False)[0]
    with pytest.raises(ValueError, match=f"token {no} is not one the grammar allows"):
        ctx.accept(no)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ctx.accept(llm.n_vocab())
    token = ctx.sample(llm)  # nothing was accepted: the grammar is where it was
    ctx.accept(token)
    assert b"yes".startswith(llm.detokenize([token]).strip())
    ctx.accept(no, accept_grammar=False)  # the chain alone (penalties) may take any token
    ctx.close()


def test_a_custom_sampler_edits_the_candidates(llm: Llama) -> None:
    best = int(np.argmax(llm.logits_view()))
    seen: list[Any] = []

    def ban_best(cur_p: Any) -> None:
        assert isinstance(cur_p, C.llama_token_data_array)  # the seed's ctypes struct, over llama.cpp's array
        seen.append(cur_p.size)
        for i in range(cur_p.size):
            if cur_p.data[i].id == best:
                cur_p.data[i].logit = float("-inf")

    custom = CustomSampler(ban_best, accept_func=seen.append, name="ban")
    params = LlamaSamplingParams(temp=0.0, custom_samplers=[custom],
                                 samplers=[CommonSamplerType.CUSTOM, CommonSamplerType.TOP_K])
    ctx = LlamaSamplingContext(params, llm)
    token = ctx.sample(llm)
    assert token != best and seen == [llm.n_vocab()]
    ctx.accept(token)
    assert seen[-1] == token
    ctx.close()
    assert isinstance(custom.get_sampler(), int)
    custom.close()
    with pytest.raises(RuntimeError, match="closed"):
        custom.get_sampler()
    with pytest.raises(ValueError, match="CUSTOM"):
        LlamaSamplingContext(LlamaSamplingParams(custom_samplers=[CustomSampler(ban_best)]), llm)


def test_an_exception_in_a_callback_reaches_the_caller(llm: Llama) -> None:
    def broken(cur_p: Any) -> None:
        raise KeyError("from the callback")

    params = LlamaSamplingParams(custom_samplers=[CustomSampler(broken)], samplers=[CommonSamplerType.CUSTOM])
    ctx = LlamaSamplingContext(params, llm)
    with pytest.raises(KeyError, match="from the callback"):
        ctx.sample(llm)
    ctx.close()
    with pytest.raises(TypeError, match="callable"):
        CustomSampler(None)  # type: ignore[arg-type]


def test_the_reasoning_budget_can_be_forced_and_says_what_it_does(llm: Llama,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    level = _logger.get_verbosity()
    _logger.set_verbosity(3)  # the stage reports at info (Llama(verbose=False) lowered it)
    try:
        params = LlamaSamplingParams(temp=0.0, reasoning_budget=100, reasoning_start_in_prompt=True)
        ctx = LlamaSamplingContext(params, llm)
        assert ctx.force_reasoning_budget() and not ctx.force_reasoning_budget()
        forced = llm.tokenize(b"</think>", add_bos=False, special=True)
        assert ctx.sample(llm) == forced[0]
        ctx.close()
        idle = LlamaSamplingContext(LlamaSamplingParams(reasoning_budget=100), llm)
        assert not idle.force_reasoning_budget()  # no block has started
        idle.close()
    finally:
        _logger.set_verbosity(level)
    err = capsys.readouterr().err
    assert "reasoning budget: initialized (state=COUNTING" in err and "forced by the caller; entering FORCING" in err
