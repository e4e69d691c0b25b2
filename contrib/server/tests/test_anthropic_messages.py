"""Anthropic's Messages API: the anthropic SDK as its documentation uses it, the raw event stream, the error
shape, and llama-server's ``/v1/messages`` as the oracle of the greedy text.

The tiny random model writes gibberish, so the tests check shapes, counts and what greedy decoding fixes (the same
text streamed and not, equal to llama-server's); a forced tool call is checked against its schema.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import pytest
from llama_cpp_server.bridge import EngineFacts
from llama_cpp_server.anthropic_messages import CountTokensRequest, MessageStream, MessagesRequest, chat_request
from serving import llama_server, running, tiny_settings

WEATHER_SCHEMA = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]},
                                                   "days": {"type": "integer"}, "hourly": {"type": "boolean"}},
                  "required": ["unit", "days", "hourly"], "additionalProperties": False}
TOOLS = [{"name": "get_weather", "description": "The weather forecast", "input_schema": WEATHER_SCHEMA}]
ASK = [{"role": "user", "content": "Name three rivers."}]


@pytest.fixture(scope="module")
def both(chat_model_path: Path) -> Iterator[tuple[str, str]]:
    """Ours and llama-server on the tiny chat model, one sequence each (a second request reuses the first's
    prefix)."""
    with running(tiny_settings(chat_model_path, n_seq_max=1, api_key="secret")) as ours, \
            llama_server(chat_model_path, "-c", "2048", "-np", "1", "--alias", "tiny") as theirs:
        yield ours, theirs


@pytest.fixture(scope="module")
def client(both: tuple[str, str]) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=both[0], api_key="secret", max_retries=0)


# greedy: the SDK has no sampling arguments any more (Anthropic's newer models take none), so the field goes as
# the SDK's documentation says to send one it does not type
GREEDY = {"temperature": 0}


def create(client: anthropic.Anthropic, **kwargs: Any) -> Any:
    return client.messages.create(**{"model": "tiny", "max_tokens": 12, "messages": ASK, "extra_body": GREEDY,
                                     **kwargs})


def raw_events(base: str, body: dict[str, Any], key: str | None = "secret") -> list[tuple[str, dict[str, Any]]]:
    """The stream's ``(event name, data)`` pairs, as they come on the wire."""
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"} if key else {}
    with httpx.stream("POST", f"{base}/v1/messages", json={**body, "stream": True}, headers=headers,
                      timeout=60) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        raw = reply.read().decode()
    events = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_a_message_and_its_stream_are_the_same_message(client: anthropic.Anthropic) -> None:
    whole = create(client)
    assert whole.type == "message" and whole.role == "assistant" and whole.model == "tiny"
    assert whole.id.startswith("msg_") and whole.stop_reason == "max_tokens" and whole.stop_sequence is None
    (block,) = whole.content
    assert block.type == "text" and block.text
    assert whole.usage.output_tokens == 12
    assert whole.usage.input_tokens + whole.usage.cache_read_input_tokens > 0
    with client.messages.stream(model="tiny", max_tokens=12, messages=ASK, extra_body=GREEDY) as streamed:
        texts = list(streamed.text_stream)
        final = streamed.get_final_message()
    assert "".join(texts) == block.text
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]
    assert (final.stop_reason, final.usage.output_tokens) == ("max_tokens", 12)


def test_count_tokens_is_the_prompts_token_count(client: anthropic.Anthropic, both: tuple[str, str]) -> None:
    system = "You answer in one word."
    counted = client.messages.count_tokens(model="tiny", messages=ASK, system=system)
    chat = httpx.post(f"{both[0]}/v1/chat/completions/input_tokens", headers={"x-api-key": "secret"},
                      json={"messages": [{"role": "system", "content": system}, *ASK]}, timeout=30).json()
    assert counted.input_tokens == chat["input_tokens"] > 0
    used = create(client, system=system).usage
    assert used.input_tokens + used.cache_read_input_tokens == counted.input_tokens


def test_a_repeated_prefix_is_read_from_memory(client: anthropic.Anthropic) -> None:
    conversation = [{"role": "user", "content": "Tell me about the history of the river Thames in London."}]
    create(client, messages=conversation, max_tokens=2)
    again = create(client, messages=conversation, max_tokens=2).usage
    assert again.cache_read_input_tokens > 0 and again.cache_creation_input_tokens == 0


