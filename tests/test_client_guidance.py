"""guidance runs unchanged on our ``Llama``, used the way its documentation shows.

``guidance.models.LlamaCpp(llm)`` takes a ``Llama`` and drives it through the ctypes low-level API: llguidance
builds its tokenizer from ``llama_model_get_vocab(llm.model)`` (``llguidance.llamacpp.lltokenizer_from_vocab``
casts the raw function pointers of ``llama_cpp._lib``), and generation is guidance's own decode loop on
``llm.ctx``: ``llama_batch_init``, ``batch.token[j] = ...`` on the ctypes Structure, ``llama_memory_seq_rm``,
``llama_decode``, ``llama_get_logits`` read through ``numpy.ctypeslib``. Every token is chosen by guidance
(greedy at ``temperature=0``), constrained by llguidance's grammar for ``select``, ``regex`` and ``stop``.

So a greedy ``gen`` must give the text our own ``create_completion`` gives for the same prompt, and because
guidance decodes into ``llm.ctx`` behind the engine's back, our calls after it must still be right.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from guidance import assistant, gen, models, select, user
from guidance.chat import ChatMLTemplate

from llama_cpp import Llama

PROMPT = "Q: What is the capital of France?\nA: The capital of France is"


@pytest.fixture(scope="module")
def llm(smollm2_model_path: Path) -> Any:
    with Llama(str(smollm2_model_path), n_ctx=1024, verbose=False) as model:
        yield model


@pytest.fixture(scope="module")
def lm(llm: Llama) -> Any:
    # SmolLM2's template is ChatML; guidance says so itself (with a warning) when it is not told
    return models.LlamaCpp(llm, echo=False, chat_template=ChatMLTemplate)


def _completion(llm: Llama, prompt: str, stop: list[str], max_tokens: int) -> str:
    return llm.create_completion(prompt, max_tokens=max_tokens, temperature=0, stop=stop)["choices"][0]["text"]


def test_gen_with_a_stop_is_the_greedy_completion(lm: Any, llm: Llama) -> None:
    before = _completion(llm, PROMPT, ["."], 20)
    out = lm + PROMPT + gen("answer", stop=".", max_tokens=20, temperature=0)
    answer = out["answer"]
    assert answer.strip() and "." not in answer
    assert "Paris" in answer
    assert answer == before
    assert str(out) == PROMPT + answer
    # guidance's decodes went into llm.ctx: our next call must not sample from what it left there
    assert _completion(llm, PROMPT, ["."], 20) == before


def test_gen_in_chat_roles(lm: Any, llm: Llama) -> None:
    with user():
        out = lm + "What is the capital of Japan?"
    with assistant():
        out += gen("answer", stop=".", max_tokens=16, temperature=0)
    answer = out["answer"]
    assert "Tokyo" in answer and "." not in answer
    text = str(out)
    assert text.endswith(answer)
    prompt = text[: len(text) - len(answer)]
    assert "What is the capital of Japan?" in prompt
    assert _completion(llm, prompt, ["."], 16) == answer


def test_select_picks_one_of_the_options(lm: Any) -> None:
    options = ["Paris", "London", "Tokyo"]
    out = lm + PROMPT + " " + select(options, name="city")
    assert out["city"] in options
    assert out["city"] == "Paris"
    assert str(out) == PROMPT + " " + out["city"]


def test_select_yes_or_no(lm: Any) -> None:
    out = lm + "Q: Is Paris in France? Answer yes or no.\nA: " + select(["yes", "no"], name="yn")
    assert out["yn"] in ("yes", "no")


def test_gen_with_a_regex(lm: Any) -> None:
    out = lm + "Q: What is 12 plus 30?\nA: " + gen("n", regex=r"[0-9]+", max_tokens=5)
    assert re.fullmatch(r"[0-9]+", out["n"]), out["n"]
