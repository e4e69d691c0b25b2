"""The example speculative engine, installed as a package, used by name: lossless, and it drafts."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest

from llama_cpp import Llama

CODE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
PROMPT = "Here is some Python code:\n\n" + CODE + "Write the same code again, exactly:\n\n" + CODE + "Once more:\n\n"


def test_installed_as_a_plugin_package() -> None:
    names = {ep.name for ep in entry_points(group="llama_cpp")}
    assert "example_speculative" in names


def test_used_by_name_and_lossless(smollm2_model_path: Path) -> None:
    model = str(smollm2_model_path)
    with Llama(model, n_ctx=512, n_threads=2, verbose=False) as plain:
        expected = plain.create_completion(PROMPT, max_tokens=48, temperature=0.0)["choices"][0]["text"]
    with Llama(model, n_ctx=512, n_threads=2, n_seq_max=2, verbose=False,
               speculative={"engine": "example-bigram", "max_tokens": 6}) as llm:
        assert llm.create_completion(PROMPT, max_tokens=48, temperature=0.0)["choices"][0]["text"] == expected
        stats = llm.last_speculative_stats
        assert stats["accepted"] > 10 and stats["accepted"] <= stats["drafted"]
        assert max(len(p) for p in [stats["acceptance_rate_per_position"]]) <= 6
        # a second request reuses the prompt's prefix: the engine hears the rollback and stays right
        again = llm.create_completion(PROMPT, max_tokens=48, temperature=0.0)["choices"][0]["text"]
        assert again == expected


def test_options_are_checked() -> None:
    from llama_cpp_example_speculative import BigramEngine

    with pytest.raises(ValueError, match="max_tokens must be an integer >= 1"):
        BigramEngine(max_tokens=0)