def test_a_stop_sequence_ends_the_message_before_it(client: anthropic.Anthropic) -> None:
    text = create(client, max_tokens=24).content[0].text
    stop = text[len(text) // 2:len(text) // 2 + 3]
    whole = create(client, max_tokens=24, stop_sequences=[stop])
    assert (whole.stop_reason, whole.stop_sequence) == ("stop_sequence", stop)
    assert whole.content[0].text == text[:text.index(stop)]
    events = raw_events(client.base_url.__str__().rstrip("/"), {"model": "tiny", "max_tokens": 24, "messages": ASK,
                                                                "temperature": 0, "stop_sequences": [stop]})
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop}


def test_a_tool_loop_of_two_turns(client: anthropic.Anthropic) -> None:
    first = create(client, max_tokens=200, tools=TOOLS, tool_choice={"type": "tool", "name": "get_weather"})
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.id
    jsonschema.validate(use.input, WEATHER_SCHEMA)
    with client.messages.stream(model="tiny", max_tokens=200, messages=ASK, extra_body=GREEDY, tools=TOOLS,
                                tool_choice={"type": "tool", "name": "get_weather"}) as streamed:
        final = streamed.get_final_message()
    (streamed_use,) = [b for b in final.content if b.type == "tool_use"]
    assert (streamed_use.name, streamed_use.input) == (use.name, use.input)  # input_json_delta joined by the SDK
    turn = [*ASK, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "12 degrees"}]}]
    second = create(client, messages=turn, tools=TOOLS, tool_choice={"type": "none"})
    assert second.stop_reason in ("end_turn", "max_tokens") and second.content[0].type == "text"


def test_the_event_stream_in_anthropics_order(both: tuple[str, str]) -> None:
    events = raw_events(both[0], {"model": "tiny", "max_tokens": 6, "messages": ASK, "temperature": 0})
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["output_tokens"] == 0
    assert events[-2][1]["usage"]["output_tokens"] == 6 and events[-2][1]["delta"]["stop_reason"] == "max_tokens"


def test_greedy_text_and_events_equal_llama_servers(both: tuple[str, str]) -> None:
    body = {"model": "tiny", "max_tokens": 16, "temperature": 0, "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Name three rivers."}]}]}
    headers = {"x-api-key": "secret"}
    ours, theirs = (httpx.post(f"{base}/v1/messages", json=body, headers=headers, timeout=60).json() for base in both)
    assert ours["content"] == theirs["content"]
    assert (ours["type"], ours["role"], ours["stop_reason"]) == (theirs["type"], theirs["role"], theirs["stop_reason"])
    assert set(theirs["usage"]) <= set(ours["usage"])
    mine, its = (raw_events(base, body) for base in both)
    assert [name for name, _ in mine if name != "ping"] == [name for name, _ in its]  # Anthropic's ping, theirs none
    assert [d for n, d in mine if n == "content_block_delta"] == [d for n, d in its if n == "content_block_delta"]


