"""Every sampling parameter changes what it should (the samplers issue).

Distribution-level checks apply a chain to the model's real next-token
logits and look at what survives; sequence-level checks generate on SmolLM2.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from llama_cpp import Llama, LlamaGrammar, LogitsProcessorList, MinTokensLogitsProcessor
from llama_cpp import llama_grammar
from llama_cpp.sampling import SamplingParams
from llama_cpp_native import ffi, lib

CANDIDATE = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
STORY = "Write a short story about a dragon who loves books."


@pytest.fixture(scope="module")
def llm(smollm2_model_path: Path):
    with Llama(str(smollm2_model_path), n_ctx=1024, n_threads=2, verbose=False) as model:
        yield model


def survivors(llm: Llama, prompt: str = STORY, **params) -> np.ndarray:
    """Probabilities (descending) of the candidates a chain keeps for the next token after ``prompt``."""
    llm.reset()
    llm.eval(llm.tokenize(prompt.encode()))
    n = llm.n_vocab()
    data = ffi.new("llama_token_data[]", n)
    cands = np.frombuffer(ffi.buffer(data, n * CANDIDATE.itemsize), dtype=CANDIDATE)
    cands["id"] = np.arange(n)
    cands["logit"] = llm.logits_view()
    cur = ffi.new("llama_token_data_array *")
    cur.data, cur.size, cur.selected, cur.sorted = data, n, -1, False
    chain = llm._chain(SamplingParams(**params))
    try:
        lib.llama_sampler_apply(chain.ptr, cur)
    finally:
        chain.close()
    kept = np.frombuffer(ffi.buffer(cur.data, cur.size * CANDIDATE.itemsize), dtype=CANDIDATE)["logit"].copy()
    kept = kept[np.isfinite(kept)]
    probs = np.exp(kept - kept.max())
    return np.sort(probs / probs.sum())[::-1]


def entropy(p: np.ndarray) -> float:
    return float(-(p * np.log(p)).sum())


def generate_with_raw_probs(llm: Llama, n: int, **params) -> list[float]:
    """Generate n tokens; return each chosen token's probability under the model's raw distribution."""
    raw: list[np.ndarray] = []

    def record(_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        z = logits - logits.max()
        p = np.exp(z)
        raw.append(p / p.sum())
        return logits

    gen = llm.generate(llm.tokenize(STORY.encode()), logits_processor=LogitsProcessorList([record]),
                       ignore_eos=True, **params)
    chosen = []
    for token in gen:
        chosen.append(raw[-1][token])
        if len(chosen) == n:
            break
    gen.close()
    return chosen


# -- the distribution samplers -------------------------------------------------

def test_top_n_sigma_and_typical_p_cut_the_tail(llm: Llama) -> None:
    full = survivors(llm, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    sigma = survivors(llm, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, top_n_sigma=1.0)
    typical = survivors(llm, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=0.5)
    assert len(full) == llm.n_vocab()
    assert 1 <= len(sigma) < len(full) // 100
    assert 1 <= len(typical) < len(full) // 10


def test_xtc_at_probability_one_removes_the_top_choices(llm: Llama) -> None:
    plain = survivors(llm, temperature=1.0, top_k=40, top_p=1.0, min_p=0.0)
    above = plain[plain >= 0.05]
    assert len(above) >= 2, "the test needs at least two likely tokens"
    xtc = survivors(llm, temperature=1.0, top_k=40, top_p=1.0, min_p=0.0, xtc_probability=1.0, xtc_threshold=0.05)
    # every candidate above the threshold but the least likely of them is gone
    assert len(xtc) == len(plain) - (len(above) - 1)
    assert xtc[0] < plain[0]


def test_min_keep_holds(llm: Llama) -> None:
    assert len(survivors(llm, temperature=1.0, top_k=0, top_p=0.01, min_p=0.0)) < 5
    assert len(survivors(llm, temperature=1.0, top_k=0, top_p=0.01, min_p=0.0, min_keep=5)) >= 5
    assert len(survivors(llm, temperature=1.0, top_k=0, top_p=1.0, min_p=0.99, min_keep=12)) >= 12


def test_dynamic_temperature_changes_entropy(llm: Llama) -> None:
    base = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    plain = entropy(survivors(llm, **base))
    dynamic = entropy(survivors(llm, **base, dynatemp_range=0.9, dynatemp_exponent=1.0))
    assert abs(dynamic - plain) > 0.05


def test_mirostat_keeps_surprise_near_tau(llm: Llama) -> None:
    """Mirostat can only lower surprise below the model's own (about 3 bits here): taus below it are held."""
    def mean_surprise(**params) -> float:
        probs = generate_with_raw_probs(llm, 120, temperature=1.0, seed=7, **params)
        return float(np.mean([-np.log2(p) for p in probs[20:]]))  # after it has adapted

    natural = mean_surprise(top_k=0, top_p=1.0, min_p=0.0)
    low, mid = (mean_surprise(mirostat_mode=2, mirostat_tau=tau, mirostat_eta=0.1) for tau in (1.0, 2.0))
    assert abs(low - 1.0) < 0.6 and abs(mid - 2.0) < 0.8
    assert low < mid < natural
    v1 = mean_surprise(mirostat_mode=1, mirostat_tau=2.0, mirostat_eta=0.1)
    assert abs(v1 - 2.0) < 1.0


