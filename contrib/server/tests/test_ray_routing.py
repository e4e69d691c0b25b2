"""Prefix-aware routing on a local Ray cluster: three replicas of the tiny model (and of SmolLM2, for how the
chats are placed) behind the routing ingress, the issue's workload (6 system prompts of about 400 tokens shared by 48 users, 3 turns each, 6 at a time), routed by
prefix and by Serve's power of two choices in the same test (``llama_cpp_server.loadtest.run_conversations``, the
workload of the benchmark's case (j)).

What each policy cost is the prompt tokens the replicas evaluated, summed from the answers' ``timings``
(llama-server's ``prompt_n``); which replica answered is its ``X-Replica`` header.  Stored responses (OpenAI's
Responses API) live on the replica that made them: their continuations and reads must reach it.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

import openai  # noqa: E402
from llama_cpp_server import Settings  # noqa: E402
from serving import local_ray_serve  # noqa: E402
from llama_cpp_server.loadtest import RequestResult, run_conversations, shared_system_prompts  # noqa: E402
from llama_cpp_server.ray_ingress import RouteMaker  # noqa: E402
from llama_cpp_server.ray_serve import REPLICA_HEADER, deployment  # noqa: E402
from llama_cpp_server.response_store import home_of  # noqa: E402

REPLICAS = 3
USERS = 48
TURNS = 3
SYSTEMS = shared_system_prompts(6)


def serve_routed(path: Path, routing: str) -> None:
    settings = Settings(model=str(path), model_alias="model", n_ctx=4096, n_seq_max=4, n_threads=1,
                        n_threads_batch=1)
    serve.run(deployment(settings, num_replicas=REPLICAS, ray_actor_options={"num_cpus": 0.5}, routing=routing,
                         load_bound=1, routing_stats_period_s=0.5), name="routing", route_prefix="/")


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with local_ray_serve() as url:
        yield url


def conversations(base: str, answered: Any = None) -> list[list[RequestResult]]:
    report, per_user = asyncio.run(run_conversations(base, SYSTEMS, USERS, TURNS, 6, max_tokens=4, model="model",
                                                     answered=answered))
    assert not report.errors, report.errors[0].error
    return per_user


def routed(base: str, path: Path, routing: str) -> tuple[int, list[list[str | None]]]:
    """The prompt tokens the replicas evaluated for the workload routed by ``routing``, and which replica
    answered each turn of each chat."""
    serve_routed(path, routing)
    try:
        per_user = conversations(base)
    finally:
        serve.delete("routing")
    return (sum(r.prompt_evaluated or 0 for results in per_user for r in results),
            [[r.replica for r in results] for results in per_user])


def assert_sticky_and_spread(placed: list[list[str | None]]) -> None:
    assert all(len(set(turns)) == 1 for turns in placed), placed  # each chat on one replica
    per_replica = Counter(replica for turns in placed for replica in turns)
    assert len(per_replica) == REPLICAS
    assert max(per_replica.values()) <= 1.5 * statistics.mean(per_replica.values()), per_replica


def test_prefix_routing_evaluates_half_the_prompt_tokens_of_pow2(base: str, chat_model_path: Path) -> None:
    pow2, _ = routed(base, chat_model_path, "pow2")
    prefix, placed = routed(base, chat_model_path, "prefix")
    assert 0 < prefix <= 0.5 * pow2, (prefix, pow2)
    assert_sticky_and_spread(placed)


def test_prefix_routing_keeps_chats_and_spreads_them_where_answers_take_longer(base: str,
                                                                               smollm2_model_path: Path) -> None:
    """SmolLM2's answers take long enough that Serve routes while replicas are busy, where stickiness and the
    load count once missed requests (one replica got 87 of 144), and where requests counted only once Serve
    sent them let chats that started together all see the same loads (78 of 144); the tokens pow2 would
    evaluate are compared on the tiny model above (the same routing, at a third of this test's time)."""
    _, placed = routed(base, smollm2_model_path, "prefix")
    assert_sticky_and_spread(placed)


def test_a_replica_killed_mid_run_loses_no_request(base: str, chat_model_path: Path) -> None:
    """Streamed requests in progress at the killed replica had not started streaming, and are sent again by the
    ingress, or had (the tiny model's first token takes milliseconds), and may fail; every chat the dead replica
    was in the middle of between two turns goes on elsewhere."""
    serve_routed(chat_model_path, "prefix")
    turns: dict[int, list[str | None]] = {}
    killed: list[str] = []
    cut_short: list[int] = []  # the chats the dead replica was in the middle of
    between: list[int] = []  # the one of them between two turns when it was killed
    lock = threading.Lock()

    def answered(user: int, result: RequestResult) -> None:
        with lock:
            turns.setdefault(user, []).append(result.replica)
            if sum(map(len, turns.values())) < USERS or killed or len(turns[user]) == TURNS or result.error:
                return
            # a third of the way, between two turns of this chat: kill the replica that answered it.  This chat's
            # next turn is sent after the kill; the other chats the replica is in the middle of have a turn in flight
            # (the chats run on this event loop, held by this call), which it may still answer before it goes
            victim = result.replica
            assert victim is not None
            killed.append(victim)
            between.append(user)
            cut_short.extend(u for u, t in turns.items() if len(t) < TURNS and t[-1] == victim)
            name = f"SERVE_REPLICA::routing#llama_cpp_server#{victim}"
            ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
            # until it is gone: a kill takes effect a moment later, longer on a machine busy with other tests (the
            # chats wait meanwhile: this runs on their event loop)
            deadline = time.monotonic() + 120
            while True:
                try:
                    ray.get_actor(name, namespace="serve")
                except ValueError:
                    break
                assert time.monotonic() < deadline, f"the killed replica {victim} is still there after 120 s"
                time.sleep(0.05)

    try:
        report, per_user = asyncio.run(run_conversations(base, SYSTEMS, USERS, TURNS, 6, max_tokens=4, model="model",
                                                         answered=answered))
    finally:
        serve.delete("routing")
    assert killed and cut_short
    # only a request the dead replica was streaming may fail (its client had part of an answer); no other
    for failed in report.errors:
        assert failed.replica == killed[0] and failed.ttft is not None, failed
    # every chat without a failed turn has all its turns; the dead replica's went on elsewhere (a turn that was
    # already in flight there may have been answered while the kill took effect)
    for results in per_user:
        assert len(results) == TURNS or results[-1].error is not None
    moved = [u for u in cut_short if per_user[u][-1].error is None and per_user[u][-1].replica != killed[0]]
    assert between[0] in moved, [[r.replica for r in per_user[u]] for u in cut_short]


def test_a_responses_request_is_routed_by_its_prompt_or_by_the_home_of_what_it_continues(chat_model_path: Path) -> None:
    """A new response is hashed as the chat request it becomes (the same blocks and conversation as the chat route's);
    one that continues a stored response, or reads it, carries that response's home instead: its prompt begins with a
    conversation only the replica that stored it has."""
    routes = RouteMaker(Settings(model=str(chat_model_path), model_alias="model"))
    messages = [{"role": "system", "content": SYSTEMS[0]}, {"role": "user", "content": "Hello there"}]
    as_chat = routes.route_of("/v1/chat/completions", json.dumps({"model": "model", "messages": messages}).encode())
    as_response = routes.route_of("/v1/responses", json.dumps(
        {"model": "model", "instructions": SYSTEMS[0], "input": "Hello there"}).encode())
    assert as_chat is not None and as_chat["hashes"] and as_response == as_chat
    stored = "resp_" + "0123abcd" + "f" * 24
    continued = routes.route_of("/v1/responses", json.dumps(
        {"model": "model", "previous_response_id": stored, "input": "And then?"}).encode())
    assert continued == {"model": "", "hashes": [], "conversation": "", "home": "0123abcd"}
    assert routes.route_of("/v1/responses/input_tokens", json.dumps(
        {"model": "model", "previous_response_id": stored, "input": "x"}).encode())["home"] == "0123abcd"
    for path in (f"/v1/responses/{stored}", f"/v1/responses/{stored}/input_items"):
        assert routes.route_of(path, b"")["home"] == "0123abcd"
    assert routes.route_of("/v1/responses/not-an-id", b"") is None
    assert routes.route_of("/v1/responses", b'{"model": "model", "input": "x", "background": true}') is None  # refused there


def test_stored_responses_are_continued_and_read_on_the_replica_that_stored_them(base: str,
                                                                                chat_model_path: Path) -> None:
    """With three replicas, a stored response exists on one: every continuation (``previous_response_id``) and
    every read of it goes there, through the openai SDK as its documentation shows; a request for a response no
    replica has is a 404."""
    serve_routed(chat_model_path, "prefix")
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none")
        homes: Counter[str] = Counter()
        for user in range(9):
            raw = client.responses.with_raw_response.create(model="model", instructions=SYSTEMS[user % 6],
                                                            input=f"User {user} says hello", max_output_tokens=4)
            replica, response = raw.headers[REPLICA_HEADER], raw.parse()
            homes[replica] += 1
            for turn in range(2):
                raw = client.responses.with_raw_response.create(model="model", previous_response_id=response.id,
                                                                input=f"turn {turn}", max_output_tokens=4)
                assert raw.headers[REPLICA_HEADER] == replica
                response = raw.parse()
                assert response.previous_response_id is not None and home_of(response.id) == home_of(
                    response.previous_response_id)
            assert client.responses.retrieve(response.id).id == response.id
            assert [item.type for item in client.responses.input_items.list(response.id).data] == ["message"]
        assert len(homes) > 1, homes  # the conversations spread over the replicas, and each stayed on its own
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve("resp_" + "0" * 32)
    finally:
        serve.delete("routing")
