"""A lazy grammar waits for its trigger outside the reasoning block: the block follower and the feed on text
tokens, then the grammar stage on a tiny model (a trigger written inside the thinking starts nothing; one
after it does), copied and freed by the hand-driven sampling context."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from llama_cpp.llama import Llama
from llama_cpp.sampling_context import LlamaSamplingContext, LlamaSamplingParams
from llama_cpp_samplers.lazy_grammar import GrammarFeed, Place, ReasoningBlock


def given(feed: GrammarFeed, pieces: list[str]) -> list[bool]:
    return [feed.takes(100, piece) for piece in pieces]


def test_the_block_is_kept_from_the_grammar_whatever_the_tokens_split_its_markers() -> None:
    feed = GrammarFeed(ReasoningBlock("<think>", "</think>", opened=False, window=32), ("<tool_call>",), frozenset())
    pieces = ["<th", "ink>", "I may <tool_", "call> it", "</", "think>", "\n", "<tool_call>"]
    assert given(feed, pieces) == [True, False, False, False, False, False, True, True]
    assert feed.block.place is Place.AFTER


def test_a_block_the_prompt_opened_is_kept_from_the_first_token() -> None:
    feed = GrammarFeed(ReasoningBlock("<think>", "</think>", opened=True, window=32), ("<tool_call>",), frozenset())
    assert given(feed, ["<tool_call>", " x", "</think>", "ok"]) == [False, False, False, True]


def test_no_block_in_the_window_means_none_comes() -> None:
    feed = GrammarFeed(ReasoningBlock("<think>", "</think>", opened=False, window=2), ("<tool_call>",), frozenset())
    assert given(feed, ["a", "b", "<think>", "c"]) == [True, True, True, True]


def test_a_trigger_before_the_block_gives_the_grammar_every_token_after_it() -> None:
    """A grammar that has started constrains each next token, so it must see each one, a '<think>' inside a
    string argument included."""
    feed = GrammarFeed(ReasoningBlock("<think>", "</think>", opened=False, window=32), ("<tool_call>",),
                       frozenset({7}))
    assert given(feed, ["<tool", "_call>", '{"a": "<think>', '"}']) == [True, True, True, True]
    feed.reset()
    assert feed.block.place is Place.BEFORE and feed.takes(7, "") and feed.takes(100, "<think>")  # a trigger token


@pytest.fixture
def llm(tiny_model_path: Path) -> Iterator[Llama]:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        llm.eval(llm.tokenize(b"Once upon a time"))
        yield llm


def text_tokens(llm: Llama, text: str) -> list[int]:
    tokens = llm.tokenize(b"a" + text.encode(), add_bos=False)  # after a word: no leading space added
    assert llm.detokenize(tokens[:1]).strip() == b"a"
    return tokens[1:]


def test_the_grammar_starts_at_a_trigger_after_the_thinking_not_inside_it(llm: Llama) -> None:
    params = LlamaSamplingParams(temp=0.0, grammar='root ::= "go" " yes"', grammar_lazy=True,
                                 grammar_triggers=["go"])
    ctx = LlamaSamplingContext(params, llm)
    free_pick = int(np.argmax(llm.logits_view()))
    for token in text_tokens(llm, "<think>go</think>"):
        ctx.accept(token)
    assert ctx.sample(llm) == free_pick  # the "go" in the thinking started nothing
    for token in text_tokens(llm, " go"):
        ctx.accept(token)
    picked = ctx.sample(llm)
    assert b" yes".startswith(llm.detokenize([picked]))  # constrained now
    copy = ctx.cp()  # the copy has its own grammar, in the same state; each is freed once
    assert copy.sample(llm) == picked
    copy.close()
    assert ctx.sample(llm) == picked
    ctx.reset()  # back before the thinking: waiting again
    assert ctx.sample(llm) == free_pick
    ctx.close()
