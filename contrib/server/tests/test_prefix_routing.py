"""The prefix-routing policy and its Ray Serve request router, without a cluster: fake replicas with routing
statistics as ``LlamaServer.record_routing_stats`` reports them (the Ray Serve tests run it on a local cluster)."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from llama_cpp.engine.prefix_summary import block_hashes, chain_start
from ray.serve._private.common import DeploymentHandleSource, DeploymentID, ReplicaID
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
    return SimpleNamespace(replica_id=ReplicaID(unique_id, DeploymentID(name="server", app_name="app")),
                           routing_stats=stats)


REQUEST_IDS = itertools.count(1)


def pending(route: Any) -> Any:
    """A request as Serve's router hooks see it: its kwargs, its internal id and its future."""
    return SimpleNamespace(kwargs={ROUTE_KEYWORD: route} if route is not None else {},
                           metadata=SimpleNamespace(internal_request_id=f"r{next(REQUEST_IDS)}"),
                           future=SimpleNamespace(cancelled=lambda: False))


def serve_router(**kwargs: Any) -> PrefixRequestRouter:
    """The router as Serve builds it for a deployment, with no replicas: its hooks are called here as Serve would."""
    router = PrefixRequestRouter(DeploymentID(name="server", app_name="app"), DeploymentHandleSource.UNKNOWN)
    router.initialize_state(**kwargs)
    return router


def choose(router: PrefixRequestRouter, replicas: list[Any], request: Any) -> list[list[Any]]:
    return asyncio.run(router.choose_replicas(replicas, request))


def completed(router: PrefixRequestRouter, replica: Any, request: Any) -> None:
    router.on_request_completed(replica.replica_id, request.metadata.internal_request_id)


def test_the_serve_router_counts_a_request_from_its_placement_to_its_completion() -> None:
    """Counted when chosen, not when Serve says it was sent (that comes after other requests may have been
    routed): two new chats routed back to back do not both see the holder idle."""
    router = serve_router(load_bound=1)
    a, b = replica("a"), replica("b", SYSTEM)
    route = {"model": "tiny", "hashes": list(hashes(SYSTEM + [3])), "conversation": "u"}
    first, second = pending(route), pending({**route, "conversation": "v"})
    assert choose(router, [a, b], first)[0] == [b]
    assert choose(router, [a, b], second)[0] == [b]  # one in flight on b: within the bound
    third = pending({**route, "conversation": "w"})
    assert choose(router, [a, b], third) == [[a]]  # two on b, none sent yet: only a is within the bound
    assert choose(router, [a, b], pending(route)) == [[b]]  # "u" sticks, however loaded
    for request in (first, second):
        completed(router, b, request)
    completed(router, a, third)
    # b has one left, "u"'s second turn; a holds the prefix too ("w" was sent there) and is idle
    assert choose(router, [a, b], pending({**route, "conversation": "x"}))[0] == [a]


def test_a_request_abandoned_before_it_was_sent_or_refused_is_counted_where_it_went_last() -> None:
    router = serve_router(load_bound=0)
    a, b = replica("a", SYSTEM), replica("b")
    route = {"model": "tiny", "hashes": list(hashes(SYSTEM + [3])), "conversation": ""}
    abandoned = pending(route)
    assert choose(router, [a, b], abandoned)[0] == [a]
    abandoned.future.cancelled = lambda: True  # its caller went away while it waited for a replica
    refused = pending(route)
    assert choose(router, [a, b], refused)[0] == [a]  # the abandoned one no longer counts
    router.on_request_routed(refused, b.replica_id, None)  # a refused it; Serve placed it on b
    completed(router, a, refused)  # the refused attempt ends: the request is still in flight on b
    assert router.placed[refused.metadata.internal_request_id].replica_id == "b"
    on_a = pending({**route, "hashes": []})
    assert choose(router, [a, b], on_a)[0] == [a]
    router.on_replica_actor_died(b.replica_id)
    assert router.placed.keys() == {on_a.metadata.internal_request_id}


def test_the_replica_chosen_for_a_request_goes_to_that_request_not_the_oldest_waiting() -> None:
    """Serve's FIFO matching gave a replica chosen for one chat's route to whichever request had waited longest,
    moving that one's chat (CI saw a chat answered by two replicas); the router matches by request id."""
    from ray.serve._private.common import RequestMetadata
    from ray.serve.request_router import PendingRequest

    async def fulfilled() -> tuple[bool, Any]:
        router = serve_router()
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
    router = serve_router(load_bound=1)
    a, b = replica("a", SYSTEM), replica("b")
    for _ in range(3):
        choose(router, [b], pending(None))
    route = {"model": "tiny", "hashes": list(hashes(SYSTEM)), "conversation": "", "home": home_tag("b")}
    assert choose(router, [a, b], pending(route)) == [[b]]
