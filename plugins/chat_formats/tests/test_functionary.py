"""The functionary handlers: their prompts, reading their replies, forced and streamed calls."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from llama_cpp import Llama, LlamaGrammar
from llama_cpp_chat_formats.functionary import DIALECTS, SYSTEM_PROMPT, _turns, dialect_for
from llama_cpp_chat_formats.typescript_schema import functions_namespace

WEATHER = {"name": "get_weather", "description": "Get the weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                     "unit": {"enum": ["c", "f"]}},
    "required": ["city"]}}
TIME = {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                                           "required": ["zone"]}}
TOOLS = [{"type": "function", "function": WEATHER}, {"type": "function", "function": TIME}]
NAMESPACE = """// Supported function definitions that should be called when necessary.
namespace functions {

// Get the weather
type get_weather = (_: {
// City name
city: string,
unit?: "c" | "f",
}) => any;

type get_time = (_: {
zone: string,
}) => any;

} // namespace functions"""

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "18C"},
    {"role": "user", "content": "Thanks"},
]

EXPECTED = {
    "functionary": (
        f"system:\n{NAMESPACE}\nsystem:\n{SYSTEM_PROMPT}\nsystem:\nBe brief.\nuser:\n</s>Weather in Paris?</s>\n"
        'assistant to=functions.get_weather:\n{"city": "Paris"}</s>\nfunction name=functions.get_weather:\n18C\n'
        "user:\n</s>Thanks</s>\nassistant"),
    "functionary-v1": (
        f"system:\n{NAMESPACE}<|END_OF_SYSTEM|>\nsystem:\n{SYSTEM_PROMPT}<|END_OF_SYSTEM|>\n"
        "system:\nBe brief.<|END_OF_SYSTEM|>\nuser:\nWeather in Paris?<|END_OF_USER|>\n"
        'assistant:\n<|START_OF_FUNCTION_CALL|>get_weather:\n{"city": "Paris"}<|END_OF_FUNCTION_CALL|>\n'
        "function name=get_weather:\n18C<|END_OF_FUNCTION_RESULT|>\nuser:\nThanks<|END_OF_USER|>\nassistant:\n"),
    "functionary-v2": (
        f"<|from|>system\n<|recipient|>all\n<|content|>{NAMESPACE}\n"
        f"<|from|>system\n<|recipient|>all\n<|content|>{SYSTEM_PROMPT}\n"
        "<|from|>system\n<|recipient|>all\n<|content|>Be brief.\n"
        "<|from|>user\n<|recipient|>all\n<|content|>Weather in Paris?\n"
        '<|from|>assistant\n<|recipient|>get_weather\n<|content|>{"city": "Paris"}<|stop|>\n'
        "<|from|>get_weather\n<|recipient|>all\n<|content|>18C\n"
        "<|from|>user\n<|recipient|>all\n<|content|>Thanks\n"
        "<|from|>assistant\n<|recipient|>"),
}


def test_functions_are_described_as_a_typescript_namespace() -> None:
    assert functions_namespace([WEATHER, TIME]) == NAMESPACE
    params = {"type": "object", "required": ["tags"],
              "properties": {"tags": {"type": "array", "items": {"type": "string"}},
                             "where": {"$ref": "#/$defs/Place"},
                             "opts": {"type": "object", "properties": {
                                 "n": {"type": "integer", "default": 3, "description": "how many"}}},
                             "mode": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
              "$defs": {"Place": {"type": "object", "required": ["lat", "lon"],
                                  "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}}}}
    assert functions_namespace([{"name": "search", "description": "Search things", "parameters": params},
                                {"name": "ping"}]) == """// Supported function definitions that should be called when necessary.
namespace functions {

type Place = {
  lat: number,
  lon: number,
};

// Search things
type search = (_: {
tags: string[],
where?: Place,
opts?: {
  // how many
  // default: 3
  n?: number,
},
mode?: string | null,
}) => any;

type ping = () => any;

} // namespace functions"""


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_generation_renders_its_prompt(name: str) -> None:
    functions = [WEATHER, TIME]
    assert DIALECTS[name].render(_turns(CONVERSATION), functions) == EXPECTED[name]


RECORDED = {  # replies as each generation writes them, from the end of the prompt
    "functionary": [(":\nIt is sunny.", "It is sunny.", []),
                    (' to=functions.get_weather:\n{"city": "Oslo"}', "", [("get_weather", {"city": "Oslo"})])],
    "functionary-v1": [("It is sunny.", "It is sunny.", []),
                       ('Let me check.\n<|START_OF_FUNCTION_CALL|>get_time:\n{"zone": "CET"}', "Let me check.",
                        [("get_time", {"zone": "CET"})])],
    "functionary-v2": [("all\n<|content|>It is sunny.", "It is sunny.", []),
                       ('all\n<|content|>Checking both.\n<|from|>assistant\n<|recipient|>get_weather\n<|content|>'
                        '{"city": "Oslo"}\n<|from|>assistant\n<|recipient|>get_time\n<|content|>{"zone": "CET"}',
                        "Checking both.", [("get_weather", {"city": "Oslo"}), ("get_time", {"zone": "CET"})]),
                       ('not_offered\n<|content|>{"a": 1}', 'not_offered\n<|content|>{"a": 1}', [])],
}


@pytest.mark.parametrize("name", list(RECORDED))
def test_auto_replies_of_each_generation_are_parsed(name: str) -> None:
    for text, content, calls in RECORDED[name]:
        got_content, got_calls = DIALECTS[name].parse(text, ["get_weather", "get_time"])
        assert got_content == content
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got_calls] == calls


def test_the_vocabulary_decides_between_v1_and_v2() -> None:
    class Vocab:
        def __init__(self, special: str) -> None:
            self.special = special

        def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
            return [1] if text.decode() == self.special else list(text)

    assert dialect_for(Vocab("<|recipient|>"), "functionary-v1").name == "functionary-v2"
    assert dialect_for(Vocab("<|START_OF_FUNCTION_CALL|>"), "functionary-v2").name == "functionary-v1"
    assert dialect_for(Vocab("none"), "functionary-v1").name == "functionary-v1"
    assert dialect_for(Vocab("<|recipient|>"), "functionary").name == "functionary"


@pytest.fixture(scope="module")
def smol(smollm2_model_path: Path):
    with Llama(str(smollm2_model_path), n_ctx=2048, n_threads=2, verbose=False) as llm:
        yield llm


MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.mark.parametrize("name", list(DIALECTS))
def test_forced_calls_follow_the_schema_streamed_and_not(smol: Llama, name: str) -> None:
    smol.chat_format = name
    try:
        named = {"type": "function", "function": {"name": "get_weather"}}
        out = smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice=named, temperature=0.0)
        choice = out["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        call = choice["message"]["tool_calls"][0]["function"]
        assert call["name"] == "get_weather" and choice["message"]["function_call"] == call
        jsonschema.validate(json.loads(call["arguments"]), WEATHER["parameters"])

        chunks = list(smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice=named, temperature=0.0,
                                                  stream=True))
        deltas = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
                  if "tool_calls" in c["choices"][0]["delta"]]
        assert deltas[0]["function"]["name"] == "get_weather" and len(deltas) > 2
        assert "".join(d["function"]["arguments"] for d in deltas) == call["arguments"]
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

        required = smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice="required", temperature=0.0)
        call = required["choices"][0]["message"]["tool_calls"][0]["function"]
        schema = {"get_weather": WEATHER, "get_time": TIME}[call["name"]]["parameters"]
        jsonschema.validate(json.loads(call["arguments"]), schema)
    finally:
        smol.chat_format = None


