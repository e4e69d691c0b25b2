"""The prefix-routing policy and its Ray Serve request router, without a cluster: fake replicas with routing
statistics as ``LlamaServer.record_routing_stats`` reports them (the Ray Serve tests run it on a local cluster)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from llama_cpp.engine.prefix_summary import block_hashes, chain_start
from llama_cpp_server.prefix_routing import PrefixRouting, ReplicaView, RoutedPrompt, held_hashes
from llama_cpp_server.ray_prefix_router import ROUTE_KEYWORD, PrefixRequestRouter, routed_prompt
from llama_cpp_server.response_store import home_tag

SYSTEM = list(range(100, 228))  # four blocks of 32 tokens


def hashes(tokens: list[int]) -> tuple[str, ...]:
    return tuple(block_hashes(tokens, chain_start("m", None)))


def prompt(tokens: list[int], conversation: str = "") -> RoutedPrompt:
    return RoutedPrompt("tiny", hashes(tokens), conversation)


def view(replica_id: str, load: int, *held: list[int]) -> ReplicaView:
    return ReplicaView(replica_id, load, {"tiny": frozenset(h for tokens in held for h in hashes(tokens))})


def test_the_replica_holding_the_longest_prefix_comes_first() -> None:
    policy = PrefixRouting(rng=random.Random(0))
    replicas = [view("a", 0), view("b", 1, SYSTEM[:64]), view("c", 1, SYSTEM + [1] * 32)]
    ranks = policy.rank(replicas, prompt(SYSTEM + [1] * 40))
    assert ranks[0] == ["c"] and sorted(rank[0] for rank in ranks[1:]) == ["a", "b"]  # then two choices, one a rank


def test_among_equal_holders_the_least_loaded() -> None:
    policy = PrefixRouting()
    ranks = policy.rank([view("a", 3, SYSTEM), view("b", 1, SYSTEM), view("c", 0)], prompt(SYSTEM + [5]))
    assert ranks[0] == ["b"]


def test_a_holder_over_the_load_bound_loses_to_two_choices() -> None:
    policy = PrefixRouting(load_bound=2, rng=random.Random(1))
    ranks = policy.rank([view("a", 5, SYSTEM), view("b", 0), view("c", 1)], prompt(SYSTEM + [5]))
    assert ranks == [["b"], ["c"]]  # the two within the bound, the less loaded first


def test_no_prefix_anywhere_is_two_random_choices_less_loaded_first() -> None:
    policy = PrefixRouting(rng=random.Random(2))
    seen = Counter()
    for _ in range(300):
        first, _ = policy.rank([view("a", 0), view("b", 0), view("c", 0)], prompt([9] * 40))
        seen.update(first)
    assert set(seen) == {"a", "b", "c"} and min(seen.values()) > 60
    assert policy.rank([view("a", 2), view("b", 0)], None) == [["b"], ["a"]]  # no route at all


def test_a_conversation_sticks_to_its_replica_until_it_dies() -> None:
    policy = PrefixRouting(rng=random.Random(3))
    first = prompt([7] * 10, "user-1")  # too short to hold a block: no prefix says where it went
    rank = policy.rank([view("a", 0), view("b", 0)], first)[0]
    policy.routed(first, rank[0])
    for _ in range(20):
        assert policy.rank([view("a", 0), view("b", 0)], prompt([7] * 12, "user-1")) == [rank]
    # however loaded, and with no second choice: Serve waits for it while it is full or slow to answer a probe
    loaded = [view(r, 9 if [r] == rank else 0) for r in ("a", "b")]
    assert policy.rank(loaded, prompt([7] * 12, "user-1")) == [rank]
    policy.forget(rank[0])
    other = "b" if rank[0] == "a" else "a"
    assert policy.rank([view(other, 0)], prompt([7] * 12, "user-1")) == [[other]]


def test_stickiness_is_bounded() -> None:
    policy = PrefixRouting(max_conversations=2)
    for k in range(3):
        policy.routed(prompt([1], f"c{k}"), "a")
    assert [policy.rank([view("a", 4), view("b", 0)], prompt([1], f"c{k}"))[0][0] for k in range(3)] == \
        ["b", "a", "a"]  # c0 was forgotten: the less loaded; the others stick


def test_routing_statistics_are_read_defensively() -> None:
    stats = {"prefixes": [{"name": "tiny", "hashes": ["x", 3, "y"]}, {"name": 5}, "junk"]}
    assert held_hashes(stats) == {"tiny": frozenset({"x", "y"})}
    assert held_hashes({}) == {} and held_hashes({"prefixes": "no"}) == {}
    with pytest.raises(ValueError, match="load_bound must be at least 0"):
        PrefixRouting(load_bound=-1)


def replica(unique_id: str, *held: list[int]) -> Any:
    stats = {"prefixes": [{"name": "tiny", "model": "m", "block_tokens": 32,
                           "hashes": [h for tokens in held for h in hashes(tokens)]}]}
    return SimpleNamespace(replica_id=SimpleNamespace(unique_id=unique_id), routing_stats=stats)


def pending(route: Any) -> Any:
    return SimpleNamespace(kwargs={ROUTE_KEYWORD: route} if route is not None else {})


def test_the_serve_router_ranks_by_the_replicas_statistics_and_its_own_load_count() -> None:
    router = PrefixRequestRouter.__new__(PrefixRequestRouter)  # the API's hooks alone, without Serve's plumbing
    router._use_replica_queue_len_cache = False  # (what the base class's __init__ would set: no queue cache here)
    router.initialize_state(load_bound=1)
    a, b = replica("a"), replica("b", SYSTEM)
    route = {"model": "tiny", "hashes": list(hashes(SYSTEM + [3])), "conversation": "u"}
    ranks = asyncio.run(router.choose_replicas([a, b], pending(route)))
    assert ranks[0] == [b]
    for _ in range(2):  # two requests in flight on b: over the bound, the holder loses its preference
        router.on_send_request(b.replica_id)
    ranks = asyncio.run(router.choose_replicas([a, b], pending({**route, "conversation": "v"})))
    assert ranks == [[a]]  # only a is within the bound
    assert asyncio.run(router.choose_replicas([a, b], pending(route))) == [[b]]  # "u" sticks, however loaded
    router.on_request_completed(b.replica_id, "r1")
    router.on_request_completed(b.replica_id, "r2")
    for _ in range(2):  # now a is the busy one (it holds the prefix too: "v" was sent there)
        router.on_send_request(a.replica_id)
    assert asyncio.run(router.choose_replicas([a, b], pending({**route, "conversation": "w"})))[0] == [b]


def test_the_replica_chosen_for_a_request_goes_to_that_request_not_the_oldest_waiting() -> None:
    """Serve's FIFO matching gave a replica chosen for one chat's route to whichever request had waited longest,
    moving that one's chat (CI saw a chat answered by two replicas); the router matches by request id."""
    from ray.serve._private.common import DeploymentHandleSource, DeploymentID, RequestMetadata
    from ray.serve.request_router import PendingRequest

    async def fulfilled() -> tuple[bool, Any]:
        router = PrefixRequestRouter(DeploymentID(name="server", app_name="app"), DeploymentHandleSource.UNKNOWN)
        router.initialize_state()
        older, newer = (PendingRequest(args=[], kwargs={}, metadata=RequestMetadata(request_id=key,
                                                                                    internal_request_id=key))
                        for key in ("older", "newer"))
        for request in (older, newer):
            router._pending_requests_to_fulfill.append(request)
            router._add_pending_request_to_indices(request)
        chosen = replica("b")
        router._fulfill_next_pending_request(chosen, newer.metadata)  # what Serve does with choose_replicas' pick
        return older.future.done(), newer.future.result() if newer.future.done() else None

    older_done, newer_got = asyncio.run(fulfilled())
    assert not older_done
    assert newer_got is not None and newer_got.replica_id.unique_id == "b"


