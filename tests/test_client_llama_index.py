"""LlamaIndex's ``LlamaCPP`` (llama-index-llms-llama-cpp) runs unchanged on our ``Llama``.

The package pins ``llama-cpp-python>=0.3.0,<0.4``; ``nox -s tests`` installs it with a plain
``pip install llama-index-llms-llama-cpp`` after this project, so the pin has to be met by this distribution
(``pip`` would otherwise fetch the reference from the package index and put it in our place).

``LlamaCPP(model_path=..., temperature=..., max_new_tokens=..., context_window=..., messages_to_prompt=...,
completion_to_prompt=...)``, as its docstring shows, constructs ``Llama(model_path=..., n_ctx=context_window,
verbose=...)``, reads ``n_ctx()`` and ``context_params.n_ctx``, and generates with
``Llama(prompt=..., temperature=..., max_tokens=..., stream=...)``, reading ``choices[0]["text"]``;
``chat`` renders the messages with ``messages_to_prompt`` and completes that.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any, Sequence

import pytest
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.llms.llama_cpp import LlamaCPP
from packaging.requirements import Requirement

from llama_cpp import Llama

MAX_NEW_TOKENS = 24
QUESTION = "What is the capital of Japan?"


def messages_to_prompt(messages: Sequence[ChatMessage]) -> str:
    """SmolLM2's ChatML, in the shape of the docstring's example."""
    prompt = ""
    for message in messages:
        prompt += f"<|im_start|>{message.role.value}\n{message.content}<|im_end|>\n"
    return prompt + "<|im_start|>assistant\n"


def completion_to_prompt(completion: str) -> str:
    return f"<|im_start|>user\n{completion}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def llm(smollm2_model_path: Path) -> Any:
    model = LlamaCPP(
        model_path=str(smollm2_model_path),
        temperature=0,
        max_new_tokens=MAX_NEW_TOKENS,
        context_window=1024,
        generate_kwargs={},
        model_kwargs={},
        messages_to_prompt=messages_to_prompt,
        completion_to_prompt=completion_to_prompt,
        verbose=False,
    )
    yield model
    model._model.close()


@pytest.fixture(scope="module")
def reference(smollm2_model_path: Path) -> Any:
    with Llama(str(smollm2_model_path), n_ctx=1024, verbose=False) as model:
        yield model


def _reference_text(reference: Llama, prompt: str) -> str:
    return reference.create_completion(prompt, temperature=0, max_tokens=MAX_NEW_TOKENS)["choices"][0]["text"]


def test_the_pin_is_met_by_this_distribution() -> None:
    (pin,) = [
        Requirement(r) for r in importlib.metadata.requires("llama-index-llms-llama-cpp") or []
        if Requirement(r).name == "llama-cpp-python"
    ]
    ours = importlib.metadata.distribution("llama-cpp-python")
    assert pin.specifier.contains(ours.version), f"{pin} is not met by llama-cpp-python {ours.version}"
    # the llama-cpp-python installed is this project's umbrella (core + native + plugins, no module of its
    # own), not the reference (whose wheel holds llama_cpp/ itself)
    requires = {Requirement(r).name for r in ours.requires or []}
    assert {"llama-cpp-core", "llama-cpp-native"} <= requires
    assert not [f for f in ours.files or [] if str(f).startswith("llama_cpp/")]
    assert importlib.metadata.version("llama-cpp-core") == ours.version
    assert importlib.util.find_spec("llama_cpp.testing") is not None  # the reference has no llama_cpp.testing


def test_the_model_is_our_llama(llm: Any) -> None:
    assert isinstance(llm._model, Llama)
    assert llm.context_window == 1024
    assert llm.metadata.context_window == 1024
    assert llm.metadata.num_output == MAX_NEW_TOKENS


def test_complete(llm: Any, reference: Llama) -> None:
    response = llm.complete(QUESTION)
    assert "Tokyo" in response.text
    assert response.text == _reference_text(reference, completion_to_prompt(QUESTION))
    assert response.raw["choices"][0]["text"] == response.text
    assert 0 < response.raw["usage"]["completion_tokens"] <= MAX_NEW_TOKENS


def test_stream_complete(llm: Any) -> None:
    whole = llm.complete(QUESTION).text
    responses = list(llm.stream_complete(QUESTION))
    assert len(responses) > 1
    assert "".join(r.delta for r in responses) == whole
    assert responses[-1].text == whole


def test_chat(llm: Any, reference: Llama) -> None:
    messages = [
        ChatMessage(role=MessageRole.SYSTEM, content="You are a helpful assistant."),
        ChatMessage(role=MessageRole.USER, content=QUESTION),
    ]
    response = llm.chat(messages)
    assert response.message.role == MessageRole.ASSISTANT
    assert "Tokyo" in response.message.content
    assert response.message.content == _reference_text(reference, messages_to_prompt(messages))
    streamed = list(llm.stream_chat(messages))
    assert streamed[-1].message.content == response.message.content
