"""Outlines (``outlines[llamacpp]``) runs unchanged on our ``Llama``, used the way its documentation shows.

``outlines.from_llamacpp(Llama(...))`` wraps the model. On construction its ``LlamaCppTokenizer`` reads the
whole vocabulary through the ctypes low-level API re-exported from ``llama_cpp``
(``llama_model_get_vocab(model.model)``, ``llama_token_to_piece(vocab, i, ctypes buffer, 32, 0, True)``), plus
``model.tokenizer()``, ``token_eos()`` and ``n_vocab()``. Generation calls ``Llama.__call__`` (``chat_mode=False``)
or ``create_chat_completion`` (the default chat mode) with ``logits_processor=LogitsProcessorList([...])``:
structured output is outlines' own logits processor editing our numpy logits in place, token by token, then
``model.reset()``.

Everything runs greedy (``temperature=0``) on SmolLM2-135M-Instruct, so each result is compared with what our
own API gives for the same request, or with what the constraint allows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import outlines
import pytest
from outlines.types import Regex
from pydantic import BaseModel

from llama_cpp import Llama

QUESTION = "What is the capital of France?"


class User(BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module")
def llm(smollm2_model_path: Path) -> Any:
    with Llama(str(smollm2_model_path), n_ctx=1024, verbose=False) as model:
        yield model


@pytest.fixture(scope="module")
def model(llm: Llama) -> Any:
    return outlines.from_llamacpp(llm)


def test_the_tokenizer_reads_the_vocabulary_through_the_ctypes_api(model: Any, llm: Llama) -> None:
    tokenizer = model.tokenizer
    assert tokenizer.eos_token_id == llm.token_eos()
    assert tokenizer.vocabulary[tokenizer.eos_token] == llm.token_eos()
    # every id got a piece; only pieces that several ids share (byte tokens...) collapse into one entry
    assert 0.9 * llm.n_vocab() < len(tokenizer.vocabulary) <= llm.n_vocab()
    for token in llm.tokenize(b" The capital of France is Paris", add_bos=False):
        piece = llm.detokenize([token], special=True).decode("utf-8")
        assert tokenizer.vocabulary[piece] == token
    ids, mask = tokenizer.encode("Hello world")
    assert ids == llm.tokenize(b"Hello world", add_bos=True, special=True)
    assert mask == [1] * len(ids)
    assert tokenizer.decode(ids) == [llm.detokenize(ids).decode("utf-8")]


def test_plain_text_in_chat_mode_is_create_chat_completion(model: Any, llm: Llama) -> None:
    text = model(QUESTION, max_tokens=16, temperature=0)
    assert isinstance(text, str) and text.strip()
    expected = llm.create_chat_completion(
        [{"role": "user", "content": QUESTION}], max_tokens=16, temperature=0
    )["choices"][0]["message"]["content"]
    assert text == expected


def test_plain_text_without_chat_mode_is_a_completion(llm: Llama) -> None:
    prompt = "The capital of France is"
    text = outlines.from_llamacpp(llm, chat_mode=False)(prompt, max_tokens=12, temperature=0)
    assert text.strip()
    assert text == llm(prompt, max_tokens=12, temperature=0)["choices"][0]["text"]


def test_stream_gives_the_same_text_in_pieces(model: Any) -> None:
    whole = model(QUESTION, max_tokens=16, temperature=0)
    pieces = list(model.stream(QUESTION, max_tokens=16, temperature=0))
    assert len(pieces) > 1
    assert "".join(pieces) == whole


def test_a_pydantic_model_gives_json_that_validates(model: Any) -> None:
    result = model("Extract the user from: Jason is 30 years old. Answer in JSON.", User,
                   max_tokens=60, temperature=0)
    user = User.model_validate_json(result)
    assert user.name == "Jason"
    assert user.age == 30


def test_the_same_through_a_generator_and_a_chat(model: Any) -> None:
    generator = outlines.Generator(model, User)
    chat = outlines.inputs.Chat([
        {"role": "system", "content": "You extract data as JSON."},
        {"role": "user", "content": "Mary is 41 years old."},
    ])
    user = User.model_validate_json(generator(chat, max_tokens=60, temperature=0))
    assert user.name == "Mary"
    assert user.age == 41


def test_a_regex_constrains_the_text(model: Any) -> None:
    pattern = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    text = model("Write today's date in ISO format.", Regex(pattern), max_tokens=20, temperature=0)
    assert re.fullmatch(pattern, text), text


def test_a_regex_of_choices_picks_one(model: Any) -> None:
    text = model("Is Paris in France? Answer yes or no.", Regex(r"(yes|no)"), max_tokens=4, temperature=0)
    assert text in ("yes", "no")
