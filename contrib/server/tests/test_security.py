"""The server's guards: API keys, CORS, size limits, and every bad input answered with OpenAI's error shape
and a status that says what kind of mistake it was, never a stack trace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from serving import assert_error
from llama_cpp_server import Settings

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def test_api_keys_from_bearer_or_x_api_key(serve: Callable[..., Any]) -> None:
    with serve(api_keys=["alpha", "beta"]) as base:
        assert_error(httpx.post(f"{base}/v1/chat/completions", json=CHAT), 401, says="API key")
        assert_error(httpx.post(f"{base}/v1/chat/completions", json=CHAT,
                                headers={"Authorization": "Bearer wrong"}), 401)
        assert httpx.post(f"{base}/v1/chat/completions", json=CHAT,
                          headers={"Authorization": "Bearer beta"}).status_code == 200
        assert httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers={"X-Api-Key": "alpha"}).status_code == 200
        assert httpx.get(f"{base}/v1/models", headers={"Authorization": "Bearer alpha"}).status_code == 200
        assert_error(httpx.get(f"{base}/metrics"), 401)
        assert httpx.get(f"{base}/health").status_code == 200  # open, for load balancers
        assert httpx.get(f"{base}/").status_code == 200  # the chat page asks for a key itself


def test_cors_allows_any_origin_by_default_as_llama_server_does(serve: Callable[..., Any]) -> None:
    # the preflight of a browser's OpenAI SDK: headers of its own beside the key and the body's type
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os, x-stainless-lang"}
    with serve() as base:
        reply = httpx.options(f"{base}/v1/chat/completions", headers=preflight)
        assert reply.status_code == 200
        assert reply.headers["access-control-allow-origin"] == "*"
        assert "x-stainless-os" in reply.headers["access-control-allow-headers"].lower()
        reply = httpx.options(f"{base}/v1/responses/resp_1",
                              headers={**preflight, "Access-Control-Request-Method": "DELETE"})
        assert "DELETE" in reply.headers["access-control-allow-methods"]
        reply = httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers={"Origin": "https://app.example"})
        assert reply.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in reply.headers
    with serve(cors_origins=[]) as base:  # an empty list: CORS off
        reply = httpx.options(f"{base}/v1/chat/completions", headers=preflight)
        assert "access-control-allow-origin" not in reply.headers
        reply = httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers={"Origin": "https://app.example"})
        assert "access-control-allow-origin" not in reply.headers
    with serve(cors_origins=["https://app.example"], cors_allow_credentials=True) as base:
        reply = httpx.options(f"{base}/v1/chat/completions", headers=preflight)
        assert reply.headers["access-control-allow-origin"] == "https://app.example"
        assert reply.headers["access-control-allow-credentials"] == "true"
        other = httpx.options(f"{base}/v1/chat/completions", headers={**preflight, "Origin": "https://evil.example"})
        assert other.headers.get("access-control-allow-origin") != "https://evil.example"


def test_a_wildcard_origin_with_credentials_is_refused() -> None:
    with pytest.raises(ValueError, match="cors_origins '\\*' with cors_allow_credentials"):
        Settings(cors_origins=["*"], cors_allow_credentials=True)


def test_body_and_prompt_limits_say_the_limit(serve: Callable[..., Any]) -> None:
    with serve(max_body_bytes=2048, max_prompt_tokens=16) as base:
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 4096}]}
        assert_error(httpx.post(f"{base}/v1/chat/completions", json=big), 413, says="2048 bytes")

        def chunks() -> Any:  # no Content-Length: the limit holds while the body streams in
            yield b'{"model": "tiny", "messages": [{"role": "user", "content": "'
            for _ in range(10):
                yield b"y" * 512
            yield b'"}]}'

        assert_error(httpx.post(f"{base}/v1/chat/completions", content=chunks(),
                                headers={"Content-Type": "application/json"}), 413)
        long = {**CHAT, "messages": [{"role": "user", "content": "word " * 100}]}
        assert_error(httpx.post(f"{base}/v1/chat/completions", json=long), 400, says="at most 16 are allowed")
        assert_error(httpx.post(f"{base}/v1/completions", json={"model": "tiny", "prompt": "word " * 100}), 400,
                     says="at most 16 are allowed")
        assert httpx.post(f"{base}/v1/chat/completions", json=CHAT).status_code == 200


def test_a_prompt_longer_than_the_context_is_a_400(serve: Callable[..., Any]) -> None:
    """OpenAI's error object with llama-server's type and its two counts, which its clients read."""
    with serve(n_ctx=256, n_seq_max=1) as base:
        long = {**CHAT, "messages": [{"role": "user", "content": "word " * 400}]}
        reply = httpx.post(f"{base}/v1/chat/completions", json=long)
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code", "n_prompt_tokens", "n_ctx"}
        assert error["type"] == "exceed_context_size_error" and "context window" in error["message"]
        assert error["n_ctx"] == 256 and error["n_prompt_tokens"] > 256


@pytest.mark.parametrize(("body", "status", "param"), [
    ({**CHAT, "max_tokens": -1}, 422, "max_tokens"),
    ({**CHAT, "n": 1000}, 400, "n"),
    ({**CHAT, "temperature": "hot"}, 422, "temperature"),
    ({**CHAT, "messages": "hello"}, 422, "messages"),
    ({**CHAT, "messages": []}, 422, "messages"),
    ({**CHAT, "no_such_field": 1}, 422, "no_such_field"),
    ({**CHAT, "stream_options": {"include_usage": True, "extra": 1}}, 422, "stream_options.extra"),
    ({**CHAT, "logit_bias": {"abc": 1.0}}, 400, "logit_bias"),
    ({**CHAT, "logit_bias": {"99999999": 1.0}}, 400, "logit_bias"),
    ({**CHAT, "top_logprobs": 50}, 422, "top_logprobs"),
    ({**CHAT, "tool_choice": "sometimes"}, 400, None),
    ({**CHAT, "response_format": {"type": "xml"}}, 400, None),
    ({**CHAT, "mirostat_mode": 7}, 422, "mirostat_mode"),
    ({**CHAT, "top_k": 1.5}, 422, "top_k"),
])
def test_bad_chat_inputs_name_the_field(serve: Callable[..., Any], body: dict, status: int, param: str | None) -> None:
    with serve(max_n=8) as base:
        assert_error(httpx.post(f"{base}/v1/chat/completions", json=body), status, param=param)
        assert httpx.post(f"{base}/v1/chat/completions", json=CHAT).status_code == 200  # still serving


def test_malformed_bodies_and_unknown_routes(serve: Callable[..., Any]) -> None:
    with serve() as base:
        assert_error(httpx.post(f"{base}/v1/chat/completions", content=b"{not json",
                                headers={"Content-Type": "application/json"}), 400, says="not valid JSON")
        assert_error(httpx.post(f"{base}/v1/chat/completions", content=b"[1, 2]",
                                headers={"Content-Type": "application/json"}), 400, says="JSON object")
        assert_error(httpx.post(f"{base}/v1/completions", json={"model": "tiny", "prompt": [[1, 2], "x"]}), 422)
        assert_error(httpx.post(f"{base}/v1/completions", json={"model": "tiny", "prompt": [999999999]}), 400,
                     says="outside the vocabulary")
        assert_error(httpx.post(f"{base}/v1/embeddings", json={"model": "tiny", "input": "x",
                                                               "encoding_format": "hex"}), 422,
                     param="encoding_format")
        assert_error(httpx.get(f"{base}/v1/nothing"), 404, says="no route")
        assert_error(httpx.get(f"{base}/v1/chat/completions"), 405)


def test_a_stream_that_fails_before_its_first_token_is_an_error_response(serve: Callable[..., Any]) -> None:
    with serve(max_prompt_tokens=8) as base:
        body = {**CHAT, "stream": True, "messages": [{"role": "user", "content": "word " * 50}]}
        assert_error(httpx.post(f"{base}/v1/chat/completions", json=body), 400, says="at most 8")


def test_health_says_503_while_the_model_loads(chat_model_path: Any) -> None:
    """Until the first model is loaded (here: never, its file is missing), /health is 503 with a JSON
    body; the reason is shown once the load has failed."""
    from serving import running

    settings = Settings(model=str(chat_model_path) + ".missing", model_alias="tiny")
    with running(settings, wait_ready=False) as base:
        reply = httpx.get(f"{base}/health")
        assert reply.status_code == 503 and reply.json()["status"] in ("loading model", "error")
