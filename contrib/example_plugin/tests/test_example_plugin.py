"""The example plugin's own test, written with llama_cpp.testing's fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_cpp import Llama
from llama_cpp.testing import registered_plugin

import llama_cpp_example_plugin


def test_banned_tokens_are_never_sampled(tiny_model_path: Path) -> None:
    with registered_plugin(llama_cpp_example_plugin), Llama(str(tiny_model_path), verbose=False) as llm:
        prompt = llm.tokenize(b"Once upon a time")
        gen = llm.generate(prompt, temperature=0.0)
        greedy = [next(gen) for _ in range(8)]
        gen.close()
        gen = llm.generate(prompt, temperature=0.0, extra_samplers=["banned_tokens"],
                           extra={"banned_tokens": greedy[:3]})
        banned_run = [next(gen) for _ in range(8)]
        gen.close()
        assert not set(greedy[:3]) & set(banned_run)
        with pytest.raises(ValueError, match="not a token id"):
            next(llm.generate(prompt, extra_samplers=["banned_tokens"], extra={"banned_tokens": [10**9]}))