@pytest.mark.parametrize("route", [None, "x", {"model": 1}, {"model": "tiny", "hashes": [1]},
                                   {"model": "tiny", "hashes": [], "conversation": 5},
                                   {"model": "", "hashes": [], "home": 7}])
def test_a_missing_or_malformed_route_is_routed_by_load(route: Any) -> None:
    assert routed_prompt(pending(route)) is None


def test_an_unknown_routing_is_refused_naming_the_known_ones(tmp_path: Any) -> None:
    from llama_cpp_server import Settings
    from llama_cpp_server.ray_serve import app_builder, deployment

    with pytest.raises(ValueError, match="routing must be one of prefix, pow2, round-robin, got 'fastest'"):
        deployment(Settings(model=str(tmp_path / "m.gguf")), routing="fastest")
    with pytest.raises(ValueError, match="routing must be one of"):
        app_builder({"model": str(tmp_path / "m.gguf"), "routing": "fastest"})


def test_a_prefix_just_sent_counts_as_held_until_the_statistics_have_had_time() -> None:
    now = [0.0]
    policy = PrefixRouting(rng=random.Random(4), sent_seconds=5.0, clock=lambda: now[0])
    first = prompt(SYSTEM + [1] * 8, "user-1")
    policy.routed(first, "b")  # the statistics do not show it yet
    second = prompt(SYSTEM + [2] * 8, "user-2")
    assert policy.rank([view("a", 0), view("b", 0), view("c", 0)], second)[0] == ["b"]
    now[0] = 6.0  # by now b's statistics hold it, or b let it go: no preference left, two random choices
    assert len(policy.rank([view("a", 0), view("b", 0), view("c", 0)], second)) == 2


def test_a_stored_response_goes_to_its_home_however_loaded_and_nowhere_else() -> None:
    """Its continuation, or a read of it, can only be answered where it is stored: the replica its id names."""
    policy = PrefixRouting(load_bound=1, rng=random.Random(4))
    replicas = [view("a", 0, SYSTEM), view("b", 9), view("c", 0)]
    needs_b = RoutedPrompt("", (), "", home_tag("b"))
    assert policy.rank(replicas, needs_b) == [["b"]]
    stuck = prompt(SYSTEM + [2], "user-2")  # a conversation that sticks to "a" is not taken there
    policy.routed(stuck, "a")
    assert policy.rank(replicas, RoutedPrompt("tiny", stuck.hashes, "user-2", home_tag("c"))) == [["c"]]
    gone = RoutedPrompt("", (), "", home_tag("d"))  # its replica died: placed as any other (and answered 404 there)
    assert sorted(rank[0] for rank in policy.rank(replicas, gone)) == ["a", "c"]  # two choices within the bound


def test_the_serve_router_reads_the_home_of_a_route() -> None:
    router = PrefixRequestRouter.__new__(PrefixRequestRouter)
    router._use_replica_queue_len_cache = False
    router.initialize_state(load_bound=1)
    a, b = replica("a", SYSTEM), replica("b")
    for _ in range(3):
        router.on_send_request(b.replica_id)
    route = {"model": "tiny", "hashes": list(hashes(SYSTEM)), "conversation": "", "home": home_tag("b")}
    assert asyncio.run(router.choose_replicas([a, b], pending(route))) == [[b]]
