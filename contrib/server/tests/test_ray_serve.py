"""Ray Serve: two replicas of the tiny model behind Serve's HTTP proxy on loopback, on a small local Ray.

Each replica is the server's whole app on its own engine; the ``X-Replica`` header names the replica that
answered, which is how the tests see the spreading and read one replica's /metrics through the proxy.
A generation cut short by a disconnect is told apart from one that ran on by its token count: a request
that runs to its end makes all its tokens (the tiny model never stops early), a cancelled one fewer; how many
fewer depends on how fast the machine decodes while the cancellation travels.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from llama_cpp_server import Settings, create_app  # noqa: E402
from serving import local_ray_serve  # noqa: E402
from llama_cpp_server.ray_serve import REPLICA_HEADER, LlamaServer, app_builder, deployment  # noqa: E402

LONG = 480  # tokens: fits a sequence of n_ctx 1024 / n_seq_max 2 with the prompt


def replica_settings(path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"model": str(path), "model_alias": "tiny", "n_ctx": 1024, "n_seq_max": 2,
                              "n_threads": 1, "n_threads_batch": 1}
    return Settings(**{**values, **overrides})


def chat(content: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, **extra}


@pytest.fixture(scope="module")
def proxy(chat_model_path: Path) -> Iterator[str]:
    """Serve's HTTP proxy (base URL) in front of two replicas of the tiny model; Ray is shut down after."""
    with local_ray_serve() as base:
        serve.run(deployment(replica_settings(chat_model_path), num_replicas=2, ray_actor_options={"num_cpus": 1}),
                  name="tiny", route_prefix="/")
        yield base


def replica_metrics(base: str, replica: str | None = None) -> tuple[str, dict[str, float]]:
    """The /metrics of ``replica`` (any, if None), asked through the proxy until that replica answers."""
    for _ in range(100):
        response = httpx.get(f"{base}/metrics", timeout=10)
        response.raise_for_status()
        if replica in (None, response.headers[REPLICA_HEADER]):
            values = {line.split("{")[0].removeprefix("llamacpp:"): float(line.rsplit(" ", 1)[1])
                      for line in response.text.splitlines() if line.startswith("llamacpp:")}
            return response.headers[REPLICA_HEADER], values
    raise AssertionError(f"replica {replica} never answered /metrics")


def settled_tokens(base: str, replica: str) -> float:
    """``replica``'s generated-token count once it runs nothing (read twice, a moment apart, to be final)."""
    deadline = time.monotonic() + 30
    while True:
        _, values = replica_metrics(base, replica)
        if values["requests_processing"] == 0 and values["requests_deferred"] == 0:
            time.sleep(0.3)
            _, again = replica_metrics(base, replica)
            if again["tokens_predicted_total"] == values["tokens_predicted_total"]:
                return values["tokens_predicted_total"]
        assert time.monotonic() < deadline, f"replica {replica} is still busy: {values}"
        time.sleep(0.05)


def tokens_by_replica(base: str) -> dict[str, float]:
    """Every replica's generated-token count (both are idle between the tests)."""
    seen: dict[str, float] = {}
    for _ in range(100):
        replica, values = replica_metrics(base)
        seen[replica] = values["tokens_predicted_total"]
        if len(seen) == 2:
            return seen
    raise AssertionError(f"only {sorted(seen)} answered /metrics")


def test_concurrent_requests_spread_over_both_replicas(proxy: str) -> None:
    start = threading.Barrier(8)

    def one(i: int) -> httpx.Response:
        with httpx.Client(timeout=60) as client:
            start.wait()
            return client.post(f"{proxy}/v1/chat/completions", json=chat(f"hello {i}", 48))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(one, range(8)))
    for response in responses:
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["model"] == "tiny"
        assert body["choices"][0]["message"]["content"]
        assert body["usage"]["completion_tokens"] == 48
    # 8 at once and max_ongoing_requests = n_seq_max + n_seq_max = 4 per replica: both must serve
    assert len({r.headers[REPLICA_HEADER] for r in responses}) == 2


def test_each_replica_reports_its_prefixes_as_routing_stats(proxy: str) -> None:
    """``record_routing_stats``, which Serve's controller polls: a replica's loaded models and what their
    engines hold, as the replica's own ``GET /prefixes`` answers it."""
    response = httpx.post(f"{proxy}/v1/chat/completions", json=chat("a prefix worth routing by " * 20, 4),
                          timeout=60)
    assert response.status_code == 200, response.text
    handle = serve.get_deployment_handle("llama_cpp_server", app_name="tiny")
    reports = [handle.record_routing_stats.remote().result(timeout_s=60) for _ in range(8)]
    for report in reports:
        assert [entry["name"] for entry in report["prefixes"]] == ["tiny"]
        entry = report["prefixes"][0]
        assert entry["block_tokens"] == 32 and all(isinstance(h, str) for h in entry["hashes"])
    # the replica that answered holds the chat's prompt: a replica's report equals its /prefixes
    held = max(reports, key=lambda r: len(r["prefixes"][0]["hashes"]))["prefixes"][0]
    assert len(held["hashes"]) >= 2
    for _ in range(50):
        answer = httpx.get(f"{proxy}/prefixes", timeout=10)
        if answer.json()["hashes"] == held["hashes"]:
            break
    else:
        raise AssertionError("no replica's /prefixes matched its routing stats")


