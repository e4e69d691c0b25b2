"""LangChain's ``LlamaCpp`` (langchain-community) works unchanged on our ``Llama``.

``langchain_community.llms.LlamaCpp`` imports ``Llama`` and ``LlamaGrammar``
from ``llama_cpp``, constructs ``Llama(model_path, **model_params)`` with the
keywords below (its own defaults, several of them legacy), and generates with
``client(prompt=..., [stream=True,] suffix=None, max_tokens=256,
temperature=0.8, top_p=0.95, logprobs=None, echo=False, repeat_penalty=1.1,
top_k=40, stop=[])``.  ``invoke`` goes through the streaming path by default
(``streaming=True``); ``get_num_tokens`` is ``len(client.tokenize(text.encode()))``.

The greedy reference is our own ``Llama`` built with the same constructor
keywords and called with the same sampling keywords: LangChain's
``repeat_penalty=1.1`` and ``rope_freq_base=10000.0`` change greedy output
compared with our defaults, so a reference with different settings would not
be the same computation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llama_cpp import Llama

llms = pytest.importorskip("langchain_community.llms", reason="langchain-community is not installed")
LlamaCpp = llms.LlamaCpp

PROMPT = "The capital of France is"

# The keywords LlamaCpp.validate_environment passes to Llama(model_path, ...)
# (langchain_community/llms/llamacpp.py); n_gpu_layers only when not None.
LANGCHAIN_MODEL_PARAMS = [
    "rope_freq_scale", "rope_freq_base", "lora_path", "lora_base", "n_ctx", "n_parts", "seed", "f16_kv",
    "logits_all", "vocab_only", "use_mlock", "n_threads", "n_batch", "use_mmap", "last_n_tokens_size", "verbose",
]


def _same_llama(llm: Any, model_path: Path) -> Llama:
    """Our Llama constructed exactly as LlamaCpp constructed its client."""
    kwargs = {name: getattr(llm, name) for name in LANGCHAIN_MODEL_PARAMS}
    if llm.n_gpu_layers is not None:
        kwargs["n_gpu_layers"] = llm.n_gpu_layers
    kwargs.update(llm.model_kwargs)
    return Llama(str(model_path), **kwargs)


def _reference_text(ref: Llama, llm: Any, prompt: str, stop: list[str] | None = None) -> str:
    """What LlamaCpp should return: create_completion with the sampling settings it sends."""
    out = ref.create_completion(
        prompt, max_tokens=llm.max_tokens, temperature=llm.temperature, top_p=llm.top_p, top_k=llm.top_k,
        repeat_penalty=llm.repeat_penalty, echo=llm.echo, stop=stop or [],
    )
    return out["choices"][0]["text"]


@pytest.fixture(scope="module")
def default_llm(smollm2_model_path: Path) -> Any:
    llm = LlamaCpp(model_path=str(smollm2_model_path))
    yield llm
    llm.client.close()


@pytest.fixture(scope="module")
def greedy_llm(smollm2_model_path: Path) -> Any:
    llm = LlamaCpp(model_path=str(smollm2_model_path), temperature=0)
    yield llm
    llm.client.close()


@pytest.fixture(scope="module")
def greedy_reference(greedy_llm: Any, smollm2_model_path: Path) -> Llama:
    ref = _same_llama(greedy_llm, smollm2_model_path)
    yield ref
    ref.close()


def test_construct_with_defaults(default_llm: Any) -> None:
    assert isinstance(default_llm.client, Llama)
    assert default_llm.client.n_ctx() == default_llm.n_ctx == 512
    assert default_llm.client.context_params.n_batch == default_llm.n_batch == 8


def test_invoke_with_defaults(default_llm: Any) -> None:
    text = default_llm.invoke(PROMPT)
    assert isinstance(text, str)
    assert text.strip()


def test_stream_with_defaults(default_llm: Any) -> None:
    chunks = list(default_llm.stream(PROMPT))
    assert chunks
    assert all(isinstance(c, str) for c in chunks)
    assert "".join(chunks).strip()


def test_greedy_invoke_equals_create_completion(greedy_llm: Any, greedy_reference: Llama) -> None:
    expected = _reference_text(greedy_reference, greedy_llm, PROMPT)
    assert expected.strip()
    assert greedy_llm.invoke(PROMPT) == expected


def test_greedy_stream_equals_invoke(greedy_llm: Any, greedy_reference: Llama) -> None:
    expected = _reference_text(greedy_reference, greedy_llm, PROMPT)
    chunks = list(greedy_llm.stream(PROMPT))
    assert len(chunks) > 1, "stream() should yield the text as it is generated, not in one piece"
    assert "".join(chunks) == expected
    assert greedy_llm.invoke(PROMPT) == "".join(chunks)


def test_greedy_invoke_without_streaming(greedy_llm: Any, greedy_reference: Llama) -> None:
    """streaming=False: LlamaCpp calls client(prompt=..., **params) and reads choices[0].text."""
    expected = _reference_text(greedy_reference, greedy_llm, PROMPT)
    greedy_llm.streaming = False
    try:
        assert greedy_llm.invoke(PROMPT) == expected
    finally:
        greedy_llm.streaming = True


def test_greedy_invoke_with_stop(greedy_llm: Any, greedy_reference: Llama) -> None:
    expected = _reference_text(greedy_reference, greedy_llm, PROMPT, stop=["\n"])
    assert "\n" not in expected
    assert greedy_llm.invoke(PROMPT, stop=["\n"]) == expected
    assert "".join(greedy_llm.stream(PROMPT, stop=["\n"])) == expected


def test_get_num_tokens(greedy_llm: Any, greedy_reference: Llama) -> None:
    for text in [PROMPT, "", "naïve café, 東京 🙂"]:
        n = greedy_llm.get_num_tokens(text)
        assert n == len(greedy_reference.tokenize(text.encode("utf-8")))
    assert greedy_llm.get_num_tokens(PROMPT) > greedy_llm.get_num_tokens("")