def test_adaptive_p_moves_towards_its_target(llm: Llama) -> None:
    low = generate_with_raw_probs(llm, 100, temperature=1.0, top_k=0, top_p=1.0, min_p=0.05,
                                  adaptive_target=0.2, adaptive_decay=0.9, seed=3)
    high = generate_with_raw_probs(llm, 100, temperature=1.0, top_k=0, top_p=1.0, min_p=0.05,
                                   adaptive_target=0.9, adaptive_decay=0.9, seed=3)
    assert np.mean(low[10:]) < np.mean(high[10:])
    assert abs(np.mean(low[10:]) - 0.2) < abs(np.mean(high[10:]) - 0.2)


def test_dry_stops_an_exact_repeated_sequence(llm: Llama) -> None:
    prompt = "Repeat after me: red green blue yellow, red green blue yellow, red green blue yellow, red green"
    plain = llm.create_completion(prompt, max_tokens=6, temperature=0.0)["choices"][0]["text"]
    assert plain.startswith(" blue yellow")  # plain sampling repeats the sequence
    dry = llm.create_completion(prompt, max_tokens=6, temperature=0.0, dry_multiplier=2.0, dry_base=1.75,
                                dry_allowed_length=2, dry_penalty_last_n=-1)["choices"][0]["text"]
    assert not dry.startswith(" blue yellow")


def test_min_tokens_processor_delays_the_end(llm: Llama) -> None:
    eos = llm.token_eos()
    processor = LogitsProcessorList([MinTokensLogitsProcessor(20, eos)])
    out = llm.create_completion("Say OK.", max_tokens=20, temperature=0.0, logits_processor=processor,
                                logit_bias={eos: 30.0})
    assert out["usage"]["completion_tokens"] == 20  # EOS was forbidden for the first 20 tokens


# -- grammars ------------------------------------------------------------------

def test_json_grammar_always_parses(llm: Llama) -> None:
    grammar = LlamaGrammar.from_string(llama_grammar.JSON_GBNF)
    for seed in range(4):
        out = llm.create_completion("Describe a person as a JSON object:\n", max_tokens=300, temperature=0.8,
                                    seed=seed, grammar=grammar)
        assert out["choices"][0]["finish_reason"] == "stop"
        json.loads(out["choices"][0]["text"])


def test_arithmetic_grammar_only_yields_expressions(llm: Llama) -> None:
    grammar = LlamaGrammar.from_string(llama_grammar.ARITHMETIC_GBNF)
    for seed in range(3):
        text = llm.create_completion("Compute: ", max_tokens=40, temperature=0.8, seed=seed,
                                     grammar=grammar)["choices"][0]["text"]
        assert re.fullmatch(r"[a-z0-9_ \t\n()+\-*/=]+", text), text
        assert re.match(r"\s*([a-z0-9_]|\()", text)  # it starts with a term


def test_wrong_gbnf_fails_at_construction_with_the_position() -> None:
    with pytest.raises(ValueError, match=r"line 2, column 14"):
        LlamaGrammar.from_string('root ::= "x"\nitem ::= ("a"')
    with pytest.raises(ValueError, match=r"Undefined rule identifier 'foo' at line 1, column 10"):
        LlamaGrammar.from_string("root ::= foo")
    with pytest.raises(ValueError, match="no rule named 'root'"):
        LlamaGrammar.from_string('start ::= "x"')


