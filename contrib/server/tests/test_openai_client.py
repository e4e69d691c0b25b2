"""OpenAI's own Python client against the server: every route it has, streamed and not, parsed into the
client's types (a field the client cannot read fails here, not in a user's program).

The tiny random model writes gibberish, so the tests check shapes, counts and what greedy decoding fixes
(the same text streamed and not, the same choice twice); grammar-constrained answers (a forced tool call,
a JSON schema) are checked against their schema.  Embeddings and rerank run on real embedding models.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import numpy as np
import openai
import pytest
from serving import assert_error, running, tiny_settings
from llama_cpp_server import Settings

MESSAGES = [{"role": "user", "content": "Name three rivers."}]
WEATHER_SCHEMA = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]},
                                                   "days": {"type": "integer"}, "hourly": {"type": "boolean"}},
                  "required": ["unit", "days", "hourly"], "additionalProperties": False}
# enums, integers and booleans only: the grammar ends the object within a few dozen tokens even for a random
# model (a free string could run on until max_tokens)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather forecast",
                                           "parameters": WEATHER_SCHEMA}}]


@pytest.fixture(scope="module")
def base(chat_model_path: Path) -> Iterator[str]:
    """One tiny-model server for the module's tests (none of them changes it)."""
    with running(tiny_settings(chat_model_path)) as url:
        yield url


@pytest.fixture(scope="module")
def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)


def chat(client: openai.OpenAI, **kwargs: Any) -> Any:
    return client.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0, **kwargs)


def test_models_list(client: openai.OpenAI) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == ["tiny"]
    assert models[0].object == "model" and models[0].created > 0
    assert models[0].owned_by == "llamacpp"  # llama-server's: llama.vscode reads it to know the server


def test_completion_streamed_and_not(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=12, temperature=0)
    (choice,) = whole.choices
    assert whole.object == "text_completion" and whole.model == "tiny"
    assert choice.finish_reason == "length" and choice.text
    assert (whole.usage.completion_tokens, whole.usage.total_tokens) == (12, whole.usage.prompt_tokens + 12)
    chunks = list(client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=12, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)  # no usage chunk unless stream_options asks for it
    assert len({c.id for c in chunks}) == 1