def test_errors_in_anthropics_shape(both: tuple[str, str], client: anthropic.Anthropic) -> None:
    base = both[0]
    headers = {"x-api-key": "secret"}
    cases = [({"model": "tiny", "messages": ASK}, "max_tokens"),
             ({"model": "tiny", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
              "messages[0].content"),
             ({"model": "tiny", "max_tokens": 5, "messages": ASK,
               "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
             ({"model": "tiny", "max_tokens": 5, "messages": ASK, "tool_choice": {"type": "tool"}},
              "tool_choice.name"),
             ({"model": "tiny", "max_tokens": 5, "messages": []}, "messages"),
             # a turn with no blocks leaves the chat route no message: its refusal, named, not pydantic's dump
             ({"model": "tiny", "max_tokens": 5, "messages": [{"role": "user", "content": []}]}, "messages: ")]
    for body, field in cases:
        reply = httpx.post(f"{base}/v1/messages", json=body, headers=headers, timeout=30)
        assert reply.status_code == 400, (body, reply.text)
        error = reply.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        assert error["error"]["message"].startswith(field), (field, error)
    wrong = httpx.post(f"{base}/v1/messages", json=cases[0][0], headers={"x-api-key": "nope"}, timeout=30)
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=base, api_key="nope", max_retries=0).messages.create(
            model="tiny", max_tokens=5, messages=ASK)
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        create(client, max_tokens=0)


def test_blocks_become_the_chat_routes_messages() -> None:
    body = MessagesRequest.model_validate({
        "max_tokens": 5, "system": [{"type": "text", "text": "A. "}, {"type": "text", "text": "B."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "look"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": "iVBO"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": ""},
                                              {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
                                         {"type": "text", "text": "and?"}]}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"},
        "thinking": {"type": "enabled", "budget_tokens": 64}, "metadata": {"user_id": "u1"}})
    chat = chat_request(body, max_tokens=5)
    assert chat.messages == [
        {"role": "system", "content": "A. B."},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
        {"role": "assistant", "content": "", "reasoning_content": "hm",
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "onetwo"},  # the results answer the calls first
        {"role": "user", "content": [{"type": "text", "text": "and?"}]}]
    assert chat.tools == [{"type": "function", "function": {"name": "f", "description": "",
                                                            "parameters": {"type": "object"}}}]
    assert chat.tool_choice == "required" and chat.reasoning_budget == 64
    assert chat.chat_template_kwargs == {"enable_thinking": True}
    off = chat_request(CountTokensRequest.model_validate({"messages": ASK, "thinking": {"type": "disabled"},
                                                          "tool_choice": {"type": "tool", "name": "f"}}))
    assert off.reasoning_effort == "none" and off.tool_choice == {"type": "function", "function": {"name": "f"}}


def test_a_thinking_stream_opens_a_block_per_kind_and_signs_the_thinking() -> None:
    stream = MessageStream("m", lambda: EngineFacts(10, 4, 2, None))
    chunks = [{"id": "chatcmpl-1", "choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]},
              {"id": "chatcmpl-1", "choices": [{"delta": {"reasoning_content": "hm"}, "finish_reason": None}]},
              {"id": "chatcmpl-1", "choices": [{"delta": {"content": "ok"}, "finish_reason": None}]},
              {"id": "chatcmpl-1", "choices": [{"delta": {"tool_calls": [
                  {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                  "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 10, "completion_tokens": 3}}]
    events = [event for chunk in chunks for event in stream.events(chunk)]
    assert [(name, data.get("index"), (data.get("delta") or data.get("content_block") or {}).get("type"))
            for name, data in events] == [
        ("message_start", None, None), ("ping", None, None),
        ("content_block_start", 0, "thinking"), ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "signature_delta"), ("content_block_stop", 0, None),
        ("content_block_start", 1, "text"), ("content_block_delta", 1, "text_delta"), ("content_block_stop", 1, None),
        ("content_block_start", 2, "tool_use"), ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None), ("message_delta", None, None), ("message_stop", None, None)]
    assert events[0][1]["message"]["id"] == "msg_1"
    assert events[0][1]["message"]["usage"]["input_tokens"] == 4
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert events[-2][1]["usage"] == {"input_tokens": 4, "cache_creation_input_tokens": 2,
                                      "cache_read_input_tokens": 4, "output_tokens": 3}


@pytest.fixture(scope="module")
def thinker(reasoning_model_path: Path) -> Iterator[anthropic.Anthropic]:
    with running(tiny_settings(reasoning_model_path, n_seq_max=1, n_ctx=1024)) as base:
        yield anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)


def forced(reply: str) -> dict[str, Any]:
    """A reply the grammar forces (the core's ``grammar``, a sampler field the route takes beside Anthropic's)."""
    return {**GREEDY, "grammar": "root ::= " + json.dumps(reply)}


def test_thinking_is_a_thinking_block_streamed_and_not(thinker: anthropic.Anthropic) -> None:
    asked = dict(model="tiny", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                 thinking={"type": "enabled", "budget_tokens": 1024}, extra_body=forced("<think>abc</think>answer"))
    whole = thinker.messages.create(**asked)  # type: ignore[call-overload]
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in whole.content] == [
        ("thinking", "abc"), ("text", "answer")]
    assert whole.content[0].signature == "" and whole.stop_reason == "end_turn"
    with thinker.messages.stream(**asked) as stream:  # type: ignore[arg-type]
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]
    assert deltas[0] == "thinking_delta" and deltas[-1] == "text_delta" and "signature_delta" in deltas


def test_a_tool_use_after_the_thinking(thinker: anthropic.Anthropic) -> None:
    reply = '<think>abc</think><tool_call>\n{"name": "get_weather", "arguments": {"unit": "celsius"}}\n</tool_call>'
    whole = thinker.messages.create(model="tiny", max_tokens=96, messages=[{"role": "user", "content": "hi"}],
                                    tools=TOOLS, thinking={"type": "enabled", "budget_tokens": 1024},
                                    extra_body=forced(reply))
    assert [b.type for b in whole.content] == ["thinking", "tool_use"] and whole.stop_reason == "tool_use"
    assert whole.content[1].input == {"unit": "celsius"}


def test_an_image_block_is_the_chat_routes_image_part(tiny_mtmd_model: Any, tiny_png: Any) -> None:
    text, mmproj = tiny_mtmd_model("gemma3")
    data = base64.b64encode(tiny_png(64, 64).read_bytes()).decode()
    settings = tiny_settings(text, mmproj_path=str(mmproj), n_seq_max=1, n_ctx=4096)
    with running(settings) as base:
        client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
        seen = client.messages.create(model="tiny", max_tokens=8, extra_body=GREEDY, messages=[
            {"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}])
        chat = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
            "max_tokens": 8, "temperature": 0, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
                {"type": "text", "text": "What is this?"}]}]}).json()
        blind = client.messages.create(model="tiny", max_tokens=8, extra_body=GREEDY,
                                       messages=[{"role": "user", "content": "What is this?"}])
    assert seen.content[0].text == chat["choices"][0]["message"]["content"]
    assert seen.usage.input_tokens + seen.usage.cache_read_input_tokens == chat["usage"]["prompt_tokens"]
    assert chat["usage"]["prompt_tokens"] > blind.usage.input_tokens + blind.usage.cache_read_input_tokens


LONG_SYSTEM = "You answer questions about rivers, briefly and in plain words. " * 8


def test_a_cache_control_breakpoint_pins_its_prefix_for_the_next_request(chat_model_path: Path) -> None:
    """One sequence, so that a prefix can come back only from the prompt cache: the marked system prompt is
    written at the first request, survives two unrelated conversations, and is read at the next one (that it
    outlives entries that are not pinned is tests/test_cache_breakpoints.py's)."""
    with running(tiny_settings(chat_model_path, n_seq_max=1, cache=True)) as base:
        client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
        system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]

        def ask(question: str, **kwargs: Any) -> Any:
            return create(client, messages=[{"role": "user", "content": question}], max_tokens=2, **kwargs)

        first = ask("Name one river.", system=system).usage
        assert first.cache_creation_input_tokens > 0 and first.cache_read_input_tokens == 0
        for other in ("Write a haiku about snow.", "Count to three."):
            ask(other, system=f"Another system prompt for {other}")
        second = ask("Name another river.", system=system)
        counted = client.messages.count_tokens(model="tiny", system=system,
                                               messages=[{"role": "user", "content": "Name another river."}])
        usage = second.usage
        assert usage.cache_read_input_tokens >= first.cache_creation_input_tokens
        assert usage.cache_creation_input_tokens == 0
        # only the rest was evaluated: the question and the turn markers
        assert usage.input_tokens + usage.cache_read_input_tokens == counted.input_tokens
        assert usage.input_tokens < 20


def test_cache_control_marks_reach_the_chat_request() -> None:
    mark = {"type": "ephemeral"}
    body = MessagesRequest.model_validate({
        "max_tokens": 5, "cache_control": {"type": "ephemeral", "ttl": "1h"},
        "system": [{"type": "text", "text": "A. ", "cache_control": mark}, {"type": "text", "text": "B."}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": mark}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "look", "cache_control": mark},
                                         {"type": "image", "source": {"type": "url", "url": "http://x/y.png"},
                                          "cache_control": mark}]},
            {"role": "assistant", "content": "ok"}]})
    chat = chat_request(body, max_tokens=5)
    assert chat.messages == [
        {"role": "system", "content": "A. B.", "cache_control": mark},
        {"role": "user", "content": [{"type": "text", "text": "look", "cache_control": mark},
                                     {"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
         "cache_control": mark},
        {"role": "assistant", "content": "ok", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    assert chat.tools[0]["cache_control"] == mark
