"""Which replica a prompt goes to: the one holding the longest prefix of it, within a load bound.

Each replica publishes what its engines can reuse as chained block hashes (:mod:`llama_cpp.engine.prefix_summary`,
``GET /prefixes``, Ray Serve's routing statistics).  A router that has the prompt's own block hashes (tokenized
once, with the chat template the replica renders) ranks the replicas by this policy:

0. **Home.** A request that continues a stored response, or reads or deletes one, goes to the replica that
   stored it (its id carries the replica's home tag, :func:`.response_store.home_of`), however loaded, and to no
   other when that one is full: no other replica has it.  If none of the replicas is its home (it died), the
   rules below place it, and that replica answers that it has no such response.
1. **Stickiness.** A conversation (the caller's key for it) goes back to the replica that served its last turn,
   which holds that turn's whole prompt and reply even before its statistics say so (they are polled), while that
   replica is alive, however loaded, and to no other while it is full or slow to say how full it is (the request
   waits, as for a home): moving it would cost its whole history, and the load bound already spread the
   conversations when they started.
2. **Prefix.** Otherwise the replica holding the most leading blocks of the prompt, if it holds any: the least
   loaded of those that hold the most.  What a replica holds is what its statistics say, and the blocks of the
   prompts sent to it in the last ``sent_seconds`` (the statistics are polled: the second user of a system
   prompt, a moment after the first, should find it where the first went).
3. **Load.** Otherwise, or when the best holder's load exceeds the least loaded replica's by more than
   ``load_bound`` requests in flight, the power of two choices among the replicas within that bound: two at
   random, the less loaded first.

Replicas that die or scale in leave the candidates the router is given, and :meth:`PrefixRouting.forget` drops
their conversations.  The policy knows nothing of Ray: :mod:`.ray_prefix_router` adapts it to Serve's request
router API, and any other balancer can use it with ``GET /prefixes``.
"""

from __future__ import annotations

import collections
import random
import time
from typing import Callable, Container, Mapping, Sequence

import attrs

from .response_store import home_tag

#: In-flight requests by which the replica holding a prefix may exceed the least loaded one and still get it.
LOAD_BOUND = 4
#: Conversations remembered for stickiness (the least recently routed are forgotten first).
MAX_CONVERSATIONS = 100_000
#: How long the blocks of a prompt sent to a replica count as held there without its statistics saying so (two of
#: Serve's statistics periods), and how many of them are remembered per replica.
SENT_SECONDS = 20.0
MAX_SENT_HASHES = 4096


@attrs.frozen
class RoutedPrompt:
    """What a router knows of a request: the model it names, its prompt's block hashes (shallowest first), the
    conversation it belongs to ("" when none is known) and the home of the stored response it needs ("" for
    none)."""

    model: str
    hashes: tuple[str, ...]
    conversation: str = ""
    home: str = ""


@attrs.frozen
class ReplicaView:
    """One candidate replica: its id, the requests it has in flight, and the block hashes each loaded model holds
    (by the model's served name)."""

    replica_id: str
    load: int
    held: Mapping[str, frozenset[str]] = attrs.field(factory=dict)

    def prefix_blocks(self, prompt: RoutedPrompt, sent: Container[str] = ()) -> int:
        """How many leading blocks of the prompt this replica holds (by its statistics, or by ``sent``: the
        blocks of prompts sent to it since)."""
        known = self.held.get(prompt.model, frozenset())
        n = 0
        for value in prompt.hashes:
            if value not in known and value not in sent:
                break
            n += 1
        return n


def held_hashes(routing_stats: Mapping[str, object]) -> dict[str, frozenset[str]]:
    """A replica's routing statistics (``LlamaServer.record_routing_stats``: ``{"prefixes": [{"name", "hashes",
    ...}]}``) as the hashes each model holds; malformed entries are skipped (statistics are hints)."""
    out: dict[str, frozenset[str]] = {}
    entries = routing_stats.get("prefixes")
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("hashes"), list):
            out[entry["name"]] = frozenset(h for h in entry["hashes"] if isinstance(h, str))
    return out


