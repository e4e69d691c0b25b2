"""OpenAI's Responses API: the openai SDK's ``client.responses`` and openai-agents' default model as their
documentation uses them, stored responses and ``previous_response_id``, errors, and llama-server's
``/v1/responses`` as the oracle of the greedy text.

The tiny random model writes gibberish, so the tests check shapes, counts and what greedy decoding fixes;
grammar-constrained answers (a forced function call, a JSON schema) are checked against their schema.  How much a
continuation evaluates is measured on SmolLM2, whose generated text tokenizes back into the tokens it generated.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import agents
import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel
from llama_cpp_server.openai_responses import ResponseShape, ResponsesRequest, ResponsesView, ResponseStream, \
    input_messages
from llama_cpp_server.bridge import Served
from llama_cpp_server.response_store import ID, ResponseStore, StoredResponse, home_of, home_tag
from serving import assert_error, llama_server, running, tiny_settings

WEATHER_SCHEMA = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]},
                                                   "days": {"type": "integer"}, "hourly": {"type": "boolean"}},
                  "required": ["unit", "days", "hourly"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather forecast",
          "parameters": WEATHER_SCHEMA}]
FORCED = {"type": "function", "name": "get_weather"}
ANSWER_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "mood": {"enum": ["calm", "busy"]}},
                 "required": ["ok", "mood"], "additionalProperties": False}
JSON_FORMAT = {"format": {"type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA}}


@pytest.fixture(scope="module")
def both(chat_model_path: Path) -> Iterator[tuple[str, str]]:
    """Ours (two API keys, at most three stored responses) and llama-server on the tiny chat model."""
    settings = tiny_settings(chat_model_path, n_seq_max=2, api_keys=["k1", "k2"], responses_max_count=3)
    with running(settings) as ours, \
            llama_server(chat_model_path, "-c", "2048", "-np", "1", "--alias", "tiny") as theirs:
        yield ours, theirs


@pytest.fixture(scope="module")
def client(both: tuple[str, str]) -> openai.OpenAI:
    return openai.OpenAI(base_url=both[0] + "/v1", api_key="k1", max_retries=0)


def create(client: openai.OpenAI, **kwargs: Any) -> Any:
    return client.responses.create(**{"model": "tiny", "input": "Name three rivers.", "max_output_tokens": 12,
                                      "temperature": 0, **kwargs})


def test_a_response_and_its_stream(client: openai.OpenAI) -> None:
    whole = create(client, instructions="Be brief.")
    assert whole.object == "response" and whole.id.startswith("resp_") and whole.model == "tiny"
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "max_output_tokens"
    (message,) = whole.output
    assert message.type == "message" and message.role == "assistant" and message.content[0].type == "output_text"
    assert message.status == "incomplete"  # the token limit cut it
    assert whole.output_text and whole.instructions == "Be brief."
    assert whole.usage.output_tokens == 12 and whole.usage.total_tokens == whole.usage.input_tokens + 12
    with client.responses.stream(model="tiny", input="Name three rivers.", instructions="Be brief.",
                                 max_output_tokens=12, temperature=0) as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    assert events[-1].response.output_text == whole.output_text
    assert events[-2].item.status == events[-1].response.output[-1].status == "incomplete"


def test_a_json_schema_answer_completes_streamed_and_not(client: openai.OpenAI) -> None:
    whole = create(client, max_output_tokens=100, text=JSON_FORMAT)
    assert whole.status == "completed" and whole.incomplete_details is None
    jsonschema.validate(json.loads(whole.output_text), ANSWER_SCHEMA)
    with client.responses.stream(model="tiny", input="Name three rivers.", max_output_tokens=100, temperature=0,
                                 text=JSON_FORMAT) as stream:
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == whole.output_text
    assert final.output[-1].status == whole.output[-1].status == "completed"


def test_a_function_call_and_its_output_in_a_second_turn(client: openai.OpenAI) -> None:
    first = create(client, max_output_tokens=200, tools=TOOLS, tool_choice=FORCED)
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id and call.id.startswith("fc_") and call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER_SCHEMA)
    with client.responses.stream(model="tiny", input="Name three rivers.", max_output_tokens=200, temperature=0,
                                 tools=TOOLS, tool_choice=FORCED) as stream:
        events = list(stream)
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert arguments == done.arguments and done.name == "get_weather"
    assert json.loads(arguments) == json.loads(call.arguments)  # the whole answer's JSON is re-encoded
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "12 degrees"}
    continued = create(client, previous_response_id=first.id, input=[output], tools=TOOLS, tool_choice="none")
    whole = create(client, store=False, tools=TOOLS, tool_choice="none",
                   input=[{"role": "user", "content": "Name three rivers."}, *[i.model_dump() for i in first.output],
                          output])
    assert continued.output_text == whole.output_text  # the stored conversation is the one sent whole
    assert continued.previous_response_id == first.id


def test_stored_responses_are_the_keys_own_and_bounded(both: tuple[str, str], client: openai.OpenAI) -> None:
    made = create(client, max_output_tokens=2)
    assert client.responses.retrieve(made.id).output_text == made.output_text
    (item,) = client.responses.input_items.list(made.id).data
    assert item.type == "message" and item.content[0].text == "Name three rivers."
    other = openai.OpenAI(base_url=both[0] + "/v1", api_key="k2", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        create(other, previous_response_id=made.id)
    client.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)
    unstored = create(client, max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    oldest, *_ = [create(client, max_output_tokens=2) for _ in range(4)]  # three are kept
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(oldest.id)


def test_input_tokens_is_the_prompts_token_count(client: openai.OpenAI, both: tuple[str, str]) -> None:
    reply = httpx.post(f"{both[0]}/v1/responses/input_tokens", headers={"Authorization": "Bearer k1"},
                       json={"input": "Name three rivers.", "instructions": "Be brief."}, timeout=30).json()
    assert reply["object"] == "response.input_tokens"
    assert reply["input_tokens"] == create(client, instructions="Be brief.", max_output_tokens=1).usage.input_tokens


def test_greedy_text_equals_llama_servers(both: tuple[str, str]) -> None:
    body = {"model": "tiny", "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
            "instructions": "Be brief.", "max_output_tokens": 16, "temperature": 0}
    answers = [httpx.post(f"{base}/v1/responses", json=body, headers={"Authorization": "Bearer k1"},
                          timeout=60).json() for base in both]
    ours, theirs = ([item for item in answer["output"] if item["type"] == "message"] for answer in answers)
    assert ours[0]["content"][0]["text"] == theirs[0]["content"][0]["text"]
    assert answers[0]["usage"]["input_tokens"] == answers[1]["usage"]["input_tokens"]


def test_errors_name_the_field(both: tuple[str, str]) -> None:
    base, headers = both[0], {"Authorization": "Bearer k1"}
    cases = [({"input": "hi", "tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
             ({"input": [{"type": "computer_call", "id": "x"}]}, 400, "input[0].type"),
             ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, 400,
              "input[0].content[0]"),
             ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, 400, "text.format.schema"),
             ({"input": "hi", "background": True}, 400, "background"),
             ({"input": "hi", "previous_response_id": "resp_" + "0" * 32}, 404, "previous_response_id"),
             ({"input": "hi", "max_output_tokens": 0}, 422, "max_output_tokens"),
             ({"input": "hi", "frequency": 1}, 422, "frequency")]
    for body, status, field in cases:
        reply = httpx.post(f"{base}/v1/responses", json={"model": "tiny", **body}, headers=headers, timeout=30)
        assert_error(reply, status, param=field)


def test_items_become_the_chat_routes_messages() -> None:
    body = ResponsesRequest.model_validate({"input": [
        {"role": "developer", "content": "Rules."},
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"type": "message", "role": "assistant", "id": "m", "status": "completed",
         "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
        {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,iVBO"}]}]})
    assert input_messages(body.input) == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "ok", "reasoning_content": "hm",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]}]


class _Tokens:
    def tokenize(self, text: bytes, add_bos: bool = True) -> list[int]:
        return list(range(len(text.split())))


def test_a_reasoning_stream_writes_each_item_in_turn(tmp_path: Path) -> None:
    class Scope:
        requests = ()

    store = ResponseStore(10, 1 << 20, tmp_path)
    body = ResponsesRequest(input="q")
    view = ResponsesView(body, store, "", [{"role": "user", "content": "q"}])
    stream = ResponseStream(view, ResponseShape(body, "m", store.new_id()), Served(Scope(), "m", _Tokens()))  # type: ignore[arg-type]
    chunks = [{"choices": [{"delta": {"reasoning_content": "think hard"}, "finish_reason": None}]},
              {"choices": [{"delta": {"content": "ok"}, "finish_reason": None}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f",
                                                                                          "arguments": "{}"}}]},
                            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}]
    events = [event for chunk in chunks for event in stream.events(chunk)]
    assert [name for name, _ in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert [data["output_index"] for name, data in events if name == "response.output_item.done"] == [0, 1, 2]
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 2
    # kept, and again after a restart (the folder's JSON read back)
    record = ResponseStore(10, 1 << 20, tmp_path).get(final["id"], "")
    assert isinstance(record, StoredResponse) and record.response == final
    assert record.conversation[-1] == {"role": "assistant", "content": "ok", "reasoning_content": "think hard",
                                       "tool_calls": [{"id": "c", "type": "function",
                                                       "function": {"name": "f", "arguments": "{}"}}]}


def test_the_store_refuses_files_that_are_not_its_records(tmp_path: Path) -> None:
    (tmp_path / ("resp_" + "1" * 32 + ".json")).write_text('{"id": "../../etc/passwd"}')
    (tmp_path / ("resp_" + "2" * 32 + ".json")).write_bytes(b"\x80not json")
    assert len(ResponseStore(10, 1 << 20, tmp_path)) == 0


def test_a_store_with_a_home_names_it_in_every_id() -> None:
    """A Serve replica's store has a home (its replica's tag): its ids carry it, so that a router sends what
    continues or reads one of them to that replica; a store without one makes ids of the same shape."""
    store = ResponseStore(10, 1 << 20)
    plain = {store.new_id() for _ in range(50)}
    assert len(plain) == 50 and all(ID.fullmatch(i) for i in plain)
    assert len({home_of(i) for i in plain}) > 40  # random digits: they name no replica
    store.home = home_tag("replica-1")
    assert home_tag("replica-1") != home_tag("replica-2")
    ids = {store.new_id() for _ in range(50)}
    assert len(ids) == 50 and all(ID.fullmatch(i) and home_of(i) == home_tag("replica-1") for i in ids)
    assert home_of("resp_short") is None and home_of(None) is None and home_of("msg_" + "0" * 32) is None
    with pytest.raises(ValueError, match="a store's home is 8 hex digits"):
        store.home = "not-hex!"


@pytest.fixture(scope="module")
def smol(smollm2_model_path: Path) -> Iterator[str]:
    with running(tiny_settings(smollm2_model_path, model_alias="smol", n_seq_max=2, n_ctx=2048)) as base:
        yield base


def test_a_continuation_evaluates_only_the_new_input(smol: str) -> None:
    client = openai.OpenAI(base_url=smol + "/v1", api_key="unused", max_retries=0)
    first = client.responses.create(model="smol", input="What is the capital of France?", max_output_tokens=24,
                                    temperature=0, instructions="Answer in one sentence.")
    client.responses.create(model="smol", input="Something else entirely, to use the other sequence.",
                            max_output_tokens=4, temperature=0, store=False)
    follow = "And of Italy?"
    second = client.responses.create(model="smol", input=follow, previous_response_id=first.id,
                                     max_output_tokens=24, temperature=0, instructions="Answer in one sentence.")
    new_input = len(httpx.post(f"{smol}/tokenize", json={"content": follow}, timeout=10).json()["tokens"])
    evaluated = second.usage.input_tokens - second.usage.input_tokens_details.cached_tokens
    # all the first turn left in memory is reused (its end-of-turn token was sampled, never decoded); what is
    # evaluated is the new input and the template's turn markers around it
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens + first.usage.output_tokens - 1
    assert evaluated < new_input + 12, (evaluated, new_input, second.usage)
    whole = client.responses.create(
        model="smol", store=False, max_output_tokens=24, temperature=0, instructions="Answer in one sentence.",
        input=[{"role": "user", "content": "What is the capital of France?"},
               *[item.model_dump() for item in first.output], {"role": "user", "content": follow}])
    assert second.output_text == whole.output_text


def test_openai_agents_runs_on_the_default_responses_model(both: tuple[str, str]) -> None:
    calls: list[dict[str, Any]] = []

    @agents.function_tool
    def get_weather(unit: Literal["celsius", "fahrenheit"], hourly: bool) -> str:
        """The weather forecast."""
        calls.append({"unit": unit, "hourly": hourly})
        return "sunny"

    class Verdict(BaseModel):  # a structured answer: its grammar ends it, so the response completes
        ok: bool
        mood: Literal["calm", "busy"]

    agents.set_tracing_disabled(True)

    def model() -> Any:  # an async client per run: each run_sync has an event loop of its own
        return agents.OpenAIResponsesModel(model="tiny", openai_client=openai.AsyncOpenAI(
            base_url=both[0] + "/v1", api_key="k1", max_retries=0))

    settings = agents.ModelSettings(temperature=0, max_tokens=200, tool_choice="required")
    agent = agents.Agent(name="weather", instructions="Use the tool.", model=model(), tools=[get_weather],
                         model_settings=settings, tool_use_behavior="stop_on_first_tool")
    result = agents.Runner.run_sync(agent, "What is the weather?")
    assert result.final_output == "sunny" and len(calls) == 1
    judge = agents.Agent(name="judge", instructions="Judge the day.", model=model(), output_type=Verdict,
                         model_settings=agents.ModelSettings(temperature=0, max_tokens=100))
    assert isinstance(agents.Runner.run_sync(judge, "A quiet Sunday.").final_output, Verdict)


@pytest.fixture(scope="module")
def thinker(reasoning_model_path: Path) -> Iterator[openai.OpenAI]:
    with running(tiny_settings(reasoning_model_path, n_seq_max=1, n_ctx=1024)) as base:
        yield openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)


def test_reasoning_is_a_reasoning_item_streamed_and_not(thinker: openai.OpenAI) -> None:
    asked = dict(model="tiny", input="hi", max_output_tokens=64, temperature=0, reasoning={"effort": "low"},
                 extra_body={"grammar": "root ::= " + json.dumps("<think>abc</think>answer")})
    whole = thinker.responses.create(**asked)  # type: ignore[call-overload]
    reasoning, message = whole.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "abc"
    assert message.type == "message" and whole.output_text == "answer" and whole.status == "completed"
    assert whole.usage.output_tokens_details.reasoning_tokens > 0
    with thinker.responses.stream(**asked) as stream:  # type: ignore[arg-type]
        events = list(stream)
        final = stream.get_final_response()
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "abc"
    assert final.output_text == whole.output_text and final.output[0].content[0].text == "abc"
    # continued: the stored reasoning goes back to the template as the assistant's reasoning_content
    again = thinker.responses.create(**{**asked, "input": "more", "previous_response_id": whole.id})
    assert again.output_text == "answer"


def test_an_input_image_is_the_chat_routes_image_part(tiny_mtmd_model: Any, tiny_png: Any) -> None:
    text, mmproj = tiny_mtmd_model("gemma3")
    url = "data:image/png;base64," + base64.b64encode(tiny_png(64, 64).read_bytes()).decode()
    with running(tiny_settings(text, mmproj_path=str(mmproj), n_seq_max=1, n_ctx=4096)) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        seen = client.responses.create(model="tiny", max_output_tokens=8, temperature=0, input=[
            {"role": "user", "content": [{"type": "input_image", "image_url": url},
                                         {"type": "input_text", "text": "What is this?"}]}])
        chat = client.chat.completions.create(model="tiny", max_tokens=8, temperature=0, messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "What is this?"}]}])
    assert seen.output_text == chat.choices[0].message.content
    assert seen.usage.input_tokens == chat.usage.prompt_tokens


def test_input_items_pages_forward_with_after_and_back_with_before() -> None:
    from llama_cpp_server.errors import APIError
    from llama_cpp_server.openai_responses import input_items_page

    items = [{"id": f"msg_{i}", "type": "message"} for i in range(5)]
    record = StoredResponse(id="resp_1", tenant="", response={}, input_items=items, conversation=[])

    def ids(page: dict[str, Any]) -> tuple[list[str], bool]:
        return [item["id"] for item in page["data"]], page["has_more"]

    assert ids(input_items_page(record, 2, "asc", None)) == (["msg_0", "msg_1"], True)
    assert ids(input_items_page(record, 2, "asc", "msg_1")) == (["msg_2", "msg_3"], True)
    assert ids(input_items_page(record, 2, "asc", "msg_3")) == (["msg_4"], False)
    assert ids(input_items_page(record, 2, "desc", None)) == (["msg_4", "msg_3"], True)
    # before alone: the page just before the cursor, as a client going back a page asks for it
    assert ids(input_items_page(record, 2, "asc", None, "msg_4")) == (["msg_2", "msg_3"], True)
    assert ids(input_items_page(record, 2, "asc", None, "msg_2")) == (["msg_0", "msg_1"], False)
    assert ids(input_items_page(record, 2, "desc", None, "msg_1")) == (["msg_3", "msg_2"], True)
    assert ids(input_items_page(record, 5, "asc", "msg_0", "msg_4")) == (["msg_1", "msg_2", "msg_3"], False)
    assert ids(input_items_page(record, 5, "asc", "msg_3", "msg_1")) == ([], False)  # crossed cursors: nothing
    with pytest.raises(APIError, match="before: no input item 'msg_9'"):
        input_items_page(record, 2, "asc", None, "msg_9")
