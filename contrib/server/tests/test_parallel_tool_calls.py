"""``parallel_tool_calls`` on the chat route, through OpenAI's client: a required reply on a model with Qwen3's
template may make several calls, linked as the template links them, unless the field is false.  The tiny
random model ends after its first call when it may, so its end-of-generation token is pushed down (a bias
of -100, not a ban): after a call the grammar then prefers another call where it allows one, and ends the
reply where it does not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from serving import running, tiny_settings

from llama_cpp import Llama

# an enum alone: each call is short, whatever the random model would write in a free value
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["unit"],
    "additionalProperties": False}}}]


@pytest.fixture(scope="module")
def client(reasoning_model_path: Path) -> Iterator[openai.OpenAI]:
    with running(tiny_settings(reasoning_model_path)) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def eos(reasoning_model_path: Path) -> int:
    with Llama(str(reasoning_model_path), vocab_only=True, verbose=False) as vocab:
        return vocab.token_eos()


def required(client: openai.OpenAI, eos: int, **kwargs: Any) -> Any:
    return client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS, tool_choice="required",
        temperature=0, max_tokens=160, logit_bias={str(eos): -100}, extra_body={"reasoning_format": "none"},
        **kwargs)


def test_a_required_reply_makes_several_calls_unless_parallel_tool_calls_is_false(client: openai.OpenAI,
                                                                                  eos: int) -> None:
    (several,) = required(client, eos).choices
    assert len(several.message.tool_calls) >= 2
    assert several.finish_reason == "length"  # calling on until max_tokens, a last call cut short
    assert all(json.loads(c.function.arguments)["unit"] in ("celsius", "fahrenheit")
               for c in several.message.tool_calls)
    (one,) = required(client, eos, parallel_tool_calls=False).choices
    assert one.finish_reason == "tool_calls"
    assert [c.function for c in one.message.tool_calls] == [several.message.tool_calls[0].function]
    # the calls in tool_calls only, as OpenAI's API and llama-server answer (Llama's dict adds the seed's
    # legacy function_call beside a single call; a client sending it back with both is refused by OpenAI)
    assert one.message.function_call is None and several.message.function_call is None
    streamed: dict[int, str] = {}
    for chunk in required(client, eos, stream=True):
        for call in chunk.choices[0].delta.tool_calls or []:
            streamed[call.index] = streamed.get(call.index, "") + (call.function.arguments or "")
    assert [json.loads(streamed[i]) for i in sorted(streamed)] == [json.loads(c.function.arguments)
                                                                  for c in several.message.tool_calls]


def test_a_legacy_functions_request_gets_its_function_call(client: openai.OpenAI) -> None:
    (choice,) = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Weather?"}], functions=[TOOLS[0]["function"]],
        function_call={"name": "get_weather"}, temperature=0, max_tokens=160,
        extra_body={"reasoning_format": "none"}).choices
    assert choice.message.function_call.name == "get_weather"
    assert json.loads(choice.message.function_call.arguments)["unit"] in ("celsius", "fahrenheit")
