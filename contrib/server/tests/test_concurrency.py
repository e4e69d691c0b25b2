"""Many requests on one model: batched together and still exact, and a request that ends early (the client
went away, its time ran out) gives its sequence back at once; a full queue answers 429 at once.

Greedy decoding of the F32 tiny model is exact, so a request batched with seven others writes the same
text as alone.  A long request is made with ``ignore_eos`` and thousands of tokens on a large context: if
its sequence were not freed when it ended early, ``requests_processing`` would stay up for seconds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
from serving import assert_error, metric, wait_until
from llama_cpp_server.loadtest import chat_bodies, run

LONG = 12000  # tokens: many seconds of generation, even for the tiny model
SHORT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}


def long_body(stream: bool) -> dict[str, Any]:
    return {**SHORT, "max_tokens": LONG, "ignore_eos": True, "stream": stream}


def idle(base: str) -> bool:
    """No sequence busy and no request waiting."""
    return metric(base, "requests_processing") == 0 and metric(base, "requests_deferred") == 0


def assert_freed_early(base: str) -> None:
    """The long request's sequence is freed within a few seconds, long before it could have finished, and
    the model answers the next request."""
    wait_until(lambda: idle(base), "the sequence is freed", timeout=5)
    assert metric(base, "tokens_predicted_total") < LONG / 2
    response = httpx.post(f"{base}/v1/chat/completions", json=SHORT, timeout=30)
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 4


def test_eight_concurrent_streams_are_batched_and_equal_to_each_alone(serve: Callable[..., Any]) -> None:
    bodies = chat_bodies(8, max_tokens=48, model="tiny", ignore_eos=True)
    with serve(n_seq_max=8) as base:
        together = run(base, bodies, concurrency=8)
        assert not together.errors, together.errors
        assert metric(base, "n_busy_slots_per_decode") > 1  # decoded together, not one after another
        alone = run(base, bodies, concurrency=1)
    assert not alone.errors, alone.errors
    assert all(r.completion_tokens == 48 and r.text for r in together.results)
    assert len({r.text for r in alone.results}) > 1  # different prompts, different answers
    assert [r.text for r in together.results] == [r.text for r in alone.results]


def test_a_client_that_disconnects_mid_stream_frees_its_sequence(serve: Callable[..., Any]) -> None:
    with serve(n_ctx=16384) as base:
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=long_body(stream=True), timeout=30) as response:
            assert response.status_code == 200
            events = 0
            for line in response.iter_lines():
                events += line.startswith("data: ")
                if events == 5:
                    assert metric(base, "requests_processing") == 1
                    break  # leaving the lines unread closes the connection (httpx), as a client that goes away
        assert_freed_early(base)


def test_a_client_that_gives_up_on_a_plain_request_frees_its_sequence(serve: Callable[..., Any]) -> None:
    with serve(n_ctx=16384) as base:
        try:
            httpx.post(f"{base}/v1/chat/completions", json=long_body(stream=False), timeout=1.0)
        except httpx.ReadTimeout:
            pass
        else:
            raise AssertionError("the long request finished within a second")
        assert_freed_early(base)


def test_a_request_past_request_timeout_is_a_504(serve: Callable[..., Any]) -> None:
    with serve(n_ctx=16384, request_timeout=1.0) as base:
        start = time.monotonic()
        response = httpx.post(f"{base}/v1/chat/completions", json=long_body(stream=False), timeout=30)
        assert time.monotonic() - start < 5
        error = assert_error(response, 504, says="request_timeout")
        assert (error["type"], error["code"]) == ("timeout_error", "timeout")
        assert_freed_early(base)
        # streamed: the stream had started, so the timeout comes as its last event, before [DONE]
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=long_body(stream=True), timeout=30) as streamed:
            lines = [line for line in streamed.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        assert json.loads(lines[-2][6:])["error"]["code"] == "timeout"
        wait_until(lambda: idle(base), "the streamed request's sequence is freed", timeout=5)


def test_a_full_queue_answers_429_with_retry_after(serve: Callable[..., Any]) -> None:
    with serve(n_seq_max=1, max_queue=0, n_ctx=16384) as base:
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=long_body(stream=True), timeout=30) as first:
            lines = first.iter_lines()  # held: an iterator of httpx's left to the collector closes the connection
            next(line for line in lines if line.startswith("data: "))  # admitted and running
            refused = httpx.post(f"{base}/v1/chat/completions", json=SHORT, timeout=30)
            error = assert_error(refused, 429, says="busy")
            assert (error["type"], error["code"]) == ("rate_limit_error", "server_busy")
            assert int(refused.headers["retry-after"]) >= 1
            client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
            try:
                client.chat.completions.create(**SHORT)
            except openai.RateLimitError as exc:
                assert exc.status_code == 429 and exc.body["code"] == "server_busy"
            else:
                raise AssertionError("the second request was admitted past n_seq_max + max_queue")
        assert_freed_early(base)


def test_a_queued_request_waits_for_a_sequence(serve: Callable[..., Any]) -> None:
    """With room in the queue, a request beyond n_seq_max waits (deferred) and runs when one is free."""
    with serve(n_seq_max=1, max_queue=1, n_ctx=16384) as base:
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=long_body(stream=True), timeout=30) as first:
            lines = first.iter_lines()
            next(line for line in lines if line.startswith("data: "))
            answers: list[httpx.Response] = []
            waiter = threading.Thread(target=lambda: answers.append(
                httpx.post(f"{base}/v1/chat/completions", json=SHORT, timeout=30)))
            waiter.start()
            wait_until(lambda: metric(base, "requests_deferred") == 1, "the second request waits")
            assert not answers
        waiter.join(30)
        assert answers[0].status_code == 200 and answers[0].json()["usage"]["completion_tokens"] == 4
        wait_until(lambda: idle(base), "both requests are done", timeout=5)
