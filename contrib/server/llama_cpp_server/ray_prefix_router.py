"""Ray Serve's request-router API with the prefix policy (:mod:`.prefix_routing`): a replica is chosen by the
prefixes it holds, read from its routing statistics (``LlamaServer.record_routing_stats``).

A caller that routes by prefix passes the prompt's route as the keyword :data:`ROUTE_KEYWORD` of its handle call:
``{"model": name, "hashes": [...], "conversation": key, "home": tag}`` (the prompt's block hashes, computed once
with the replica's own tokenizer and chat template; the home of the stored response it needs, optional); a
request without it is routed by load alone (power of two choices).
The load is the router's own count of the requests sent to each replica that have not completed (the API's
``on_send_request`` and ``on_request_completed`` hooks).
"""

from __future__ import annotations

import collections
from typing import Any, List, Optional

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from .prefix_routing import (LOAD_BOUND, MAX_CONVERSATIONS, SENT_SECONDS, PrefixRouting, ReplicaView, RoutedPrompt,
                             held_hashes)

#: The handle-call keyword that carries a request's route.
ROUTE_KEYWORD = "llama_cpp_route"


def routed_prompt(request: Optional[PendingRequest]) -> RoutedPrompt | None:
    """The route a pending request carries (None: none, or a malformed one: it is routed by load)."""
    route = request.kwargs.get(ROUTE_KEYWORD) if request is not None else None
    if not isinstance(route, dict) or not isinstance(route.get("model"), str):
        return None
    hashes = route.get("hashes")
    conversation = route.get("conversation", "")
    home = route.get("home") or ""
    if not isinstance(hashes, (list, tuple)) or not all(isinstance(h, str) for h in hashes) or \
            not isinstance(conversation, str) or not isinstance(home, str):
        return None
    return RoutedPrompt(route["model"], tuple(hashes), conversation, home)


class PrefixRequestRouter(RequestRouter):
    """Serve's request router for ``llama_cpp_server`` replicas; its ``request_router_kwargs`` are
    ``load_bound``, ``max_conversations`` and ``sent_seconds`` (:class:`.prefix_routing.PrefixRouting`).

    Not FIFO (Serve's ``FIFOMixin``): a replica chosen for one request's prefix and conversation goes to that
    request, where FIFO would hand it to the oldest one waiting, whose conversation then moves to it."""

    def initialize_state(self, load_bound: int = LOAD_BOUND, max_conversations: int = MAX_CONVERSATIONS,
                         sent_seconds: float = SENT_SECONDS, **kwargs: Any) -> None:
        self.policy = PrefixRouting(load_bound, max_conversations, sent_seconds=sent_seconds)
        self.in_flight: collections.Counter[str] = collections.Counter()

    async def choose_replicas(self, candidate_replicas: List[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> List[List[RunningReplica]]:
        """The policy's ranks; its first choice is taken as where the request goes (Serve tells a router
        where a request went only on some of its paths), corrected by :meth:`on_request_routed` when Serve
        does tell."""
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        views = [ReplicaView(key, self.in_flight[key], held_hashes(replica.routing_stats or {}))
                 for key, replica in by_id.items()]
        prompt = routed_prompt(pending_request)
        ranks = self.policy.rank(views, prompt)
        if ranks:
            self.policy.routed(prompt, ranks[0][0])
        return [[by_id[key] for key in rank] for rank in ranks]

    def on_send_request(self, replica_id: ReplicaID) -> None:
        super().on_send_request(replica_id)
        self.in_flight[replica_id.unique_id] += 1

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID,
                          result: Any) -> None:
        self.policy.routed(routed_prompt(pending_request), replica_id.unique_id)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        key = replica_id.unique_id
        if self.in_flight[key] > 0:
            self.in_flight[key] -= 1

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.policy.forget(replica_id.unique_id)
        self.in_flight.pop(replica_id.unique_id, None)


__all__ = ["PrefixRequestRouter", "ROUTE_KEYWORD", "routed_prompt"]
