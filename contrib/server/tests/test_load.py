"""A bounded load test on loopback: 64 streamed chat requests, 8 at a time, on ``n_seq_max=8``
(``llama_cpp_server.loadtest``, which the benchmark's case (f) also runs against llama-server).

Nothing may fail, and every count must be right: each request's completion_tokens is the number of tokens
its stream carried (one logprob entry per token), and its prompt_tokens what /tokenize gives for its
rendered prompt.  The rates and percentiles are printed, not asserted: they depend on the machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import jinja2
import pytest
from serving import CHAT_TEMPLATE, metric
from llama_cpp_server.loadtest import chat_bodies, completion_bodies, run

REQUESTS, CONCURRENCY, MAX_TOKENS = 64, 8, 32


def test_load(serve: Callable[..., Any], capsys: pytest.CaptureFixture[str]) -> None:
    bodies = chat_bodies(REQUESTS, max_tokens=MAX_TOKENS, model="tiny", logprobs=True)
    template = jinja2.Template(CHAT_TEMPLATE)
    with serve(n_seq_max=CONCURRENCY) as base:
        prompt_tokens = [
            len(httpx.post(f"{base}/tokenize", json={"add_special": True, "content": template.render(
                messages=body["messages"], add_generation_prompt=True)}, timeout=30).json()["tokens"])
            for body in bodies]
        report = run(base, bodies, CONCURRENCY)
        busy = metric(base, "n_busy_slots_per_decode")
        predicted = metric(base, "tokens_predicted_total")
    with capsys.disabled():
        print(f"\nload test, tiny model: {report.summary()}; {busy:.2f} busy sequences per decode")
    assert not report.errors, [r.error for r in report.errors]
    for result, expected_prompt in zip(report.results, prompt_tokens):
        assert result.completion_tokens == result.streamed_tokens, result
        assert 0 < result.completion_tokens <= MAX_TOKENS
        assert result.prompt_tokens == expected_prompt, result
        assert result.ttft is not None and 0 < result.ttft <= result.latency
    assert predicted == report.completion_tokens  # the server's count agrees with the responses'
    assert busy > 1


def test_load_through_llama_servers_completion_route(serve: Callable[..., Any]) -> None:
    """The same load through /completion (the benchmark's (f2)): every request ends with its counts, one
    streamed event per generated token."""
    bodies = completion_bodies(16, max_tokens=MAX_TOKENS, ignore_eos=True)
    with serve(n_seq_max=CONCURRENCY) as base:
        report = run(base, bodies, CONCURRENCY, route="completion")
    assert not report.errors, [r.error for r in report.errors]
    assert report.completion_tokens == 16 * MAX_TOKENS
    for result in report.results:
        assert result.streamed_tokens == result.completion_tokens == MAX_TOKENS and result.prompt_tokens
        assert result.ttft is not None and 0 < result.ttft <= result.latency
