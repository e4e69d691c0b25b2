"""create_completion / generate behaviour: stops, streaming, echo, logprobs, infill, hooks, state."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from lowlevel import rss_bytes

from llama_cpp import Llama, LogitsProcessorList, StoppingCriteriaList
from llama_cpp._text import StopScanner, utf8_complete_length
from llama_cpp_native import lib

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def smol(smollm2_model_path: Path):
    with Llama(str(smollm2_model_path), n_ctx=512, n_threads=2, verbose=False) as llm:
        yield llm


@pytest.fixture(scope="module")
def tiny(tiny_model_path: Path):
    with Llama(str(tiny_model_path), n_ctx=256, n_threads=2, verbose=False) as llm:
        yield llm


def _stream_texts(llm: Llama, prompt: str, **kw) -> list[str]:
    return [c["choices"][0]["text"] for c in llm.create_completion(prompt, stream=True, **kw)]


def test_stop_string_ends_the_text_and_is_not_emitted(smol: Llama) -> None:
    free = smol.create_completion(PROMPT, max_tokens=24, temperature=0.0)["choices"][0]["text"]
    assert "\n\n" in free  # the unconstrained text goes on past the stop string
    out = smol.create_completion(PROMPT, max_tokens=24, temperature=0.0, stop=["\n\n"])
    assert out["choices"][0]["text"] == free.split("\n\n")[0]
    assert out["choices"][0]["finish_reason"] == "stop"
    chunks = _stream_texts(smol, PROMPT, max_tokens=24, temperature=0.0, stop=["\n\n"])
    assert "".join(chunks) == free.split("\n\n")[0]
    assert all("\n" not in c for c in chunks)  # not even the first half of the stop string


def test_partial_stop_string_is_held_back_then_released(smol: Llama) -> None:
    free = smol.create_completion(PROMPT, max_tokens=24, temperature=0.0)["choices"][0]["text"]
    head, tail = free.split("\n\n", 1)
    never = "\n\n" + tail[:3] + "@@never@@"  # shares a long prefix with the text, never matches
    chunks = _stream_texts(smol, PROMPT, max_tokens=24, temperature=0.0, stop=[never])
    assert "".join(chunks) == free


def test_incomplete_utf8_is_held_back() -> None:
    e_acute = "é".encode()
    assert utf8_complete_length(b"ab" + e_acute[:1]) == 2
    assert utf8_complete_length(b"ab" + e_acute) == 4
    emoji = "🦙".encode()
    scanner = StopScanner([])
    assert scanner.feed(emoji[:2]) == (b"", False)
    assert scanner.feed(emoji[2:]) == (emoji, False)


def test_echo_streams_the_prompt_first(smol: Llama) -> None:
    chunks = _stream_texts(smol, PROMPT, max_tokens=4, temperature=0.0, echo=True)
    assert chunks[0] == PROMPT
    whole = smol.create_completion(PROMPT, max_tokens=4, temperature=0.0, echo=True)["choices"][0]["text"]
    assert whole == "".join(chunks) and whole.startswith(PROMPT)


def test_max_tokens_none_means_the_rest_of_the_context(tiny: Llama) -> None:
    prompt = tiny.tokenize(b"Once upon a time")
    out = tiny.create_completion(prompt, max_tokens=None, temperature=0.0, ignore_eos=True)
    assert out["usage"]["completion_tokens"] == tiny.n_ctx() - len(prompt)
    assert out["usage"]["total_tokens"] == tiny.n_ctx()
    assert out["choices"][0]["finish_reason"] == "length"


def test_logprobs_without_history(smol: Llama) -> None:
    out = smol.create_completion(PROMPT, max_tokens=6, temperature=0.0, logprobs=3)
    lp = out["choices"][0]["logprobs"]
    n = out["usage"]["completion_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    assert "".join(lp["tokens"]) == out["choices"][0]["text"]
    for value, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
        assert value <= 0 and len(top) == 3
        assert value == pytest.approx(max(top.values()), abs=1e-5)  # greedy picks the most likely token
    assert lp["text_offset"] == sorted(lp["text_offset"])


def test_infill_orders_prefix_suffix_middle(tiny_model_factory) -> None:
    with Llama(str(tiny_model_factory(vocab="starcoder")), n_ctx=256, n_threads=2, verbose=False) as llm:
        vocab = llm._vocab
        pre, suf, mid = lib.llama_vocab_fim_pre(vocab), lib.llama_vocab_fim_suf(vocab), lib.llama_vocab_fim_mid(vocab)
        assert min(pre, suf, mid) >= 0, "the starcoder vocabulary has fill-in-the-middle tokens"
        prefix, suffix = "def add(a, b):\n", "\n    return c\n"
        psm = llm._infill_tokens(prefix, suffix)
        assert psm.index(pre) < psm.index(suf) < psm.index(mid) == len(psm) - 1
        assert llm.detokenize(psm[psm.index(pre) + 1:psm.index(suf)]) == prefix.encode()
        llm.spm_infill = True
        spm = llm._infill_tokens(prefix, suffix)
        assert spm.index(suf) < spm.index(pre) < spm.index(mid) == len(spm) - 1
        llm.spm_infill = False
        out = llm.create_completion(prefix, suffix=suffix, max_tokens=4, temperature=0.0)
        assert out["usage"]["prompt_tokens"] == len(psm)
        assert not out["choices"][0]["text"].endswith(suffix)  # the suffix is context here, not appended


def test_suffix_without_fim_tokens_is_appended(tiny: Llama) -> None:
    out = tiny.create_completion("Hello", suffix=" THE END", max_tokens=3, temperature=0.0)
    assert out["choices"][0]["text"].endswith(" THE END")


def test_logits_processor_edits_a_zero_copy_view_and_are_kept(smol: Llama) -> None:
    greedy = smol.tokenize(b" Paris", add_bos=False)[0]
    forced = smol.tokenize(b" Rome", add_bos=False)[0]
    seen_lengths = []

    def processor(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        assert np.shares_memory(scores, smol.logits_view())
        seen_lengths.append(len(input_ids))
        scores[forced] += 1000.0
        return scores

    gen = smol.generate(smol.tokenize(PROMPT.encode()), temperature=0.0,
                        logits_processor=LogitsProcessorList([processor]), logit_bias={greedy: 50.0})
    first = [next(gen) for _ in range(3)]
    gen.close()
    assert first == [forced] * 3  # the processor's edit survives the later logit_bias stage
    assert seen_lengths[1] == seen_lengths[0] + 1 and seen_lengths[2] == seen_lengths[0] + 2


def test_stopping_criteria_sees_the_token_just_sampled(smol: Llama) -> None:
    paris = smol.tokenize(b" Paris", add_bos=False)[0]
    seen: list[int] = []

    def criterion(input_ids: np.ndarray, logits: np.ndarray) -> bool:
        seen.append(int(input_ids[-1]))
        return int(input_ids[-1]) == paris

    out = smol.create_completion(PROMPT, max_tokens=10, temperature=0.0,
                                 stopping_criteria=StoppingCriteriaList([criterion]))
    assert seen == [paris]
    assert out["choices"][0]["text"] == "" and out["choices"][0]["finish_reason"] == "stop"


def test_hooks_may_be_plain_lists_and_anything_else_is_named(tiny: Llama) -> None:
    # [fn] where the seed's type is StoppingCriteriaList([fn]) used to fail inside the tick ("'list' object is
    # not callable"); a plain list or tuple of callables is that list now
    stop_at_once = [lambda ids, logits: True]
    out = tiny.create_completion("Once", max_tokens=8, stopping_criteria=stop_at_once)
    assert out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] == 0
    seen: list[int] = []

    def count(ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        seen.append(len(ids))
        return scores

    tiny.create_completion("Once", max_tokens=3, temperature=0.0, ignore_eos=True, logits_processor=(count,))
    assert len(seen) == 3
    for bad in ("stop", [count, 3]):
        with pytest.raises(TypeError, match="stopping_criteria must be a callable or a list of callables"):
            tiny.create_completion("Once", max_tokens=2, stopping_criteria=bad)
    assert tiny.create_completion("Once", max_tokens=2)["choices"][0]["finish_reason"]  # nothing left behind


def test_abort_from_another_thread(tiny: Llama) -> None:
    stream = tiny.create_completion("Once", max_tokens=200, temperature=0.0, ignore_eos=True, stream=True)
    seen = []
    for i, chunk in enumerate(stream):
        seen.append(chunk)
        if i == 5:  # from another thread, and done before the stream reads on (it may take its 200 in a blink)
            aborting = threading.Thread(target=tiny.abort)
            aborting.start()
            aborting.join()
    assert seen[-1]["choices"][0]["finish_reason"] == "abort"
    assert seen[-1]["usage"]["completion_tokens"] < 200
    again = tiny.create_completion("Once", max_tokens=4, temperature=0.0)
    assert again["choices"][0]["finish_reason"] in {"length", "stop"}  # usable afterwards


def test_a_decode_aborted_on_purpose_prints_nothing(tiny_model_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # llama.cpp logs three error lines for a compute stopped by the abort callback ("failed to compute graph",
    # ...); verbose=False prints errors, and these alarmed whoever aborted (a server drops every request whose
    # client left this way)
    with Llama(str(tiny_model_path), n_ctx=512, verbose=False) as llm:
        ctx = llm._scheduler.ctx
        ctx.request_abort()  # the next decode of more than 32 tokens stops at once, as an abort mid-way does
        try:
            out = llm.create_completion("Once upon a time " * 20, max_tokens=4)
        finally:
            ctx.clear_abort()
        assert out["choices"][0]["finish_reason"] == "abort"
        assert capfd.readouterr().err == ""
        assert llm.create_completion("Once upon a time " * 20, max_tokens=2)["choices"][0]["finish_reason"] == "length"


def test_context_shifts_when_full(tiny: Llama) -> None:
    n_ctx = tiny.n_ctx()
    gen = tiny.generate(tiny.tokenize(b"Once upon a time"), temperature=0.0, ignore_eos=True)
    count = 0
    for _ in gen:
        count += 1
        assert tiny.n_tokens <= n_ctx
        if count == n_ctx + 50:
            break
    gen.close()
    assert count == n_ctx + 50


def test_prefix_of_the_kv_cache_is_reused(tiny: Llama) -> None:
    base = tiny.tokenize(b"Once upon a time there was a")
    tiny.reset()
    tiny.create_completion(base, max_tokens=1, temperature=0.0)
    ctx = tiny._live_ctx()
    lib.llama_perf_context_reset(ctx)
    tiny.create_completion(base + base[1:4], max_tokens=1, temperature=0.0)
    assert lib.llama_perf_context(ctx).n_p_eval == 3  # only the new tokens were evaluated


def test_save_and_load_state_repeat_generation(smol: Llama) -> None:
    tokens = smol.tokenize(PROMPT.encode())
    smol.reset()
    smol.eval(tokens)
    state = smol.save_state()
    first = smol.create_completion(tokens, max_tokens=8, temperature=1.0, seed=3)["choices"][0]["text"]
    smol.reset()
    smol.load_state(state)
    assert smol.n_tokens == len(tokens)
    again = smol.create_completion(tokens, max_tokens=8, temperature=1.0, seed=3)["choices"][0]["text"]
    assert first == again


def test_send_evaluates_extra_tokens(tiny: Llama) -> None:
    prompt = tiny.tokenize(b"Once upon")
    gen = tiny.generate(prompt, temperature=0.0)
    next(gen)
    extra = tiny.tokenize(b" a time", add_bos=False)
    gen.send(extra)
    assert tiny.n_tokens == len(prompt) + 1 + len(extra)
    gen.close()


def test_200_llama_cycles_do_not_grow_memory(tiny_model_path: Path) -> None:
    def cycle() -> None:
        with Llama(str(tiny_model_path), n_ctx=256, n_threads=2, verbose=False) as llm:
            llm.create_completion("Hi", max_tokens=2, temperature=0.0)

    for _ in range(5):
        cycle()
    before = rss_bytes()
    for _ in range(200):
        cycle()
    assert rss_bytes() - before < 20 * 1024 * 1024


def test_a_model_whose_memory_cannot_shift_gets_a_clear_error(tiny_model_factory) -> None:
    with Llama(str(tiny_model_factory(arch="qwen2vl")), n_ctx=256, n_threads=2, verbose=False) as llm:
        gen = llm.generate(llm.tokenize(b"Once upon"), temperature=0.0, ignore_eos=True)
        with pytest.raises(RuntimeError, match="cannot shift; increase n_ctx"):
            for _ in gen:
                pass
        # nothing was corrupted: the instance still completes
        assert llm.create_completion("Once", max_tokens=3, temperature=0.0)["usage"]["completion_tokens"] == 3


def test_logits_all_keeps_scores_and_scores_the_echoed_prompt(smollm2_model_path: Path) -> None:
    with Llama(str(smollm2_model_path), n_ctx=256, n_threads=2, logits_all=True, verbose=False) as llm:
        out = llm.create_completion(PROMPT, max_tokens=4, temperature=0.0, echo=True, logprobs=2)
        lp = out["choices"][0]["logprobs"]
        n_prompt = out["usage"]["prompt_tokens"]
        assert len(lp["tokens"]) == n_prompt + out["usage"]["completion_tokens"]
        assert lp["token_logprobs"][0] is None and all(v is not None for v in lp["token_logprobs"][1:])
        assert out["choices"][0]["text"].startswith(PROMPT)
        # row i of scores is what the model predicted after token i; " Paris" is likely after the prompt
        assert llm.scores.shape == (llm.n_tokens, llm.n_vocab())
        paris = llm.tokenize(b" Paris", add_bos=False)[0]
        assert int(llm.scores[n_prompt - 1].argmax()) == paris
    with Llama(str(smollm2_model_path), n_ctx=256, verbose=False) as llm:
        out = llm.create_completion(PROMPT, max_tokens=2, temperature=0.0, echo=True, logprobs=1)
        assert out["choices"][0]["logprobs"]["token_logprobs"][1] is None  # no history without logits_all
        # without logits_all only the last row is kept, as in the seed: the logits after the last token
        last = llm.scores
        assert last.shape == (1, llm.n_vocab()) and np.isfinite(last).all()
        assert np.array_equal(last[0], llm.eval_logits[-1])


@pytest.mark.parametrize("max_tokens", [6, 30], ids=["finished-in-the-burst", "running"])
@pytest.mark.parametrize("stream", [True, False])
def test_a_stop_string_leaves_the_sequence_as_llama_cpp_python_does(tiny: Llama, monkeypatch: pytest.MonkeyPatch,
                                                                   max_tokens: int, stream: bool) -> None:
    """The stop string is in the third token's text; a burst (engine.planner) decoded past it, to the request's
    end or to its reader's read-ahead.  Afterwards the sequence holds the prompt and the two tokens before the
    stop, as llama-cpp-python's (which decodes a token only once the next is asked for): ``n_tokens``,
    ``input_ids`` and ``eval_tokens`` say so."""
    import llama_cpp.engine.planner as planner

    monkeypatch.setattr(planner, "BURST_BUDGET_S", 10.0)  # however slow the machine, the burst goes on
    prompt = "Once upon a time"
    ids = tiny.tokenize(prompt.encode())
    generated = []
    for token in tiny.generate(ids, temperature=0.0):
        generated.append(token)
        if len(generated) == 3:
            break
    stop = tiny.detokenize(generated[2:3]).decode()
    before = tiny.scheduler.stats().n_burst_decodes
    result = tiny.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, stop=[stop], stream=stream)
    text = "".join(c["choices"][0]["text"] for c in result) if stream else result["choices"][0]["text"]
    assert text == tiny.detokenize(generated[:2]).decode()
    # (with the overlap on, test_engine_overlap_suite.py, the decode started ahead goes past it instead)
    assert tiny.scheduler.stats().n_burst_decodes > before or tiny.scheduler.overlap
    assert tiny.n_tokens == len(ids) + 2
    assert list(tiny.input_ids) == tiny.eval_tokens == [*ids, *generated[:2]]
