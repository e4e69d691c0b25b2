"""``Llama.completion_events``: the same completion as ``create_completion``, token by token, with why each
choice ended, as llama-server reports it."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_cpp import Llama
from llama_cpp.completion_events import CompletionEvent
from llama_cpp.line_limits import LineLimits
from llama_cpp.llama_grammar import LlamaGrammar

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def tiny(tiny_model_path: Path):
    with Llama(str(tiny_model_path), n_ctx=256, n_threads=1, verbose=False) as llm:
        yield llm


def _split(events: list[CompletionEvent], index: int = 0) -> tuple[list[CompletionEvent], CompletionEvent]:
    mine = [e for e in events if e.index == index]
    assert mine[-1].end is not None and all(e.end is None for e in mine[:-1])
    return mine[:-1], mine[-1]


def test_the_events_carry_create_completions_text_and_every_token(tiny: Llama) -> None:
    text = tiny.create_completion(PROMPT, max_tokens=10, temperature=0)["choices"][0]["text"]
    tokens, last = _split(list(tiny.completion_events(PROMPT, max_tokens=10, temperature=0)))
    assert "".join(e.text for e in tokens) + last.text == text
    assert len(tokens) == 10 and all(e.token is not None for e in tokens)
    assert tiny.detokenize([e.token for e in tokens if e.token is not None], prev_tokens=[1]).decode() == text
    end = last.end
    assert end is not None and end.stop_type == "limit" and end.n_generated == 10 and end.stopping_word == ""
    assert end.prompt_tokens == tuple(tiny.tokenize(PROMPT.encode())) and end.n_prompt == len(end.prompt_tokens)
    assert 0 <= end.n_cached < end.n_prompt and end.prompt_ms >= 0 and end.predicted_ms >= 0
    assert not end.context_full and end.sequence >= 0


def test_a_stop_string_is_named_and_its_token_counted(tiny: Llama) -> None:
    free = tiny.create_completion(PROMPT, max_tokens=10, temperature=0)["choices"][0]["text"]
    word = free[len(free) // 2:][:2]
    tokens, last = _split(list(tiny.completion_events(PROMPT, max_tokens=10, temperature=0, stop=[word])))
    assert last.end is not None and last.end.stop_type == "word" and last.end.stopping_word == word
    assert "".join(e.text for e in tokens) + last.text == free[:free.index(word)]
    assert last.end.n_generated == len(tokens) < 10


def test_the_end_of_generation_token_is_an_event_of_no_text(tiny: Llama) -> None:
    eos = tiny.token_eos()
    tokens, last = _split(list(tiny.completion_events(PROMPT, max_tokens=8, temperature=0,
                                                      logit_bias={eos: 100.0})))
    assert [(e.token, e.text) for e in tokens] == [(eos, "")]
    assert last.end is not None and last.end.stop_type == "eos" and last.end.n_generated == 1


def test_the_end_of_the_context_is_told_apart_from_the_requests_limit(tiny: Llama) -> None:
    prompt = tiny.tokenize(b"x " * 120)
    _, last = _split(list(tiny.completion_events(prompt, max_tokens=None, temperature=0, ignore_eos=True)))
    assert last.end is not None and last.end.stop_type == "limit" and last.end.context_full
    assert last.end.n_prompt + last.end.n_generated == tiny.n_ctx()


def test_the_choices_of_one_prompt_share_its_evaluation(tiny: Llama) -> None:
    events = list(tiny.completion_events(PROMPT, max_tokens=4, temperature=0.9, seed=3, n=2))
    ends = [_split(events, index)[1].end for index in (0, 1)]
    assert all(end is not None for end in ends)
    second = ends[1]
    # the fork copied the evaluated prompt; only its last token is decoded again, for the fork's own logits
    assert second is not None and second.n_cached == second.n_prompt - 1


def test_the_keywords_that_shape_openai_objects_are_refused(tiny: Llama) -> None:
    for name in ("stream", "echo", "model"):
        with pytest.raises(TypeError, match=name):
            tiny.completion_events(PROMPT, **{name: True})
    with pytest.raises(TypeError):
        tiny.completion_events(PROMPT, no_such_keyword=1)


def test_n_indent_takes_back_the_first_line_indented_less() -> None:
    rules = LineLimits(n_indent=4)
    pieces = ["def f():", "\n", "    ", "return", " 1", "\n", "x"]
    outcomes = [rules.feed(piece, 0.0) for piece in pieces]
    assert outcomes == [None] * 6 + [1]  # stopped at "x": its line's one character taken back
    assert rules.text[:-1] == "def f():\n    return 1\n"


def test_t_max_predict_ms_stops_at_a_line_break_after_the_time() -> None:
    rules = LineLimits(t_max_predict_ms=10)
    assert [rules.feed(piece, ms) for piece, ms in [("a\n", 5.0), ("b", 12.0), ("\n", 13.0)]] == [None, None, 0]
    assert not LineLimits().active and LineLimits(n_indent=1).active


def test_line_rules_end_a_choice_at_the_limit(tiny: Llama) -> None:
    events = list(tiny.completion_events(PROMPT, max_tokens=12, temperature=0, t_max_predict_ms=1e-6,
                                         grammar=LlamaGrammar.from_string('root ::= "ab\\ncd\\nef"')))
    tokens, last = _split(events)
    assert "".join(e.text for e in tokens).endswith("\n") and last.end is not None
    assert last.end.stop_type == "limit" and last.end.n_generated == len(tokens)
    with pytest.raises(ValueError, match="n_indent"):
        tiny.completion_events(PROMPT, n_indent=-1)


def test_a_choice_pinned_to_a_sequence_runs_there_and_does_not_hold_the_others_up(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=512, n_seq_max=2, n_threads=1, verbose=False) as llm:
        pinned = llm.completion_events(PROMPT, max_tokens=6, temperature=0, sequence=1)
        first = next(pinned)  # sequence 1 is busy until this stream is read to its end
        assert first.token is not None
        other = list(llm.completion_events("Another prompt", max_tokens=3, temperature=0))
        assert other[-1].end is not None and other[-1].end.sequence == 0
        rest = list(pinned)
        assert rest[-1].end is not None and rest[-1].end.sequence == 1
        with pytest.raises(ValueError, match="sequence 2 does not exist"):
            list(llm.completion_events(PROMPT, max_tokens=1, sequence=2))


def test_return_progress_reports_the_prompt_before_the_first_token(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, n_batch=8, n_threads=1, verbose=False) as llm:
        plain = list(llm.completion_events(PROMPT * 3, max_tokens=4, temperature=0))
        llm.reset()
        events = list(llm.completion_events(PROMPT * 3, max_tokens=4, temperature=0, return_progress=True))
        reports = [e.progress for e in events if e.progress is not None]
        n_prompt = events[0].n_prompt
        assert [(p.total, p.cached, p.processed) for p in reports] == \
            [(n_prompt, 0, 0), *((n_prompt, 0, min(n, n_prompt)) for n in range(8, n_prompt + 8, 8))]
        assert all(e.token is None and e.end is None and e.text == "" for e in events[:len(reports)])
        assert [(e.token, e.text) for e in events[len(reports):]] == [(e.token, e.text) for e in plain]
        with pytest.raises(TypeError, match="return_progress must be True or False"):
            llm.completion_events(PROMPT, return_progress="yes")  # type: ignore[arg-type]


def test_post_sampling_probs_are_of_what_the_chain_left_and_sampling_is_unchanged(tiny: Llama) -> None:
    import math

    for sampling in ({"temperature": 0}, {"temperature": 0.8, "seed": 11}):
        plain = list(tiny.completion_events(PROMPT, max_tokens=8, logprobs=5, **sampling))
        post = list(tiny.completion_events(PROMPT, max_tokens=8, logprobs=5, post_sampling_probs=True, **sampling))
        assert [e.token for e in post] == [e.token for e in plain]  # the same tokens from the whole vocabulary
        for event in post[:-1]:
            assert event.logprob is not None and event.logprob <= event.top[0][1]
            assert sum(math.exp(v) for _, v in event.top) <= 1.0 + 1e-5
            if sampling["temperature"] == 0:
                assert event.logprob == 0.0 and event.top == ((event.token, 0.0),)
        if sampling["temperature"]:  # top-k 40, top-p 0.95 and min-p 0.05 leave a few, renormalized
            assert any(len(e.top) > 1 for e in post[:-1])
            assert all(max(v for _, v in e.top) >= max(v for _, v in p.top) for e, p in zip(post[:-1], plain[:-1]))
    with pytest.raises(TypeError, match="post_sampling_probs must be True or False"):
        tiny.completion_events(PROMPT, post_sampling_probs=1)  # type: ignore[arg-type]


def test_n_cache_reuse_evaluates_only_what_no_held_run_covers(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, n_threads=1, verbose=False) as llm:
        first = [1, *range(2000, 2040)]
        later = first[:10] + first[20:]
        list(llm.completion_events(first, max_tokens=2, temperature=0))
        end = list(llm.completion_events(later, max_tokens=2, temperature=0, n_cache_reuse=4))[-1].end
        assert end is not None and end.n_cached == len(later) - 1  # the run after the gap moved into place
        assert llm.input_ids[:len(later)].tolist() == later
        with pytest.raises(ValueError, match="n_cache_reuse must be a number of tokens"):
            llm.completion_events(later, n_cache_reuse=-1)
