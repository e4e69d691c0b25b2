"""The OpenAPI schema against the server's real answers: every route, streamed and not, its variants (logprobs,
echo, several prompts and choices, tool calls, base64 embeddings, a rerank without documents...) and its
errors, each answer valid for the schema of its status and media type and without a field the schema does
not name.  Also: /openapi.json needs the key like the other routes, and /docs is a page that reads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from serving import running

from llama_cpp_server import ModelSettings, Settings, create_app

KEY = "openapi-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MESSAGES = [{"role": "user", "content": "Name three rivers."}]
# enums, integers and booleans only: the grammar ends a forced call within a few dozen tokens
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}},
    "required": ["unit", "days"], "additionalProperties": False}}}]

ANTHROPIC_TOOL = {"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}


@pytest.fixture(scope="module")
def base(fim_chat_model_path: Path, tiny_bert_factory: Callable[..., Path], tiny_reranker_path: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server of a chat model (with fill-in-the-middle tokens), an embedding model and a reranker, with an
    API key, a folder for slot files and ``POST /props``."""
    common = {"n_ctx": 512, "n_seq_max": 2, "n_threads": 1, "n_threads_batch": 1}
    models = [ModelSettings(model=str(fim_chat_model_path), model_alias="tiny", **common),
              ModelSettings(model=str(tiny_bert_factory(pooling="mean")), model_alias="embedder", embeddings=True,
                            **common),
              ModelSettings(model=str(tiny_reranker_path), model_alias="reranker", embeddings=True, **common)]
    settings = Settings(models=models, max_loaded_models=3, api_keys=[KEY], max_body_bytes=4096,
                        slot_save_path=str(tmp_path_factory.mktemp("slots")), props_endpoint=True)
    with running(settings) as url:
        yield url


@pytest.fixture(scope="module")
def api(base: str) -> dict[str, Any]:
    reply = httpx.get(f"{base}/openapi.json", headers=AUTH, timeout=10)
    assert reply.status_code == 200
    return reply.json()


def sse_events(text: str) -> list[dict[str, str]]:
    """The events of an SSE body, each as its fields (``data`` lines joined), comments (pings) left out."""
    events: list[dict[str, str]] = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            fields[name] = f"{fields[name]}\n{value}" if name in fields else value
        if fields:
            events.append(fields)
    return events


