"""Ray Serve's request-router API with the prefix policy (:mod:`.prefix_routing`): a replica is chosen by the
prefixes it holds, read from its routing statistics (``LlamaServer.record_routing_stats``).

A caller that routes by prefix passes the prompt's route as the keyword :data:`ROUTE_KEYWORD` of its handle call:
``{"model": name, "hashes": [...], "conversation": key, "home": tag}`` (the prompt's block hashes, computed once
with the replica's own tokenizer and chat template; the home of the stored response it needs, optional); a
request without it is routed by load alone (power of two choices).
The load is the router's own count of the requests placed on each replica and not completed, each counted from
the moment it is placed (its request id's entry): Serve's ``on_send_request`` comes only once the routing task has
handed the replica over, after other requests may have been routed on the old count.
"""

from __future__ import annotations

import collections
from typing import Any, List, Optional

import attrs
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


@attrs.frozen
class Placement:
    """Where a request went, and Serve's record of it (whose future says whether it was abandoned before it was
    sent)."""

    replica_id: str
    request: PendingRequest


class PrefixRequestRouter(RequestRouter):
    """Serve's request router for ``llama_cpp_server`` replicas; its ``request_router_kwargs`` are
    ``load_bound``, ``max_conversations`` and ``sent_seconds`` (:class:`.prefix_routing.PrefixRouting`).

    Not FIFO (Serve's ``FIFOMixin``): a replica chosen for one request's prefix and conversation goes to that
    request, where FIFO would hand it to the oldest one waiting, whose conversation then moves to it."""

    def initialize_state(self, load_bound: int = LOAD_BOUND, max_conversations: int = MAX_CONVERSATIONS,
                         sent_seconds: float = SENT_SECONDS, **kwargs: Any) -> None:
        self.policy = PrefixRouting(load_bound, max_conversations, sent_seconds=sent_seconds)
        self.placed: dict[str, Placement] = {}  # by Serve's internal request id, until the request completes

    async def choose_replicas(self, candidate_replicas: List[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> List[List[RunningReplica]]:
        """The policy's ranks; its first choice is taken as where the request goes (Serve tells a router
        where a request went only on some of its paths), corrected by :meth:`on_request_routed` when Serve
        does tell."""
        self._drop_abandoned()
        in_flight = collections.Counter(p.replica_id for p in self.placed.values())
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        views = [ReplicaView(key, in_flight[key], held_hashes(replica.routing_stats or {}))
                 for key, replica in by_id.items()]
        prompt = routed_prompt(pending_request)
        ranks = self.policy.rank(views, prompt)
        if ranks:
            self._place(pending_request, prompt, ranks[0][0])
        return [[by_id[key] for key in rank] for rank in ranks]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID,
                          result: Any) -> None:
        self._place(pending_request, routed_prompt(pending_request), replica_id.unique_id)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        placed = self.placed.get(internal_request_id)
        # (an attempt a replica refused can end after its request was placed again, elsewhere)
        if placed is not None and placed.replica_id == replica_id.unique_id:
            del self.placed[internal_request_id]

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.policy.forget(replica_id.unique_id)
        self.placed = {key: p for key, p in self.placed.items() if p.replica_id != replica_id.unique_id}

    def _place(self, request: Optional[PendingRequest], prompt: RoutedPrompt | None, replica_id: str) -> None:
        self.policy.routed(prompt, replica_id)
        if request is not None:
            self.placed[request.metadata.internal_request_id] = Placement(replica_id, request)

    def _drop_abandoned(self) -> None:
        """Requests cancelled while they waited for a replica: never sent, so never completed."""
        for key in [key for key, p in self.placed.items() if p.request.future.cancelled()]:
            del self.placed[key]


__all__ = ["Placement", "PrefixRequestRouter", "ROUTE_KEYWORD", "routed_prompt"]
