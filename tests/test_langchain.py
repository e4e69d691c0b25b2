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
from typing import Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from llama_cpp import Llama

from langchain_community.chat_models import ChatLlamaCpp
from langchain_community.llms import LlamaCpp
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

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


# ChatLlamaCpp (langchain_community.chat_models.llamacpp) constructs Llama the same way and calls
# client.create_chat_completion(messages=[OpenAI-style dicts], max_tokens=..., temperature=..., top_p=...,
# top_k=..., logprobs=None, stop=[], repeat_penalty=..., [tools=..., tool_choice=...]); a request with
# tool_choice is not streamed, any other is (stream=True). Its docs' tool example: a pydantic args_schema,
# bind_tools(..., tool_choice={"type": "function", "function": {"name": ...}}) since it supports no "auto",
# the AIMessage's tool_calls run the tool, and the ToolMessage goes back for the answer. (The docs write
# the unit as Field(enum=[...]), which pydantic 2 leaves out of the schema; Literal keeps it in.)


class WeatherInput(BaseModel):
    location: str = Field(description="The city and state, e.g. San Francisco, CA")
    unit: Literal["celsius", "fahrenheit"]


_weather_calls: list[dict[str, Any]] = []


@tool("get_current_weather", args_schema=WeatherInput)
def get_weather(location: str, unit: str) -> str:
    """Get the current weather in a given location"""
    _weather_calls.append({"location": location, "unit": unit})
    return f"Now the weather in {location} is 22 {unit}"


class _Recorder:
    """Wraps client.create_chat_completion to keep what ChatLlamaCpp sends."""

    def __init__(self, llama: Llama) -> None:
        self.create = llama.create_chat_completion
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.create(**kwargs)


@pytest.fixture(scope="module")
def chat_llm(smollm2_model_path: Path) -> Any:
    llm = ChatLlamaCpp(model_path=str(smollm2_model_path), temperature=0, n_ctx=2048, n_batch=256, max_tokens=64,
                       verbose=False)
    yield llm
    llm.client.close()


def test_chat_invoke_and_stream(chat_llm: Any) -> None:
    answer = chat_llm.invoke([HumanMessage("What is the capital of Japan?")])
    assert isinstance(answer, AIMessage)
    assert "Tokyo" in answer.content
    expected = chat_llm.client.create_chat_completion(
        messages=[{"role": "user", "content": "What is the capital of Japan?"}], max_tokens=64, temperature=0,
        top_p=chat_llm.top_p, top_k=chat_llm.top_k, repeat_penalty=chat_llm.repeat_penalty,
    )["choices"][0]["message"]["content"]
    assert answer.content == expected
    chunks = list(chat_llm.stream("What is the capital of Japan?"))
    assert len(chunks) > 1
    assert "".join(c.content for c in chunks) == expected


def test_chat_tool_loop_of_two_turns(chat_llm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _Recorder(chat_llm.client)
    monkeypatch.setattr(chat_llm.client, "create_chat_completion", recorder)
    _weather_calls.clear()
    llm_with_tools = chat_llm.bind_tools(
        tools=[get_weather], tool_choice={"type": "function", "function": {"name": "get_current_weather"}},
    )
    messages: list[Any] = [HumanMessage("what is the weather like in HCMC in celsius")]

    # turn 1: the model calls the tool, with arguments that follow the tool's schema
    ai_msg = llm_with_tools.invoke(messages)
    assert isinstance(ai_msg, AIMessage)
    assert ai_msg.response_metadata["finish_reason"] == "tool_calls"
    assert ai_msg.invalid_tool_calls == []
    (tool_call,) = ai_msg.tool_calls
    assert tool_call["name"] == "get_current_weather"
    jsonschema.validate(tool_call["args"], convert_to_openai_tool(get_weather)["function"]["parameters"])
    args = WeatherInput.model_validate(tool_call["args"])
    assert args.unit == "celsius"
    # which city a 135M model writes is a near-tie on a quantized model: it read "HCMC" on one machine and
    # "Hamburger" on another from the same greedy request; what holds regardless is a non-empty location
    assert args.location.strip()
    sent = recorder.calls[0]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_current_weather"}}
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_current_weather"]

    # the tool runs on those arguments; its ToolMessage goes back with the AIMessage that asked for it
    messages.append(ai_msg)
    tool_msg = get_weather.invoke(tool_call)
    assert isinstance(tool_msg, ToolMessage)
    assert _weather_calls == [{"location": args.location, "unit": "celsius"}]
    messages.append(tool_msg)

    # turn 2: an answer, not another call
    final = chat_llm.invoke(messages)
    assert isinstance(final, AIMessage)
    assert final.tool_calls == []
    assert final.content.strip()
    assert len(_weather_calls) == 1
    sent = recorder.calls[1]
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool"]
    assert sent["messages"][1]["tool_calls"][0]["id"] == tool_call["id"]
    assert sent["messages"][2] == {"role": "tool", "content": tool_msg.content, "tool_call_id": tool_call["id"]}