def test_chat_streamed_and_not(client: openai.OpenAI) -> None:
    whole = chat(client, max_tokens=12)
    (choice,) = whole.choices
    assert whole.object == "chat.completion" and whole.model == "tiny"
    assert choice.message.role == "assistant" and choice.message.content and choice.finish_reason == "length"
    assert whole.usage.completion_tokens == 12
    chunks = list(chat(client, max_tokens=12, stream=True))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == choice.message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_the_model_is_named_as_served_when_the_request_names_none(base: str) -> None:
    body = {"messages": MESSAGES, "max_tokens": 2}
    assert httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30).json()["model"] == "tiny"
    assert httpx.post(f"{base}/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=30).json()["model"] \
        == "tiny"


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_include_usage_sends_a_last_usage_chunk(client: openai.OpenAI, route: str) -> None:
    if route == "chat":
        chunks = list(chat(client, max_tokens=7, stream=True, stream_options={"include_usage": True}))
    else:
        chunks = list(client.completions.create(model="tiny", prompt="Hello", max_tokens=7, temperature=0,
                                                stream=True, stream_options={"include_usage": True}))
    *body, last = chunks
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 7 and last.usage.prompt_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + 7
    assert all(c.usage is None and c.choices for c in body)
    assert last.id == body[0].id


def test_n_choices_chat(client: openai.OpenAI) -> None:
    whole = chat(client, max_tokens=6, n=2)
    assert [c.index for c in whole.choices] == [0, 1]
    assert whole.choices[0].message.content == whole.choices[1].message.content  # greedy: the same text twice
    assert whole.usage.completion_tokens == 12
    texts = {0: "", 1: ""}
    chunks = list(chat(client, max_tokens=6, n=2, stream=True, stream_options={"include_usage": True}))
    for chunk in chunks[:-1]:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == {0: whole.choices[0].message.content, 1: whole.choices[0].message.content}
    assert chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens  # the prompt counted once


def test_n_choices_completions(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="tiny", prompt="Hello", max_tokens=6, temperature=0, n=2)
    assert sorted(c.index for c in whole.choices) == [0, 1]
    assert whole.choices[0].text == whole.choices[1].text
    assert whole.usage.completion_tokens == 12
    texts = {0: "", 1: ""}
    for chunk in client.completions.create(model="tiny", prompt="Hello", max_tokens=6, temperature=0, n=2,
                                           stream=True):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == {0: whole.choices[0].text, 1: whole.choices[0].text}


def test_chat_logprobs(client: openai.OpenAI) -> None:
    whole = chat(client, max_tokens=5, logprobs=True, top_logprobs=3)
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens == 5
    assert "".join(t.token for t in content) == whole.choices[0].message.content
    for token in content:
        assert token.logprob <= 0 and len(token.top_logprobs) == 3
        assert token.top_logprobs[0].logprob >= token.top_logprobs[-1].logprob
        assert token.logprob == pytest.approx(token.top_logprobs[0].logprob)  # greedy: the most likely token
        assert token.bytes
    streamed = [t for c in chat(client, max_tokens=5, logprobs=True, stream=True)
                for choice in c.choices if choice.logprobs for t in choice.logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]


def test_completion_logprobs(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="tiny", prompt="Hello", max_tokens=5, temperature=0, logprobs=2)
    logprobs = whole.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 5
    assert "".join(logprobs.tokens) == whole.choices[0].text
    assert logprobs.text_offset[0] == 0 and logprobs.text_offset == sorted(logprobs.text_offset)
    for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        assert logprob <= 0 and len(top) == 2 and top[token] == pytest.approx(logprob)


def test_tools_with_auto_choice_parse(client: openai.OpenAI) -> None:
    """A random model may or may not call the tool; whichever it does, the answer is a valid message."""
    whole = chat(client, max_tokens=40, tools=TOOLS, tool_choice="auto")
    (choice,) = whole.choices
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    if choice.message.tool_calls:
        for call in choice.message.tool_calls:
            assert call.type == "function" and call.function.name == "get_weather"
            jsonschema.validate(json.loads(call.function.arguments), WEATHER_SCHEMA)
    else:
        assert isinstance(choice.message.content, str)


def test_a_forced_tool_call_matches_the_schema(client: openai.OpenAI) -> None:
    forced = {"type": "function", "function": {"name": "get_weather"}}
    whole = chat(client, max_tokens=200, tools=TOOLS, tool_choice=forced)
    (choice,) = whole.choices
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_SCHEMA)
    # streamed: the name in the first delta, the arguments in pieces that join into the same JSON
    name, arguments, finish = None, "", None
    for chunk in chat(client, max_tokens=200, tools=TOOLS, tool_choice=forced, stream=True):
        for streamed in chunk.choices:
            finish = streamed.finish_reason or finish
            for delta in streamed.delta.tool_calls or []:
                assert delta.index == 0
                name = name or delta.function.name
                arguments += delta.function.arguments or ""
    assert (name, finish) == ("get_weather", "tool_calls")
    assert json.loads(arguments) == json.loads(call.function.arguments)


def test_response_format_json_schema(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"count": {"type": "integer"}, "ok": {"type": "boolean"}},
              "required": ["count", "ok"], "additionalProperties": False}
    whole = chat(client, max_tokens=100, response_format={"type": "json_schema",
                                                          "json_schema": {"name": "answer", "schema": schema}})
    assert whole.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(whole.choices[0].message.content), schema)