def test_stream_arrives_whole_and_as_it_is_made(proxy: str) -> None:
    pieces, raw = 0, b""
    with httpx.stream("POST", f"{proxy}/v1/chat/completions", json=chat("tell me", 100, stream=True),
                      timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for piece in response.iter_raw():
            pieces += 1
            raw += piece
    events = [e for e in raw.decode("utf-8").split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert len(chunks) >= 100  # a chunk per token, the role's and the finish's
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert pieces > 1  # streamed through the proxy, not buffered whole


def test_disconnect_mid_stream_cancels_the_generation(proxy: str) -> None:
    before = tokens_by_replica(proxy)
    with httpx.stream("POST", f"{proxy}/v1/chat/completions", json=chat("go on", LONG, stream=True),
                      timeout=60) as response:
        assert response.status_code == 200
        replica = response.headers[REPLICA_HEADER]
        events = 0
        for line in response.iter_lines():
            events += line.startswith("data: ")
            if events == 3:
                break  # leaving the block closes the connection mid-stream
    generated = settled_tokens(proxy, replica) - before[replica]
    # cut short: one that ran on makes all LONG (a stream's cancel takes a handful of tokens, 20 at most seen
    # with the CPUs busy; the bound does not count on it)
    assert 0 < generated < LONG, f"{generated} tokens generated, the client left after 3 events"


def post_unread(base: str, body: dict[str, Any]) -> socket.socket:
    """``body`` POSTed to /v1/chat/completions on a bare socket, left unread: closing the socket is the client
    giving up waiting for the answer, at the moment the test chooses (httpx leaves only at a timeout)."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def test_disconnect_while_waiting_for_an_answer_cancels_it(proxy: str) -> None:
    # The client leaves once its request is seen decoding on its replica (an event, not a time): 8 choices of
    # LONG tokens, 2 sequences at a time, which make exactly 8 * LONG tokens unless the disconnect cancels them,
    # however fast or loaded the machine (cancelling takes the proxy, Ray and the replica each a turn on the
    # CPUs, while the decoding goes on).  The proxy sends /metrics to the less busy replica: a stream keeps
    # the other one busy meanwhile, opened first so that its X-Replica header names it and the request goes
    # to the idle one.
    before = tokens_by_replica(proxy)
    with httpx.stream("POST", f"{proxy}/v1/chat/completions", json=chat("go on", LONG, n=8, stream=True),
                      timeout=60) as occupant:
        assert occupant.status_code == 200
        (replica,) = set(before) - {occupant.headers[REPLICA_HEADER]}
        with post_unread(proxy, chat("go on", LONG, n=8)):
            deadline = time.monotonic() + 60
            while (seen := replica_metrics(proxy, replica)[1]["tokens_predicted_total"] - before[replica]) == 0:
                assert time.monotonic() < deadline, f"the request never started decoding on {replica}"
                time.sleep(0.01)
        # the client has gone (the socket closed, the answer unread); leaving the stream cancels it too
    generated = settled_tokens(proxy, replica) - before[replica]
    assert 0 < seen <= generated < 8 * LONG, f"{generated} tokens generated of {8 * LONG}, {seen} when the client left"


def test_health_check_is_the_apps_health(chat_model_path: Path) -> None:
    """Serve's check_health fails while the model is not loaded, passes once it is (no Ray needed)."""
    check_health = LlamaServer.func_or_class.check_health  # the method Serve calls, on a replica's state
    replica = types.SimpleNamespace(server_app=create_app(replica_settings(chat_model_path)))
    pool = replica.server_app.state.pool

    async def check() -> None:
        with pytest.raises(RuntimeError, match="/health answered 503.*loading model"):
            await check_health(replica)
        await pool.warm_up()
        await check_health(replica)

    try:
        asyncio.run(check())
    finally:
        pool.close()


def test_sizing_follows_the_model(chat_model_path: Path) -> None:
    # Application._bound_deployment and Deployment._deployment_config are Ray's private attributes
    fixed = deployment(replica_settings(chat_model_path, n_seq_max=3, max_queue=16), num_replicas=2)._bound_deployment
    assert (fixed.num_replicas, fixed.max_ongoing_requests, fixed.max_queued_requests) == (2, 6, 16)
    assert (fixed.backpressure_config.status_code, fixed.backpressure_config.retry_after_s) == (429, 1)
    # serve run's key=value strings, or a config file's typed args
    scaled = app_builder({"model": str(chat_model_path), "n_seq_max": 3, "max_queue": "1", "api_keys": ["k1", "k2"],
                          "min_replicas": "2", "max_replicas": 5, "num_gpus": "1"})._bound_deployment
    autoscaling = scaled._deployment_config.autoscaling_config
    assert (autoscaling.min_replicas, autoscaling.max_replicas, autoscaling.target_ongoing_requests) == (2, 5, 3)
    assert scaled.max_ongoing_requests == 4 and scaled.ray_actor_options["num_gpus"] == 1
    assert scaled.init_args[0].api_keys == ["k1", "k2"]
    with pytest.raises(ValueError, match="exclude each other"):
        deployment(replica_settings(chat_model_path), num_replicas=2, autoscaling={"max_replicas": 4})