def test_lazy_grammar_starts_only_at_its_trigger(llm: Llama) -> None:
    grammar = LlamaGrammar.from_string('root ::= "Paris!!!"')
    prompt = "The capital of France is"
    plain = llm.create_completion(prompt, max_tokens=10, temperature=0.0)["choices"][0]["text"]
    assert plain.startswith(" Paris.")
    triggered = llm.create_completion(prompt, max_tokens=10, temperature=0.0, grammar=grammar, grammar_lazy=True,
                                      grammar_triggers=["Paris"])["choices"][0]["text"]
    assert triggered == " Paris!!!"
    untriggered = llm.create_completion(prompt, max_tokens=10, temperature=0.0, grammar=grammar, grammar_lazy=True,
                                        grammar_triggers=["Berlin"])["choices"][0]["text"]
    assert untriggered == plain
    with pytest.raises(ValueError, match="grammar_triggers"):
        llm.create_completion(prompt, grammar=grammar, grammar_lazy=True)


# -- the reasoning budget ----------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tiny_model_path: Path):
    with Llama(str(tiny_model_path), n_ctx=256, n_threads=2, verbose=False) as model:
        yield model


def _tokens_and_text(llm: Llama, n: int, **params) -> tuple[list[int], bytes]:
    gen = llm.generate(llm.tokenize(b"Hi"), temperature=0.0, **params)
    tokens = [next(gen) for _ in range(n)]
    gen.close()
    return tokens, llm.detokenize(tokens)


def test_reasoning_budget_closes_the_block_with_the_message(tiny: Llama) -> None:
    plain, _ = _tokens_and_text(tiny, 20)
    forced = tiny.tokenize(b"[done]</think>", add_bos=False, special=True)
    tokens, _ = _tokens_and_text(tiny, 20, reasoning_budget=5, reasoning_start_in_prompt=True,
                                 reasoning_budget_message="[done]")
    assert tokens[:5] == plain[:5]  # the budget of 5 tokens runs untouched
    assert tokens[5:5 + len(forced)] == forced  # then message + end are forced
    untouched, _ = _tokens_and_text(tiny, 20, reasoning_budget=-1, reasoning_start_in_prompt=True)
    assert untouched == plain


def test_reasoning_budget_waits_for_the_start_tag(tiny: Llama) -> None:
    plain, _ = _tokens_and_text(tiny, 20)
    start = tiny.detokenize([plain[2]]).decode("utf-8", "replace").strip()  # a "tag" greedy output contains
    assert start
    end = tiny.tokenize(b"</think>", add_bos=False, special=True)
    tokens, _ = _tokens_and_text(tiny, 20, reasoning_budget=3, reasoning_start=start)
    assert tokens[:6] == plain[:6]  # the start tag at token 2, then 3 tokens of budget
    assert tokens[6:6 + len(end)] == end
    # a start tag that never comes within reasoning_start_max_tokens leaves the output alone
    tokens, _ = _tokens_and_text(tiny, 20, reasoning_budget=3, reasoning_start="@@never@@",
                                 reasoning_start_max_tokens=4)
    assert tokens == plain


def test_reasoning_budget_zero_ends_at_once_and_later_blocks_pass(tiny: Llama) -> None:
    end = tiny.tokenize(b"</think>", add_bos=False, special=True)
    tokens, _ = _tokens_and_text(tiny, 12, reasoning_budget=0, reasoning_start_in_prompt=True)
    assert tokens[: len(end)] == end
    with pytest.raises(ValueError, match="reasoning_budget"):
        SamplingParams(reasoning_budget=-2)
    with pytest.raises(ValueError, match="reasoning_end"):
        SamplingParams(reasoning_end="")


# -- the seed README's sampling example --------------------------------------------------

def test_seed_readme_sampling_example_runs_unchanged(llm: Llama) -> None:
    model = llm
    response = model.create_completion(
        prompt="The secret to a happy life is",
        max_tokens=100,
        # Adjust core randomness
        temperature=0.85,
        top_p=0.90,
        min_p=0.05,
        # Prevent the model from repeating specific phrases
        dry_multiplier=0.8,
        dry_base=1.75,
        dry_allowed_length=3,
        # Standard repetition penalty
        repeat_penalty=1.1,
        penalty_last_n=256,
    )
    assert response["choices"][0]["text"]
    assert response["usage"]["completion_tokens"] <= 100
