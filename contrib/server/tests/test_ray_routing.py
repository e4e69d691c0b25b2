"""Prefix-aware routing on a local Ray cluster: three replicas of the tiny model behind the routing ingress, the
issue's workload (6 system prompts of about 400 tokens shared by 48 users, 3 turns each, 6 at a time), routed by
prefix and by Serve's power of two choices in the same test.

What each policy cost is the prompt tokens the replicas evaluated, summed from the answers' ``timings``
(llama-server's ``prompt_n``); which replica answered is its ``X-Replica`` header.
"""

from __future__ import annotations

import concurrent.futures
import socket
import statistics
from collections import Counter, defaultdict
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from llama_cpp_server import Settings  # noqa: E402
from llama_cpp_server.ray_serve import REPLICA_HEADER, deployment  # noqa: E402

REPLICAS = 3
USERS = 48
TURNS = 3
SYSTEMS = [f"You are assistant number {k}. " + " ".join(f"Rule {k}.{i}: answer about topic {i} politely."
                                                        for i in range(40)) for k in range(6)]


def settings(path: Path) -> Settings:
    return Settings(model=str(path), model_alias="tiny", n_ctx=4096, n_seq_max=4, n_threads=1, n_threads_batch=1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[int]:
    """A local Ray with Serve's proxy on a free port (the port is yielded); shut down after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    guards = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "60"}
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100 << 20,
             runtime_env={"env_vars": guards})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield port
    finally:
        serve.shutdown()
        ray.shutdown()


def run_workload(base: str, answered: Callable[[int, str], None] = lambda user, replica: None,
                 ) -> tuple[int, dict[int, list[str]], Counter[str]]:
    """The issue's workload through ``base``: (prompt tokens evaluated, each user's replicas turn by turn,
    requests per replica); ``answered(user, replica)`` is told of each answer as it comes."""
    evaluated = 0
    replicas: dict[int, list[str]] = defaultdict(list)
    per_replica: Counter[str] = Counter()

    def conversation(user: int) -> list[tuple[str, int]]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEMS[user % len(SYSTEMS)]}]
        seen = []
        with httpx.Client(timeout=120) as client:
            for turn in range(TURNS):
                messages.append({"role": "user", "content": f"User {user} asks question {turn}."})
                reply = client.post(f"{base}/v1/chat/completions", json={
                    "model": "tiny", "messages": messages, "max_tokens": 4, "temperature": 0})
                assert reply.status_code == 200, reply.text
                body = reply.json()
                messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
                seen.append((reply.headers[REPLICA_HEADER], body["timings"]["prompt_n"]))
                answered(user, reply.headers[REPLICA_HEADER])
        return seen

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        for user, seen in enumerate(pool.map(conversation, range(USERS))):
            for replica, prompt_n in seen:
                replicas[user].append(replica)
                per_replica[replica] += 1
                evaluated += prompt_n
    return evaluated, replicas, per_replica


def test_prefix_routing_evaluates_half_the_prompt_tokens_of_pow2(cluster: int, chat_model_path: Path) -> None:
    base = f"http://127.0.0.1:{cluster}"
    results = {}
    for routing in ("pow2", "prefix"):
        app = deployment(settings(chat_model_path), num_replicas=REPLICAS, ray_actor_options={"num_cpus": 0.5},
                         routing=routing, load_bound=0, routing_stats_period_s=0.5)
        serve.run(app, name="routing", route_prefix="/")
        try:
            results[routing] = run_workload(base)
        finally:
            serve.delete("routing")
    (pow2_tokens, _, _), (prefix_tokens, placed, per_replica) = results["pow2"], results["prefix"]
    assert prefix_tokens <= 0.5 * pow2_tokens, (prefix_tokens, pow2_tokens)
    assert all(len(set(turns)) == 1 for turns in placed.values()), placed  # every conversation on one replica
    assert len(per_replica) == REPLICAS
    assert max(per_replica.values()) <= 1.5 * statistics.mean(per_replica.values()), per_replica


def test_a_replica_killed_mid_run_loses_no_request(cluster: int, chat_model_path: Path) -> None:
    """Non-streamed requests: one in progress at the killed replica had sent nothing yet, so the ingress sends it
    again; the dead replica's conversations go on elsewhere."""
    app = deployment(settings(chat_model_path), num_replicas=REPLICAS, ray_actor_options={"num_cpus": 0.5},
                     routing="prefix", load_bound=0, routing_stats_period_s=0.5)
    serve.run(app, name="routing", route_prefix="/")
    turns: dict[int, list[str]] = defaultdict(list)
    killed: list[str] = []
    cut_short: list[int] = []  # the conversations the dead replica was in the middle of
    lock = threading.Lock()

    def answered(user: int, replica: str) -> None:
        with lock:
            turns[user].append(replica)
            if sum(map(len, turns.values())) < USERS or killed:
                return
            # a third of the way: kill the replica in the middle of the most conversations
            open_on = Counter(t[-1] for t in turns.values() if len(t) < TURNS)
            victim = open_on.most_common(1)[0][0]
            killed.append(victim)
            cut_short.extend(u for u, t in turns.items() if len(t) < TURNS and t[-1] == victim)
            ray.kill(ray.get_actor(f"SERVE_REPLICA::routing#llama_cpp_server#{victim}", namespace="serve"),
                     no_restart=True)

    try:
        _, placed, per_replica = run_workload(f"http://127.0.0.1:{cluster}", answered)  # asserts every answer is 200
    finally:
        serve.delete("routing")
    assert killed and cut_short and sum(per_replica.values()) == USERS * TURNS
    for user in cut_short:  # finished elsewhere, and never back on the dead replica
        assert len(placed[user]) == TURNS and placed[user][-1] != killed[0], placed[user]