class PrefixRouting:
    """The policy (see the module's docstring); one per router, not thread-safe (a router runs on one loop)."""

    def __init__(self, load_bound: int = LOAD_BOUND, max_conversations: int = MAX_CONVERSATIONS,
                 rng: random.Random | None = None, sent_seconds: float = SENT_SECONDS,
                 max_sent_hashes: int = MAX_SENT_HASHES, clock: Callable[[], float] = time.monotonic) -> None:
        if load_bound < 0:
            raise ValueError(f"load_bound must be at least 0, got {load_bound}")
        if max_conversations < 0:
            raise ValueError(f"max_conversations must be at least 0, got {max_conversations}")
        self.load_bound = load_bound
        self.max_conversations = max_conversations
        self._rng = rng or random.Random()
        self._sticky: collections.OrderedDict[str, str] = collections.OrderedDict()  # conversation -> replica
        # replica -> the block hashes of prompts sent to it and when, the most recent last
        self._sent: dict[str, collections.OrderedDict[str, float]] = {}
        self.sent_seconds = sent_seconds
        self.max_sent_hashes = max_sent_hashes
        self._clock = clock

    def rank(self, replicas: Sequence[ReplicaView], prompt: RoutedPrompt | None) -> list[list[str]]:
        """Replica ids in ranks of one, the most preferred first (Serve tries them in turn while the preferred
        ones are full): the choice is the policy's, so that a router knows where a request went when it
        chooses."""
        if not replicas:
            return []
        least = min(r.load for r in replicas)
        within = [r for r in replicas if r.load <= least + self.load_bound]
        if prompt is not None:
            home = next((r for r in replicas if home_tag(r.replica_id) == prompt.home), None) if prompt.home else None
            if home is not None:  # the only one that can answer: the request waits for it when it is full
                return [[home.replica_id]]
            sticky = self._sticky.get(prompt.conversation) if prompt.conversation else None
            if sticky is not None and any(r.replica_id == sticky for r in replicas):  # waits for it too: moving costs the history
                return [[sticky]]
            depth = {r.replica_id: r.prefix_blocks(prompt, self._recent(r.replica_id)) for r in within}
            best = max(depth.values())
            if best > 0:
                chosen = min((r for r in within if depth[r.replica_id] == best), key=lambda r: r.load)
                rest = [r for r in replicas if r.replica_id != chosen.replica_id]
                return [[chosen.replica_id], *self._two_choices(rest)]
        return self._two_choices(within)

    def routed(self, prompt: RoutedPrompt | None, replica_id: str) -> None:
        """The request went to ``replica_id``: its conversation's next turns go there too, and its prefix counts
        as held there until the replica's statistics are read again."""
        if prompt is None:
            return
        sent, now = self._sent.setdefault(replica_id, collections.OrderedDict()), self._clock()
        for value in prompt.hashes:
            sent[value] = now
            sent.move_to_end(value)
        while len(sent) > self.max_sent_hashes:
            sent.popitem(last=False)
        if not prompt.conversation or self.max_conversations == 0:
            return
        self._sticky[prompt.conversation] = replica_id
        self._sticky.move_to_end(prompt.conversation)
        while len(self._sticky) > self.max_conversations:
            self._sticky.popitem(last=False)

    def forget(self, replica_id: str) -> None:
        """The replica is gone: its conversations go where the policy sends them next."""
        self._sent.pop(replica_id, None)
        for conversation in [c for c, r in self._sticky.items() if r == replica_id]:
            del self._sticky[conversation]

    def _recent(self, replica_id: str) -> Container[str]:
        """The block hashes sent to the replica within ``sent_seconds`` (older ones are in its statistics by now,
        or were evicted there)."""
        sent = self._sent.get(replica_id)
        if not sent:
            return ()
        horizon = self._clock() - self.sent_seconds
        while sent and next(iter(sent.values())) < horizon:
            sent.popitem(last=False)
        return sent

    def _two_choices(self, replicas: list[ReplicaView]) -> list[list[str]]:
        """Two at random, the less loaded first, each a rank of its own."""
        pair = self._rng.sample(replicas, min(2, len(replicas)))
        pair.sort(key=lambda r: r.load)
        return [[r.replica_id] for r in pair]


__all__ = ["LOAD_BOUND", "MAX_CONVERSATIONS", "MAX_SENT_HASHES", "SENT_SECONDS", "PrefixRouting", "ReplicaView", "RoutedPrompt", "held_hashes"]