def test_embeddings_need_an_embedding_model(client: openai.OpenAI, base: str) -> None:
    error = assert_error(httpx.post(f"{base}/v1/embeddings", json={"input": "hello"}, timeout=30), 400,
                         param="model", says="embeddings")
    assert error["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="tiny", input="hello")


def test_tokenize_detokenize_roundtrip(base: str) -> None:
    text = "The quick brown fox, 12 times!"
    tokens = httpx.post(f"{base}/tokenize", json={"content": text, "add_special": False}, timeout=30).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert httpx.post(f"{base}/detokenize", json={"tokens": tokens}, timeout=30).json()["content"].strip() == text
    with_bos = httpx.post(f"{base}/tokenize", json={"content": text, "add_special": True}, timeout=30).json()["tokens"]
    assert with_bos[1:] == tokens  # add_special puts the BOS token first
    assert httpx.post(f"{base}/tokenize", json={"content": text}, timeout=30).json()["tokens"] == tokens  # llama-server's default
    pieces = httpx.post(f"{base}/tokenize", json={"content": text, "add_special": False, "with_pieces": True},
                        timeout=30).json()["tokens"]
    assert [p["id"] for p in pieces] == tokens
    assert "".join(p["piece"] for p in pieces).strip() == text


@pytest.fixture(scope="module")
def embedding_base(minilm_model_path: Path) -> Iterator[str]:
    """all-MiniLM-L6-v2 served with ``embeddings: true``."""
    with running(Settings(model=str(minilm_model_path), model_alias="minilm", embeddings=True, n_ctx=512,
                          n_threads=2, n_threads_batch=2)) as url:
        yield url


def test_embeddings_float_and_base64(embedding_base: str) -> None:
    client = openai.OpenAI(base_url=embedding_base + "/v1", api_key="unused", max_retries=0)
    texts = ["The cat sat on the mat.", "A feline rested on the rug.", "Stock markets fell sharply."]
    floats = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    assert floats.model == "minilm" and [d.index for d in floats.data] == [0, 1, 2]
    vectors = np.array([d.embedding for d in floats.data])
    assert vectors.shape == (3, 384)
    assert np.linalg.norm(vectors, axis=1) == pytest.approx(1.0, abs=1e-5)  # unit length, as OpenAI's
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]  # a real model: the paraphrase is closer
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 3
    encoded = client.embeddings.create(model="minilm", input=texts, encoding_format="base64")
    decoded = np.array([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in encoded.data])
    assert decoded == pytest.approx(vectors, abs=1e-6)
    single = client.embeddings.create(model="minilm", input=texts[0], encoding_format="float")
    assert np.array(single.data[0].embedding) == pytest.approx(vectors[0], abs=1e-5)


def test_rerank(tiny_reranker_path: Path) -> None:
    documents = ["a bear", "the giant panda eats bamboo", "Paris in spring", "pandas"]
    with running(Settings(model=str(tiny_reranker_path), model_alias="reranker", embeddings=True, n_ctx=512,
                          n_threads=2, n_threads_batch=2)) as url:
        body = {"query": "what do pandas eat?", "documents": documents}
        ranked = httpx.post(f"{url}/v1/rerank", json=body, timeout=30).json()
        assert ranked["object"] == "list" and ranked["model"] == "reranker"
        results = ranked["results"]
        assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
        scores = [r["relevance_score"] for r in results]
        assert scores == sorted(scores, reverse=True)
        assert all(r["document"]["text"] == documents[r["index"]] for r in results)
        top = httpx.post(f"{url}/v1/rerank", json={**body, "top_n": 2, "return_documents": False},
                         timeout=30).json()["results"]
        assert top == [{"index": r["index"], "relevance_score": r["relevance_score"]} for r in results[:2]]


def test_rerank_needs_a_reranker(base: str) -> None:
    assert_error(httpx.post(f"{base}/v1/rerank", json={"query": "q", "documents": ["d"]}, timeout=30), 400,
                 param="model", says="reranker")
