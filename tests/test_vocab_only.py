"""``Llama(vocab_only=True)``: a vocabulary and metadata without weights or context, and detokenize as the seed gives it."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Callable

import pytest

from llama_cpp import Llama
from llama_cpp.llama_tokenizer import LlamaTokenizer


@pytest.fixture
def spm(llama_vocab_file: Callable[[str], Path]) -> Any:
    with Llama(str(llama_vocab_file("llama-spm")), vocab_only=True, verbose=False) as llm:
        yield llm


def test_detokenize_round_trips_after_bos(spm: Llama) -> None:
    # llama-cpp-python's test (tests/test_llama.py::test_llama_cpp_tokenization): the space the
    # SentencePiece tokenizer put in front of the text comes off again after BOS
    assert spm.tokenize(b"Hello World") == [1, 15043, 2787]
    assert spm.detokenize([1, 15043, 2787]) == b"Hello World"
    assert spm.detokenize(spm.tokenize(b" Hello")) == b" Hello"
    assert spm.detokenize(spm.tokenize(b"")) == b""
    assert spm.detokenize([1, 15043, 2787, 2], special=True) == b"<s>Hello World</s>"
    assert spm.tokenizer().decode(spm.tokenize(b"Hello World")) == "Hello World"


def test_tokens_one_at_a_time_add_up_to_the_text(spm: Llama) -> None:
    # the seed's generate() example prints detokenize([token]) for each token: every space must stay
    tokens = spm.tokenize(b"Hello World, again", add_bos=False)
    assert b"".join(spm.detokenize([t]) for t in tokens) == b" Hello World, again"
    assert spm.detokenize(tokens) == b" Hello World, again"  # no BOS: nothing says where the text starts
    assert spm.detokenize([2787], prev_tokens=[1, 15043]) == b" World"
    assert spm.detokenize([]) == b""


def test_a_bpe_vocabulary_keeps_the_spaces_of_the_text(llama_vocab_file: Callable[[str], Path]) -> None:
    with Llama(str(llama_vocab_file("gpt-2")), vocab_only=True, verbose=False) as llm:
        assert llm.detokenize(llm.tokenize(b" Hello World", add_bos=False)) == b" Hello World"
        assert llm.detokenize(llm.tokenize(b"Hello World", add_bos=False)) == b"Hello World"


def test_vocab_only_tokenizes_and_reads_metadata(spm: Llama, llama_vocab_file: Callable[[str], Path]) -> None:
    assert spm.n_vocab() == 32000
    assert (spm.token_bos(), spm.token_eos()) == (1, 2)
    assert spm.metadata["tokenizer.ggml.model"] == "llama"
    assert spm._ctx is None  # no context at all (the seed made one anyway: docs/differences.md)
    tokenizer = LlamaTokenizer.from_ggml_file(str(llama_vocab_file("llama-spm")))
    assert tokenizer.encode("Hello World") == [1, 15043, 2787]
    copy = pickle.loads(pickle.dumps(spm))
    try:
        assert copy.tokenize(b"Hello") == spm.tokenize(b"Hello")
    finally:
        copy.close()


@pytest.mark.parametrize("call", [
    lambda llm: llm.create_completion("Hello"),
    lambda llm: llm("Hello"),
    lambda llm: llm.create_chat_completion([{"role": "user", "content": "Hello"}]),
    lambda llm: next(llm.generate([1, 15043])),
    lambda llm: llm.eval([1, 15043]),
    lambda llm: llm.sample(),
    lambda llm: llm.embed("Hello"),
    lambda llm: llm.save_state(),
    lambda llm: llm.n_ctx(),
], ids=["create_completion", "__call__", "create_chat_completion", "generate", "eval", "sample", "embed",
        "save_state", "n_ctx"])
def test_what_needs_a_context_says_so(spm: Llama, call: Callable[[Llama], Any]) -> None:
    with pytest.raises(RuntimeError, match="vocab_only=True: it tokenizes"):
        call(spm)
