"""A bounded load test of an OpenAI-compatible chat server: a fixed list of streamed chat requests, at most
``concurrency`` in flight, over httpx on asyncio.  It stops by itself when the last request has ended.  The same
load can go through llama-server's own ``/completion`` instead (``--route completion``: the same stories asked
as plain prompts), which ours serves too.

Per request it records the latency (sent to the stream's end), the time to the first token (the first chunk
that carries text: a role-only chunk says nothing about the prompt being done), the text, the tokens the
stream carried and the usage the server reported; per run, requests/s, completion tokens/s, and latency and
time-to-first-token percentiles.  The server's tests check ours with it, and the benchmark's case (f) runs
the same load against ours and llama.cpp's llama-server.  It needs httpx (the repository's test extra).

``python -m llama_cpp_server.loadtest --url http://127.0.0.1:8000 --requests 64 --concurrency 8``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import httpx

from .responses import REPLICA_HEADER

TOPICS = ("rivers", "mountains", "trains", "bridges", "gardens", "markets", "libraries", "harbours", "deserts",
          "forests", "islands", "museums", "bakeries", "lighthouses", "orchards", "observatories")


def chat_bodies(count: int, *, max_tokens: int, model: str | None = None, **extra: Any) -> list[dict[str, Any]]:
    """``count`` streamed greedy chat requests with different prompts, each asking for the usage chunk;
    ``extra`` adds fields to every body (``ignore_eos``, ``logprobs``...)."""
    bodies = []
    for i in range(count):
        topic = TOPICS[i % len(TOPICS)]
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": f"Request {i}: write a short story about {topic}."}],
            "max_tokens": max_tokens, "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
            **extra}
        if model is not None:
            body["model"] = model
        bodies.append(body)
    return bodies


def completion_bodies(count: int, *, max_tokens: int, **extra: Any) -> list[dict[str, Any]]:
    """``count`` streamed greedy requests to llama-server's ``/completion``, the prompts of :func:`chat_bodies`
    as plain text; ``extra`` adds fields (``ignore_eos``...)."""
    return [{"prompt": f"Request {i}: write a short story about {TOPICS[i % len(TOPICS)]}.\n",
             "n_predict": max_tokens, "temperature": 0.0, "stream": True, **extra} for i in range(count)]


@dataclass
class RequestResult:
    """One request of a run (``error`` set if it failed: a status, an error event, a transport error)."""

    index: int
    latency: float = 0.0
    ttft: float | None = None
    text: str = ""
    streamed_tokens: int = 0  # logprob entries when the request asked for them (one per token), else text chunks
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_evaluated: int | None = None  # of the prompt tokens, those the server evaluated (its timings' prompt_n)
    replica: str | None = None  # the replica that answered (Ray Serve's X-Replica header), when there is one
    error: str | None = None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by the nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class LoadReport:
    """A run's results, in request order, and its wall time."""

    results: list[RequestResult]
    seconds: float
    concurrency: int
    errors: list[RequestResult] = field(init=False)

    def __post_init__(self) -> None:
        self.errors = [r for r in self.results if r.error is not None]

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens or 0 for r in self.results)

    @property
    def requests_per_second(self) -> float:
        return len(self.results) / self.seconds

    @property
    def tokens_per_second(self) -> float:
        """Aggregate generation rate: completion tokens of every request over the run's wall time."""
        return self.completion_tokens / self.seconds

    def latency(self, q: float) -> float:
        return percentile([r.latency for r in self.results if r.error is None], q)

    def ttft(self, q: float) -> float:
        return percentile([r.ttft for r in self.results if r.ttft is not None], q)

    def summary(self) -> str:
        return (f"{len(self.results)} requests at concurrency {self.concurrency} in {self.seconds:.2f} s, "
                f"{len(self.errors)} errors: {self.requests_per_second:.2f} requests/s, "
                f"{self.tokens_per_second:.1f} completion tokens/s; latency p50 {self.latency(50):.3f} s, "
                f"p99 {self.latency(99):.3f} s; time to first token p50 {self.ttft(50):.3f} s, "
                f"p99 {self.ttft(99):.3f} s")


async def _read_stream(client: httpx.AsyncClient, path: str, index: int, body: dict[str, Any],
                       take: Callable[[dict[str, Any], RequestResult], str]) -> RequestResult:
    """One streamed request to ``path``, read to its end; ``take`` reads an event's text and counts into the
    result (the shape is the route's)."""
    result = RequestResult(index)
    start = time.perf_counter()
    pieces: list[str] = []
    try:
        async with client.stream("POST", path, json=body) as response:
            result.replica = response.headers.get(REPLICA_HEADER)
            if response.status_code != 200:
                await response.aread()
                result.error = f"HTTP {response.status_code}: {response.text[:500]}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    result.error = f"error event: {event['error']}"
                    continue
                text = take(event, result)
                if text:
                    if result.ttft is None:
                        result.ttft = time.perf_counter() - start
                    pieces.append(text)
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.latency = time.perf_counter() - start
        result.text = "".join(pieces)
    return result


def _chat_event(event: dict[str, Any], result: RequestResult) -> str:
    """A chat chunk: its choices' text (a role-only chunk has none), and the usage of the last one."""
    texts = []
    for choice in event.get("choices") or []:
        text = (choice.get("delta") or {}).get("content")
        if text:
            texts.append(text)
        logprobs = (choice.get("logprobs") or {}).get("content")
        result.streamed_tokens += len(logprobs) if logprobs is not None else int(bool(text))
    usage = event.get("usage")
    if usage:
        result.prompt_tokens, result.completion_tokens = usage["prompt_tokens"], usage["completion_tokens"]
    timings = event.get("timings")
    if timings:
        result.prompt_evaluated = timings.get("prompt_n")
    return "".join(texts)


