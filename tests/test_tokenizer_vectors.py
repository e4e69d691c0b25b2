"""Tokenization through the low-level API equals llama.cpp's own test vectors.

For every models/ggml-vocab-*.gguf of the pinned source that has .inp/.out
files, each input is tokenized as llama.cpp's tests/test-tokenizer-0 does
(no special tokens added, special tokens not parsed) and compared with the
recorded ids.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lowlevel import C, load_model, tokenize

from llama_cpp.testing import vocab_test_vectors

_SEPARATOR = "\n__ggml_vocab_test__\n"


def read_vectors(gguf: Path) -> list[tuple[str, list[int]]]:
    """Parse the .inp/.out pair the way test-tokenizer-0.cpp does."""
    raw = gguf.with_name(gguf.name + ".inp").read_text(encoding="utf-8")
    inputs = raw.split(_SEPARATOR)
    if raw.endswith(_SEPARATOR):  # C++ stops at the end of the text, adding no empty case
        inputs = inputs[:-1]
    outputs = gguf.with_name(gguf.name + ".out").read_text(encoding="utf-8").split("\n")
    if outputs and outputs[-1] == "":
        outputs = outputs[:-1]
    assert len(inputs) == len(outputs), gguf
    return [(text, [int(t) for t in out.split()]) for text, out in zip(inputs, outputs)]


VOCABS = vocab_test_vectors()


def test_every_vocab_with_vectors_is_covered() -> None:
    assert len(VOCABS) >= 15


@pytest.mark.parametrize("gguf", VOCABS, ids=[p.name[len("ggml-vocab-"):-len(".gguf")] for p in VOCABS])
def test_tokenizer_matches_llama_cpp_vectors(gguf: Path) -> None:
    vectors = read_vectors(gguf)
    assert vectors
    model = load_model(gguf, vocab_only=True)
    try:
        vocab = C.llama_model_get_vocab(model)
        mismatches = []
        for text, expected in vectors:
            got = tokenize(vocab, text.encode("utf-8"), add_special=False, parse_special=False)
            if got != expected:
                mismatches.append((text, expected, got))
        assert not mismatches, mismatches[:3]
    finally:
        C.llama_model_free(model)
