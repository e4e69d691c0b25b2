"""Every value that reaches llama.cpp is checked first: a ValueError naming the field and what is allowed.

Found by fuzzing the server: integers past what C holds (``seed`` 2**64 raised OverflowError inside the
engine, ``seed`` -2**70 silently became random), floats that are not finite, lists long enough to stall
the engine (1000 DRY breakers took 22 s to build), malformed messages and tools (KeyError in a chat
format), generation on an embedding model and past a learned position table (llama.cpp aborted the
process).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from llama_cpp import Llama, LlamaGrammar
from llama_cpp.chat_messages import normalize_messages
from llama_cpp.engine.normalize import MAX_STOPS, MAX_TOOLS, check_tools, stop_list
from llama_cpp.sampling import LLAMA_DEFAULT_SEED, MAX_LIST_ENTRIES, SamplingParams, normalize_seed


@pytest.fixture(scope="module")
def llm(tiny_model_path: Path) -> Llama:
    with Llama(str(tiny_model_path), n_ctx=256, n_threads=2, chat_format="chatml", verbose=False) as model:
        yield model


@pytest.mark.parametrize("field, value, says", [
    ("seed", 2**64, "seed must be in 0..4294967295"),
    ("seed", -1, "seed must be in 0..4294967295"),
    ("top_k", 2**40, "top_k must be in -2147483648..2147483647"),
    ("min_keep", -1, "min_keep must be in 0..2147483647"),
    ("penalty_last_n", 2**31, "penalty_last_n must be in -1..2147483647"),
    ("dry_allowed_length", 2**31, "dry_allowed_length must be in 0..2147483647"),
    ("reasoning_budget", 2**33, "reasoning_budget must be in -1..2147483647"),
    ("temperature", math.inf, "temperature must be a finite number"),
    ("temperature", math.nan, "temperature must be a finite number"),
    ("mirostat_tau", -math.inf, "mirostat_tau must be a finite number"),
    ("repeat_penalty", math.inf, "repeat_penalty must be a finite number"),
    ("logit_bias", {5: math.nan}, "logit_bias values must be numbers (finite, or -inf to ban a token)"),
    ("logit_bias", {5: math.inf}, "logit_bias values must be numbers (finite, or -inf to ban a token)"),
    ("logit_bias", {t: 1.0 for t in range(MAX_LIST_ENTRIES["logit_bias"] + 1)}, "at most 4096 are allowed"),
    ("dry_seq_breakers", [f"b{i}" for i in range(65)], "dry_seq_breakers has 65 entries; at most 64"),
    ("dry_seq_breakers", ["x" * 257], "at most 256 characters"),
    ("dry_seq_breakers", [""], "non-empty strings"),
])
def test_sampling_params_refuse_what_c_cannot_hold(field, value, says) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        SamplingParams(**{field: value})
    assert says in str(caught.value)


def test_a_banned_token_is_still_allowed() -> None:
    assert SamplingParams(logit_bias={5: -math.inf}).logit_bias == {5: -math.inf}


def test_grammar_triggers_are_bounded() -> None:
    from llama_cpp.llama_grammar import LlamaGrammar

    grammar = LlamaGrammar.from_string('root ::= "a"')
    with pytest.raises(ValueError, match="grammar_triggers has 65 entries; at most 64"):
        SamplingParams(grammar=grammar, grammar_lazy=True, grammar_triggers=[f"w{i}" for i in range(65)])


@pytest.mark.parametrize("seed, expected", [(0, 0), (7, 7), (LLAMA_DEFAULT_SEED, LLAMA_DEFAULT_SEED),
                                            (-1, LLAMA_DEFAULT_SEED), (-2**31, LLAMA_DEFAULT_SEED)])
def test_seed_zero_is_a_seed_and_negative_is_random(seed, expected) -> None:
    assert normalize_seed(seed) == expected


@pytest.mark.parametrize("seed", [2**32, -2**31 - 1, -2**70, 2**64, 1.5, True, "1"])
def test_seed_out_of_range_is_refused(llm: Llama, seed) -> None:
    with pytest.raises(ValueError, match=r"seed must be an integer in -2147483648\.\.4294967295"):
        llm.create_completion("hi", max_tokens=2, seed=seed)
    with pytest.raises(ValueError, match="seed must be an integer"):
        llm.set_seed(seed)


def test_stop_lists_are_bounded(llm: Llama) -> None:
    assert stop_list(["a", "", "b"]) == ["a", "b"]
    with pytest.raises(ValueError, match=f"stop has {MAX_STOPS + 1} strings; at most {MAX_STOPS}"):
        llm.create_completion("hi", max_tokens=2, stop=[f"s{i}" for i in range(MAX_STOPS + 1)])
    with pytest.raises(ValueError, match="a stop string has 5000 characters; at most 4096"):
        llm.create_completion("hi", max_tokens=2, stop=["x" * 5000])
    with pytest.raises(ValueError, match="stop must be a string or a list of strings"):
        llm.create_completion("hi", max_tokens=2, stop=5)


@pytest.mark.parametrize("messages, says", [
    ([], "messages must be a non-empty list"),
    ([{}], "messages[0].role must be a non-empty string"),
    ([{"role": 3, "content": "x"}], "messages[0].role must be a non-empty string"),
    ([{"role": "user", "content": 3}], "messages[0].content must be a string, a list of content parts or null"),
    ([{"role": "user", "content": [{"text": "x"}]}], "messages[0].content[0] must be a dict with a string 'type'"),
    ([{"role": "user", "content": [{"type": "text", "text": 1}]}], "messages[0].content[0].text must be a string"),
    ([{"role": "user", "content": "x"}, "hi"], "messages[1] must be a dict"),
    ([{"role": "assistant", "content": None, "tool_calls": "x"}], "messages[0].tool_calls must be a list"),
])
def test_malformed_messages_are_named(llm: Llama, messages, says) -> None:
    with pytest.raises(ValueError) as caught:
        normalize_messages(messages)
    assert says in str(caught.value)
    with pytest.raises(ValueError) as through_llama:
        llm.create_chat_completion(messages=messages, max_tokens=2)
    assert says in str(through_llama.value)


@pytest.mark.parametrize("tools, functions, says", [
    ([{"type": "function", "function": {}}], None, "tools[0].function.name is required"),
    ([{"type": "function"}], None, "tools[0].function must be a dict with a 'name'"),
    ([{"type": "retrieval"}], None, "tools[0] must be {'type': 'function'"),
    ([{"type": "function", "function": {"name": "f", "parameters": "nope"}}], None,
     "tools[0].function.parameters must be a JSON schema object"),
    ([{"type": "function", "function": {"name": "f", "description": 3}}], None,
     "tools[0].function.description must be a string"),
    (None, [{}], "functions[0].name is required"),
    (None, "f", "functions must be a list"),
    ([{"type": "function", "function": {"name": f"f{i}"}} for i in range(MAX_TOOLS + 1)], None,
     f"tools has {MAX_TOOLS + 1} entries; at most {MAX_TOOLS}"),
    ([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}], None,
     "tools[1].function.name 'f' is also tools[0].function's: tool names must be unique"),
])
def test_malformed_tools_are_named(llm: Llama, tools, functions, says) -> None:
    with pytest.raises(ValueError) as caught:
        check_tools(tools, functions)
    assert says in str(caught.value)
    with pytest.raises(ValueError) as through_llama:
        llm.create_chat_completion(messages=[{"role": "user", "content": "x"}], tools=tools, functions=functions,
                                   tool_choice="required" if tools else None, max_tokens=2)
    assert says in str(through_llama.value)


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("request_, says", [
    (dict(tool_choice="required"), "tool_choice forces a call, but no tools (or functions) were given"),
    (dict(tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice forces a call"),
    (dict(function_call={"name": "f"}), "function_call forces a call"),
    (dict(tools=[TOOL], tool_choice="required", grammar=LlamaGrammar.from_string('root ::= "a"', verbose=False)),
     "a forced tool call cannot take a grammar or response_format"),
    (dict(tools=[TOOL], tool_choice="required", response_format={"type": "json_object"}),
     "a forced tool call cannot take a grammar or response_format"),
    (dict(chat_template_kwargs={"tools": []}), "chat_template_kwargs: 'tools' is the request's own"),
])
def test_a_request_that_contradicts_itself_is_refused(llm: Llama, request_: dict[str, Any], says: str) -> None:
    """A forced call with nothing to call (OpenAI's 400) or with a grammar of the caller's (llama-server's
    400: the call's grammar would replace it), a template variable the request sets itself."""
    with pytest.raises(ValueError, match=re.escape(says)):
        llm.create_chat_completion(messages=[{"role": "user", "content": "x"}], max_tokens=2, **request_)


def test_an_empty_prompt_starts_from_bos(llm: Llama) -> None:
    """Documented: an empty prompt ("" or no tokens) is generated from BOS, as llama-server does."""
    for prompt in ("", [], [[]], [""]):
        out = llm.create_completion(prompt, max_tokens=2, temperature=0.0)
        assert out["usage"]["prompt_tokens"] == 1


def test_infill_support_is_reported(llm: Llama) -> None:
    assert llm.supports_infill() is False
    out = llm.create_completion("a", suffix=" end", max_tokens=2, temperature=0.0)
    assert out["choices"][0]["text"].endswith(" end")  # the seed's meaning without FIM tokens: appended


def test_an_encoder_model_refuses_to_generate(minilm_model_path: Path) -> None:
    """MiniLM (BERT: non-causal attention, no logits) makes embeddings, not text: generating from it ran past
    its 512 positions and aborted the process."""
    with Llama(str(minilm_model_path), embedding=True, n_ctx=2048, n_threads=2, verbose=False) as bert:
        with pytest.raises(ValueError, match="this model's attention is not causal"):
            bert.create_completion("", max_tokens=0, ignore_eos=True)
        with pytest.raises(ValueError, match="this model's attention is not causal"):
            list(bert.create_completion("hello", max_tokens=4, stream=True))
        assert len(bert.embed("still embeds")) == bert.n_embd()


def test_a_learned_position_table_bounds_every_sequence(minilm_model_path: Path) -> None:
    """BERT's position embeddings have 512 rows: n_ctx 2048 and n_ubatch 2048 would let an input run past
    them (llama.cpp asserts in get_rows); the input limit is the trained positions."""
    with Llama(str(minilm_model_path), embedding=True, n_ctx=2048, n_batch=2048, n_ubatch=2048, n_threads=2,
               verbose=False) as bert:
        assert bert.n_ctx_train() == 512
        assert bert.scheduler.ctx.n_ctx_seq == 512
        with pytest.raises(ValueError, match="the model's 512 trained positions"):
            bert.embed([list(range(100, 700))], truncate=False)
        assert len(bert.embed([list(range(100, 600))], truncate=True)[0]) == bert.n_embd()


def test_rope_models_keep_their_context(llm: Llama) -> None:
    """No learned position table (RoPE): the context is what was asked for, past the trained length too."""
    assert llm.scheduler.ctx.max_positions is None
    assert llm.scheduler.ctx.n_ctx_seq == 256