def _completion_event(event: dict[str, Any], result: RequestResult) -> str:
    """A llama-server ``/completion`` event: a token's text, or (``stop``) the final counts."""
    if event.get("stop"):
        result.prompt_tokens, result.completion_tokens = event["tokens_evaluated"], event["tokens_predicted"]
        return ""
    result.streamed_tokens += 1
    return str(event.get("content", ""))


async def stream_chat(client: httpx.AsyncClient, index: int, body: dict[str, Any]) -> RequestResult:
    """One streamed chat request, read to its end."""
    return await _read_stream(client, "/v1/chat/completions", index, body, _chat_event)


async def stream_completion(client: httpx.AsyncClient, index: int, body: dict[str, Any]) -> RequestResult:
    """One streamed llama-server ``/completion`` request, read to its end: an event per token, then the final
    one (``stop``) with the counts."""
    return await _read_stream(client, "/completion", index, body, _completion_event)


ROUTES = {"chat": stream_chat, "completion": stream_completion}


async def run_load(base_url: str, bodies: Sequence[dict[str, Any]], concurrency: int, *,
                   api_key: str | None = None, timeout: float = 600.0, route: str = "chat") -> LoadReport:
    """Send every body (streamed requests to ``route``: :data:`ROUTES`), at most ``concurrency`` at once.  Each
    request has a
    connection of its own: a kept-alive one that the server closes while a request is being sent on it (as
    llama-server does after 5 s idle) fails that request, and a POST is not retried; a new loopback
    connection costs well under a millisecond."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    gate = asyncio.Semaphore(concurrency)

    send = ROUTES[route]

    async def one(index: int, body: dict[str, Any]) -> RequestResult:
        async with gate:
            return await send(client, index, body)

    async with httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(timeout)) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(one(i, body) for i, body in enumerate(bodies)))
        seconds = time.perf_counter() - start
    return LoadReport(list(results), seconds, concurrency)


def run(base_url: str, bodies: Sequence[dict[str, Any]], concurrency: int, **kwargs: Any) -> LoadReport:
    """:func:`run_load` from synchronous code."""
    return asyncio.run(run_load(base_url, bodies, concurrency, **kwargs))


def shared_system_prompts(count: int, rules: int = 40) -> list[str]:
    """``count`` long system prompts (about ten tokens a rule), for conversations that share them."""
    return [f"You are assistant number {k}. " + " ".join(f"Rule {k}.{i}: answer about topic {i} politely."
                                                         for i in range(rules)) for k in range(count)]


async def run_conversations(base_url: str, systems: Sequence[str], users: int, turns: int, concurrency: int, *,
                            max_tokens: int, model: str | None = None, timeout: float = 600.0,
                            answered: Callable[[int, RequestResult], None] | None = None,
                            ) -> tuple[LoadReport, list[list[RequestResult]]]:
    """``users`` chats of ``turns`` turns each (user ``u`` under system prompt ``systems[u % len(systems)]``, each
    turn's greedy reply sent back in the next), ``concurrency`` chats at once: the routing workload of a
    multi-replica deployment.  Returns the report of every request and each user's requests in turn order;
    ``answered(user, result)`` is told of each request as it ends."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    gate = asyncio.Semaphore(concurrency)
    counter = iter(range(users * turns))

    async def chat(client: httpx.AsyncClient, user: int) -> list[RequestResult]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": systems[user % len(systems)]}]
        results = []
        async with gate:
            for turn in range(turns):
                messages.append({"role": "user", "content": f"User {user} asks question {turn}."})
                body: dict[str, Any] = {"messages": list(messages), "max_tokens": max_tokens, "temperature": 0.0,
                                        "stream": True, "stream_options": {"include_usage": True}}
                if model is not None:
                    body["model"] = model
                result = await stream_chat(client, next(counter), body)
                results.append(result)
                if answered is not None:
                    answered(user, result)
                if result.error is not None:
                    break
                messages.append({"role": "assistant", "content": result.text})
        return results

    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=httpx.Timeout(timeout)) as client:
        start = time.perf_counter()
        per_user = await asyncio.gather(*(chat(client, u) for u in range(users)))
        seconds = time.perf_counter() - start
    flat = sorted((r for results in per_user for r in results), key=lambda r: r.index)
    return LoadReport(flat, seconds, concurrency), list(per_user)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llama_cpp_server.loadtest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server's base URL (without /v1)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--model", default=None)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--ignore-eos", action="store_true", help="generate exactly --max-tokens tokens each")
    parser.add_argument("--route", choices=sorted(ROUTES), default="chat",
                        help="OpenAI's /v1/chat/completions, or llama-server's /completion")
    args = parser.parse_args(argv)
    extra = {"ignore_eos": True} if args.ignore_eos else {}
    bodies = (chat_bodies(args.requests, max_tokens=args.max_tokens, model=args.model, **extra)
              if args.route == "chat" else completion_bodies(args.requests, max_tokens=args.max_tokens, **extra))
    report = run(args.url, bodies, args.concurrency, api_key=args.api_key, route=args.route)
    print(report.summary())
    for failed in report.errors[:5]:
        print(f"request {failed.index}: {failed.error}", file=sys.stderr)
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