class Checker:
    """Validates answers against the schema of their operation, status and media type."""

    def __init__(self, api: dict[str, Any]) -> None:
        self.api = api
        self.seen: set[tuple[str, str, str, str]] = set()

    def validator(self, schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
        """A validator of ``schema``, a part of the document: its refs are the document's."""
        document = {**self.api, "$defs": {"checked": schema}}
        registry = Registry().with_resource("urn:openapi", Resource.from_contents(document, DRAFT202012))
        return jsonschema.Draft202012Validator({"$ref": "urn:openapi#/$defs/checked"}, registry=registry)

    def validate(self, instance: Any, schema: dict[str, Any], where: str) -> None:
        errors = sorted(self.validator(schema).iter_errors(instance), key=lambda e: list(e.absolute_path))
        assert not errors, f"{where}: {errors[0].message} at {list(errors[0].absolute_path)}"
        undocumented = list(self.undocumented(instance, schema, ""))
        assert not undocumented, f"{where}: fields the schema does not name: {undocumented}"

    def undocumented(self, instance: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
        """The paths of ``instance``'s object keys that no property of ``schema`` names."""
        while "$ref" in schema:
            schema = self.api["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        for option in schema.get("anyOf") or schema.get("oneOf") or ():
            if self.validator(option).is_valid(instance):  # the first alternative it matches
                yield from self.undocumented(instance, option, path)
                return
        if schema.get("additionalProperties") is True:  # any field is documented (response_fields' picks)
            return
        if isinstance(instance, dict) and "properties" in schema:
            for key, value in instance.items():
                if key not in schema["properties"]:
                    yield f"{path}.{key}"
                else:
                    yield from self.undocumented(value, schema["properties"][key], f"{path}.{key}")
        elif isinstance(instance, dict) and isinstance(schema.get("additionalProperties"), dict):
            for key, value in instance.items():
                yield from self.undocumented(value, schema["additionalProperties"], f"{path}.{key}")
        elif isinstance(instance, list) and "items" in schema:
            for i, item in enumerate(instance):
                yield from self.undocumented(item, schema["items"], f"{path}[{i}]")

    def __call__(self, method: str, path: str, reply: httpx.Response) -> Any:
        """``reply`` is documented for ``method path``: its status, media type and body (each event of a
        stream); returns its JSON (or the streamed events' data)."""
        operation = self.api["paths"][path][method]
        where = f"{method.upper()} {path} -> {reply.status_code}"
        assert str(reply.status_code) in operation["responses"], f"{where}: status not documented"
        media = reply.headers["content-type"].split(";")[0].strip()
        content = operation["responses"][str(reply.status_code)].get("content", {})
        assert media in content, f"{where}: {media} not documented ({sorted(content)})"
        self.seen.add((method, path, str(reply.status_code), media))
        if media == "text/event-stream":
            events = sse_events(reply.text)
            item = content[media]["itemSchema"]
            if "oneOf" in item:  # named events, each name with its data's schema: [(name, data), ...]
                named: list[tuple[str, Any]] = []
                for event in events:
                    self.validate(event, item, where)
                    schemas = [o["properties"]["data"]["contentSchema"] for o in item["oneOf"]
                               if o["properties"]["event"]["const"] == event["event"]]
                    named.append((event["event"], json.loads(event["data"])))
                    self.validate(named[-1][1], schemas[0], where)
                return named
            done = "anyOf" in item["properties"]["data"]  # OpenAI's streams end with [DONE], llama-server's not
            if done:
                assert events and events[-1] == {"data": "[DONE]"}, f"{where}: the stream does not end with [DONE]"
            objects = item["properties"]["data"]["anyOf"][1] if done else item["properties"]["data"]
            data: list[Any] = []
            for event in events:
                self.validate(event, item, where)
                if event["data"] != "[DONE]":
                    data.append(json.loads(event["data"]))
                    self.validate(data[-1], objects["contentSchema"], where)
            return data
        if media == "application/json":
            self.validate(reply.json(), content[media]["schema"], where)
            return reply.json()
        assert content[media]["schema"] == {"type": "string"}, where
        return reply.text


def test_the_schema_documents_every_route(api: dict[str, Any]) -> None:
    operations = {(method, path) for path, methods in api["paths"].items() for method in methods}
    assert len(operations) == 34, sorted(operations)
    for path, methods in api["paths"].items():
        anthropic = path.startswith("/v1/messages")  # Anthropic's error object, and its 400 for a malformed body
        for method, operation in methods.items():
            ok = operation["responses"]["200"]["content"]
            assert all(media.get("schema") or media.get("itemSchema") for media in ok.values()), (method, path)
            for status, response in operation["responses"].items():
                if status != "200" and (path, status) != ("/health", "503"):
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": f"#/components/schemas/{'AnthropicError' if anthropic else 'ErrorResponse'}"}, (
                        method, path, status)
            assert ("security" in operation) == (path != "/health"), (method, path)
            if method == "post":
                assert {"400", "413", "500"} <= set(operation["responses"]), (method, path)
                assert not (anthropic and "422" in operation["responses"]), path
    assert "HTTPValidationError" not in json.dumps(api)  # FastAPI's own 422, which no route answers
    assert api["components"]["securitySchemes"] == {
        "bearer": {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer <key>`, as OpenAI's "
                                                                      "clients send it"},
        "apiKey": {"type": "apiKey", "in": "header", "name": "X-Api-Key", "description": "`X-Api-Key: <key>`"}}
    stream = api["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]["text/event-stream"]
    assert stream["itemSchema"]["properties"]["data"]["anyOf"][1]["contentSchema"]["anyOf"][0] == {
        "$ref": "#/components/schemas/ChatCompletionChunk"}


def test_without_keys_the_schema_has_no_security(chat_model_path: Path) -> None:
    api = create_app(Settings(model=str(chat_model_path))).openapi()
    assert "securitySchemes" not in api.get("components", {})
    assert not any("security" in op for methods in api["paths"].values() for op in methods.values())


def test_openapi_json_needs_the_key_and_docs_is_an_offline_page(base: str) -> None:
    refused = httpx.get(f"{base}/openapi.json", timeout=10)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{base}/openapi.json", headers={"X-Api-Key": KEY}, timeout=10).status_code == 200
    page = httpx.get(f"{base}/docs", timeout=10)  # open: the page asks for the key, as the chat page does
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'fetch("openapi.json"' in page.text
    assert "http://" not in page.text and "https://" not in page.text  # nothing from elsewhere: works offline
    assert httpx.get(f"{base}/redoc", timeout=10).status_code == 401  # no such page: without a key, not even that
    assert httpx.get(f"{base}/redoc", headers=AUTH, timeout=10).status_code == 404


def test_real_answers_match_the_schema(base: str, api: dict[str, Any]) -> None:
    check = Checker(api)

    def call(method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
             route: str | None = None) -> Any:
        reply = httpx.request(method, f"{base}{path}", json=body, headers=AUTH if headers is None else headers,
                              timeout=120)
        return reply.status_code, check(method.lower(), route or path, reply)

    completions = "/v1/completions"
    status, whole = call("POST", completions, {"prompt": "Once", "max_tokens": 4})
    assert status == 200 and whole["choices"][0]["finish_reason"] == "length"
    status, whole = call("POST", completions, {"prompt": ["Once", "Upon"], "max_tokens": 3, "n": 2, "echo": True,
                                              "logprobs": 2})
    assert status == 200 and len(whole["choices"]) == 4, whole
    assert whole["choices"][0]["logprobs"]["token_logprobs"][0] is None  # an echoed prompt's first token
    status, whole = call("POST", completions, {"prompt": [[1, 450], [1, 2]], "max_tokens": 2, "logprobs": 0})
    assert status == 200 and len(whole["choices"]) == 2, whole
    status, whole = call("POST", completions, {"prompt": "Once", "temperature": 0})  # to the end of the context
    assert status == 200 and whole["usage"]["total_tokens"] == 512 // 2, whole
    _, chunks = call("POST", completions, {"prompt": "Once", "max_tokens": 3, "logprobs": 1, "stream": True,
                                           "stream_options": {"include_usage": True}})
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
    call("POST", completions, {"prompt": ["a", "b"], "max_tokens": 2, "stream": True, "stop": ["\n"]})

    chat = "/v1/chat/completions"
    status, whole = call("POST", chat, {"messages": MESSAGES, "max_tokens": 4, "logprobs": True, "top_logprobs": 2,
                                        "n": 2})
    assert len(whole["choices"]) == 2 and whole["choices"][1]["logprobs"]["content"]
    status, forced = call("POST", chat, {"messages": MESSAGES, "max_tokens": 200, "temperature": 0, "tools": TOOLS,
                                         "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    assert forced["choices"][0]["finish_reason"] == "tool_calls", forced
    assert forced["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    _, cut = call("POST", chat, {"messages": MESSAGES, "max_tokens": 3, "tools": TOOLS, "tool_choice": "required"})
    assert cut["choices"][0]["finish_reason"] == "length"
    call("POST", chat, {"messages": MESSAGES, "max_tokens": 3, "functions": [TOOLS[0]["function"]],
                        "function_call": {"name": "get_weather"}})
    call("POST", chat, {"messages": MESSAGES, "max_tokens": 6, "tools": TOOLS, "tool_choice": "auto"})
    _, events = call("POST", chat, {"messages": MESSAGES, "max_tokens": 200, "temperature": 0, "tools": TOOLS,
                                    "tool_choice": "required", "stream": True})
    assert any(c["choices"] and c["choices"][0]["delta"].get("tool_calls") for c in events)
    _, events = call("POST", chat, {"messages": MESSAGES, "max_tokens": 4, "n": 2, "logprobs": True, "stream": True,
                                    "stream_options": {"include_usage": True}})
    assert {c["choices"][0]["index"] for c in events if c["choices"]} == {0, 1} and "usage" in events[-1]
    call("POST", chat, {"messages": MESSAGES, "max_tokens": 4, "response_format": {"type": "json_object"}})

    native = "/completions"  # llama-server's own routes
    whole_result = {"$ref": "#/components/schemas/CompletionResult"}  # not only the picked fields' shape

    status, result = call("POST", native, {"prompt": "Once", "n_predict": 4, "n_probs": 2, "return_tokens": True})
    assert status == 200 and len(result["tokens"]) == 4 and len(result["completion_probabilities"]) == 4, result
    check.validate(result, whole_result, native)
    _, results = call("POST", native, {"prompt": ["Once", [1, 450]], "n_predict": 2, "post_sampling_probs": True,
                                       "n_probs": 1, "stop": ["\n"]})
    assert [r["index"] for r in results] == [0, 1] and "top_probs" in results[0]["completion_probabilities"][0]
    check.validate(results, {"type": "array", "items": whole_result}, native)
    _, picked = call("POST", native, {"prompt": "Once", "n_predict": 2,
                                      "response_fields": ["content", "generation_settings/n_predict"]})
    assert picked["generation_settings/n_predict"] == 2 and set(picked) == {"content", "generation_settings/n_predict"}
    _, events = call("POST", native, {"prompt": "Once", "n_predict": 3, "stream": True, "n_probs": 1,
                                      "timings_per_token": True, "return_progress": True})
    assert events[-1]["stop"] is True and [e for e in events if "prompt_progress" in e], events
    check.validate(events[-1], whole_result, native)
    for event in events[:-1]:
        check.validate(event, {"$ref": "#/components/schemas/CompletionToken"}, native)
    _, events = call("POST", native, {"prompt": "Once", "n_predict": 2, "stream": True,
                                      "response_fields": ["content"]})
    assert events[-1] == {"content": ""}, events
    _, filled = call("POST", "/infill", {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n",
                                         "input_extra": [{"filename": "u.py", "text": "x = 1\n"}], "n_predict": 3})
    assert filled["tokens_predicted"] == 3, filled
    check.validate(filled, whole_result, "/infill")
    call("POST", "/infill", {"input_prefix": "a", "input_suffix": "b", "n_predict": 2, "stream": True})
    _, vectors = call("POST", "/embeddings", {"model": "embedder", "input": ["a cat", "a dog"]})
    assert [v["index"] for v in vectors] == [0, 1] and len(vectors[0]["embedding"]) == 1
    _, rendered = call("POST", "/apply-template", {"messages": MESSAGES})
    assert rendered["prompt"].startswith("<|user|>Name three rivers."), rendered
    _, counted = call("POST", "/chat/completions/input_tokens", {"messages": MESSAGES})
    assert counted["input_tokens"] > 0 and counted["object"] == "response.input_tokens"

    _, properties = call("GET", "/props?model=embedder", route="/props")
    assert properties["model_alias"] == "embedder" and properties["total_slots"] == 2
    assert call("POST", "/props", {})[1] == {"success": True}
    slots = "/slots/{id_slot}"
    assert [slot["id"] for slot in call("GET", "/slots")[1]] == [0, 1]
    assert call("POST", "/slots/0?action=save", {"filename": "s0.bin"}, route=slots)[1]["filename"] == "s0.bin"
    assert call("POST", "/slots/1?action=restore", {"filename": "s0.bin"}, route=slots)[1]["id_slot"] == 1
    assert "n_erased" in call("POST", "/slots/1?action=erase", route=slots)[1]
    _, prefixes = call("GET", "/prefixes?block_tokens=2", route="/prefixes")
    assert prefixes["name"] == "tiny" and prefixes["block_tokens"] == 2 and prefixes["hashes"], prefixes
    assert call("GET", "/lora-adapters")[1] == []
    assert call("POST", "/lora-adapters", [])[1] == {"success": True}
    assert call("POST", "/models/unload", {"model": "embedder"})[1] == {"success": True}
    assert call("POST", "/models/load", {"model": "embedder"})[1] == {"success": True}
    with httpx.stream("GET", f"{base}/models/sse", headers=AUTH, timeout=30) as reply:  # it does not end
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        statuses = []
        for line in reply.iter_lines():
            if line.startswith("data: "):
                statuses.append(line[len("data: "):])
            if len(statuses) == 3:  # each model's, first
                break
    item = api["paths"]["/models/sse"]["get"]["responses"]["200"]["content"]["text/event-stream"]["itemSchema"]
    for text in statuses:
        check.validate({"data": text}, item, "GET /models/sse")
        check.validate(json.loads(text), {"$ref": "#/components/schemas/ModelEvent"}, "GET /models/sse")
    assert {json.loads(text)["model"] for text in statuses} == {"tiny", "embedder", "reranker"}
    check.seen.add(("get", "/models/sse", "200", "text/event-stream"))

    messages = "/v1/messages"
    status, message = call("POST", messages, {"model": "tiny", "max_tokens": 4, "messages": MESSAGES,
                                              "system": "Be brief.", "stop_sequences": ["\n\n"]})
    assert status == 200 and message["content"][0]["type"] == "text", message
    _, used = call("POST", messages, {"model": "tiny", "max_tokens": 200, "temperature": 0, "messages": MESSAGES,
                                      "tools": [ANTHROPIC_TOOL],
                                      "tool_choice": {"type": "tool", "name": "get_weather"}})
    assert used["stop_reason"] == "tool_use" and used["content"][-1]["input"]["unit"] in ("celsius", "fahrenheit")
    _, events = call("POST", messages, {"model": "tiny", "max_tokens": 200, "temperature": 0, "messages": MESSAGES,
                                        "tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "any"}, "stream": True})
    assert [name for name, _ in events][:2] == ["message_start", "ping"] and events[-1][0] == "message_stop"
    assert any(data.get("delta", {}).get("type") == "input_json_delta" for _, data in events), events
    _, events = call("POST", messages, {"model": "tiny", "max_tokens": 3, "messages": MESSAGES, "stream": True})
    assert any(data.get("delta", {}).get("type") == "text_delta" for _, data in events), events
    _, counted = call("POST", f"{messages}/count_tokens", {"model": "tiny", "messages": MESSAGES})
    assert counted["input_tokens"] > 0

    responses = "/v1/responses"
    _, first = call("POST", responses, {"model": "tiny", "input": "Name a river.", "instructions": "Be brief.",
                                        "max_output_tokens": 4})
    assert first["status"] == "incomplete" and first["output"][0]["type"] == "message", first
    _, events = call("POST", responses, {"model": "tiny", "input": [{"role": "user", "content": "And another?"}],
                                         "previous_response_id": first["id"], "max_output_tokens": 3,
                                         "stream": True})
    assert events[0][0] == "response.created" and events[-1][0] == "response.incomplete", events
    second = events[-1][1]["response"]
    _, called = call("POST", responses, {"model": "tiny", "input": "Weather?", "temperature": 0,
                                         "max_output_tokens": 200, "tools": [RESPONSES_TOOL],
                                         "tool_choice": {"type": "function", "name": "get_weather"}, "store": False})
    assert called["output"][-1]["type"] == "function_call" and called["status"] == "completed", called
    _, events = call("POST", responses, {"model": "tiny", "input": "Weather?", "temperature": 0,
                                         "max_output_tokens": 200, "tools": [RESPONSES_TOOL],
                                         "tool_choice": "required", "stream": True})
    assert "response.function_call_arguments.done" in [name for name, _ in events], events
    _, counted = call("POST", f"{responses}/input_tokens", {"model": "tiny", "input": "More?",
                                                            "previous_response_id": first["id"]})
    assert counted["input_tokens"] > 0
    one = f"{responses}/{{response_id}}"
    _, stored = call("GET", f"{responses}/{first['id']}", route=one)
    assert stored["id"] == first["id"]
    _, page = call("GET", f"{responses}/{first['id']}/input_items?order=asc&limit=1", route=f"{one}/input_items")
    assert page["data"][0]["content"] == [{"type": "input_text", "text": "Name a river."}] and not page["has_more"]
    assert call("DELETE", f"{responses}/{first['id']}", route=one)[1]["deleted"] is True

    embeddings = "/v1/embeddings"
    _, floats = call("POST", embeddings, {"model": "embedder", "input": ["a cat", "a dog"]})
    assert isinstance(floats["data"][1]["embedding"][0], float)
    _, encoded = call("POST", embeddings, {"model": "embedder", "input": [[1, 2, 3]], "encoding_format": "base64"})
    assert isinstance(encoded["data"][0]["embedding"], str)
    _, scores = call("POST", embeddings, {"model": "reranker", "input": "a score"})  # a one-output classifier
    assert isinstance(scores["data"][0]["embedding"], float)
    call("POST", "/v1/rerank", {"model": "reranker", "query": "q", "documents": ["a", "b", "c"]})
    _, top = call("POST", "/v1/rerank", {"model": "reranker", "query": "q", "documents": ["a", "b"], "top_n": 1,
                                         "return_documents": False})
    assert len(top["results"]) == 1 and "document" not in top["results"][0]

    call("GET", "/v1/models")
    _, pieces = call("POST", "/tokenize", {"content": "hi there", "with_pieces": True, "add_special": True})
    assert pieces["tokens"][0]["id"] == 1
    call("POST", "/extras/tokenize", {"input": "hi there", "add_special": False})
    call("POST", "/extras/tokenize/count", {"input": "hi there"})
    call("POST", "/detokenize", {"tokens": [1, 2, 450]})
    call("POST", "/extras/detokenize", {"tokens": []})
    call("GET", "/health", headers={})
    _, text = call("GET", "/metrics")
    assert "llamacpp:n_decode_total" in text

    # the errors, each in OpenAI's shape as documented
    assert call("GET", "/v1/models", headers={})[0] == 401
    assert call("POST", "/tokenize", {"content": "x"}, headers={"X-Api-Key": "no"})[0] == 401
    assert call("GET", "/metrics", headers={})[0] == 401
    assert call("POST", chat, {"messages": MESSAGES, "model": "gpt-4"})[0] == 404
    assert call("POST", chat, {"messages": MESSAGES, "max_tokens": -1})[0] == 422
    assert call("POST", chat, {"messages": MESSAGES, "n": 99})[0] == 400
    assert call("POST", embeddings, {"model": "tiny", "input": "x"})[0] == 400
    assert call("POST", "/v1/rerank", {"model": "embedder", "query": "q", "documents": ["d"]})[0] == 400
    assert call("POST", completions, {"prompt": "x" * 5000})[0] == 413
    status, too_long = call("POST", completions, {"prompt": "hello " * 400, "max_tokens": 1})
    assert status == 400 and too_long["error"]["type"] == "exceed_context_size_error", too_long
    assert call("POST", native, {"prompt": "hello " * 400, "n_predict": 1})[0] == 400
    assert call("POST", "/detokenize", {"tokens": "abc"})[0] == 422
    assert call("POST", "/extras/tokenize/count", {})[0] == 422
    assert call("POST", native, {"prompt": "x", "logit_bias": [[1]]})[0] == 400
    assert call("POST", native, {"prompt": "x", "samplers": ["nope"]})[0] == 400
    assert call("POST", native, {"prompt": "x", "n_predict": "many"})[0] == 422
    assert call("POST", "/infill", {"model": "embedder", "input_prefix": "a", "input_suffix": "b"})[0] == 501
    assert call("POST", "/embeddings", {"model": "tiny", "input": "x"})[0] == 501
    assert call("POST", "/embeddings", {"model": "embedder"})[0] == 400
    assert call("POST", "/apply-template", {"messages": MESSAGES, "model": "gpt-4"})[0] == 404
    assert call("POST", "/props", {"n_ctx": 4})[0] == 400
    assert call("POST", "/slots/0?action=restore", {"filename": "none.bin"}, route=slots)[0] == 400
    assert call("POST", "/slots/0?action=save", {"filename": "../out.bin"}, route=slots)[0] == 400
    assert call("POST", "/slots/x?action=erase", route=slots)[0] == 400
    assert call("POST", "/slots/0?action=erase", {"filename": 3}, route=slots)[0] == 422
    assert call("GET", "/prefixes?block_tokens=0", route="/prefixes")[0] == 400
    assert call("GET", "/prefixes?max_hashes=all", route="/prefixes")[0] == 422
    assert call("GET", "/slots?model=gpt-4", route="/slots")[0] == 404
    assert call("POST", "/lora-adapters", [{"id": 3, "scale": 1.0}])[0] == 400
    assert call("POST", "/lora-adapters", [{"id": -1, "scale": 1.0}])[0] == 422
    assert call("POST", "/models/load", {"model": "tiny"})[0] == 400  # loaded already
    assert call("POST", "/models/unload", {"model": "gpt-4"})[0] == 404
    assert call("GET", "/models/sse", headers={})[0] == 401
    status, refused = call("POST", messages, {"model": "tiny", "messages": MESSAGES})  # no max_tokens
    assert status == 400 and refused["error"]["type"] == "invalid_request_error", refused
    assert call("POST", messages, {"model": "tiny", "max_tokens": 2, "messages": MESSAGES}, headers={})[0] == 401
    assert call("POST", messages, {"model": "claude", "max_tokens": 2, "messages": MESSAGES})[1]["error"]["type"] == (
        "not_found_error")
    assert call("POST", f"{messages}/count_tokens", {"messages": []})[0] == 400
    assert call("GET", f"{responses}/{first['id']}", route=one)[0] == 404  # deleted
    assert call("DELETE", f"{responses}/resp_unknown", route=one)[0] == 404
    assert call("GET", f"{responses}/resp_unknown/input_items", route=f"{one}/input_items")[0] == 404
    assert call("GET", f"{responses}/{second['id']}/input_items?limit=0", route=f"{one}/input_items")[0] == 400
    assert call("GET", f"{responses}/{second['id']}/input_items?after=msg_x", route=f"{one}/input_items")[0] == 404
    assert call("GET", f"{responses}/x/input_items?limit=many", route=f"{one}/input_items")[0] == 422
    assert call("POST", responses, {"input": "x", "previous_response_id": "resp_gone"})[0] == 404
    assert call("POST", responses, {"input": "x", "max_output_tokens": 0})[0] == 422
    assert call("POST", f"{responses}/input_tokens", {"input": "x", "model": "gpt-4"})[0] == 404
    reply = httpx.post(f"{base}/tokenize", content=b"{not json", headers={**AUTH, "Content-Type": "application/json"})
    assert reply.status_code == 400 and check("post", "/tokenize", reply)["error"]["code"] == "invalid_json"

    answered = {(m, p) for m, p, _, _ in check.seen}
    assert answered == {(m, p) for p, methods in api["paths"].items() for m in methods}, "a route was not called"


def test_health_while_loading_matches_the_schema(chat_model_path: Path) -> None:
    settings = Settings(model=str(chat_model_path) + ".missing", model_alias="tiny")
    with running(settings, wait_ready=False) as url:
        api = httpx.get(f"{url}/openapi.json").json()
        reply = httpx.get(f"{url}/health")
        assert reply.status_code == 503
        Checker(api)("get", "/health", reply)