def test_auto_and_none_on_a_real_model(smol: Llama) -> None:
    smol.chat_format = "functionary-v2"
    try:
        # drive the reply into a v2 call with a grammar: "auto" must read it back as a tool call
        grammar = LlamaGrammar.from_string('root ::= "get_time\\n<|content|>{\\"zone\\": \\"" [A-Z]{3} "\\"}"')
        out = smol.create_chat_completion(MESSAGES, tools=TOOLS, grammar=grammar, temperature=0.0)
        assert out["choices"][0]["finish_reason"] == "tool_calls"
        call = out["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == "get_time" and len(json.loads(call["arguments"])["zone"]) == 3
        chunks = list(smol.create_chat_completion(MESSAGES, tools=TOOLS, grammar=grammar, temperature=0.0,
                                                  stream=True))
        streamed = [c["choices"][0]["delta"]["tool_calls"][0]["function"] for c in chunks
                    if "tool_calls" in c["choices"][0]["delta"]]
        assert [(f["name"], f["arguments"]) for f in streamed] == [(call["name"], call["arguments"])]
        text = LlamaGrammar.from_string('root ::= "all\n<|content|>It is " [a-z]+ " today."')
        chunks = list(smol.create_chat_completion(MESSAGES, tools=TOOLS, grammar=text, temperature=0.0,
                                                  stream=True))
        texts = [c["choices"][0]["delta"]["content"] for c in chunks if c["choices"][0]["delta"].get("content")]
        assert len(texts) > 2 and "".join(texts).startswith("It is ") and "".join(texts).endswith(" today.")

        plain = smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice="none", max_tokens=8,
                                            temperature=0.0)
        assert plain["choices"][0]["message"]["content"] and "tool_calls" not in plain["choices"][0]["message"]
        usage = plain["usage"]["prompt_tokens"]
        prompt = DIALECTS["functionary-v2"].render(_turns(MESSAGES), []) + "all\n<|content|>"
        assert usage == len(smol.tokenize(prompt.encode(), special=True))  # no functions listed for "none"
    finally:
        smol.chat_format = None


def _pieces(text: str, size: int = 3):
    """A reply as the chunks create_completion streams (a few characters each)."""
    parts = [text[i:i + size] for i in range(0, len(text), size)] or [""]
    for i, part in enumerate(parts):
        yield {"id": "cmpl-1", "created": 0, "model": "m", "choices": [
            {"text": part, "index": 0, "logprobs": None, "finish_reason": "stop" if i == len(parts) - 1 else None}]}


@pytest.mark.parametrize("name", list(RECORDED))
def test_auto_replies_stream_text_as_it_comes_and_calls_at_the_end(name: str) -> None:
    from llama_cpp_chat_formats.streaming import stream_auto_reply

    dialect = DIALECTS[name]
    for text, content, calls in RECORDED[name]:
        chunks = list(stream_auto_reply(_pieces(text), lambda t: dialect.parse(t, ["get_weather", "get_time"]),
                                        dialect.streaming_syntax()))
        deltas = [c["choices"][0]["delta"] for c in chunks]
        texts = [d["content"] for d in deltas if d.get("content")]
        assert "".join(texts).strip() == content
        if content and not calls and text.startswith(dialect.text_opening):  # a text answer
            assert len(texts) > 1  # streamed in pieces, not at the end
            assert not any(marker in "".join(texts) for marker in ("<|", "to=functions"))
        got = [(d["tool_calls"][0]["function"]["name"], json.loads(d["tool_calls"][0]["function"]["arguments"]))
               for d in deltas if "tool_calls" in d]
        assert got == calls
        assert chunks[-1]["choices"][0]["finish_reason"] == ("tool_calls" if calls else "stop")
