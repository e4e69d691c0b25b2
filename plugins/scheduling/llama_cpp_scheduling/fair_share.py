"""Weighted fair queuing between tenants.

Each tenant's *seats* are the sequences it holds, and its *usage* the batch rows decoded for it (prompt and
generated tokens: what it cost the engine), both divided by its weight.  A free sequence goes to the
waiting tenant with the fewest seats, and among those to the one with the least usage (then the oldest
request), so sequences are shared by weight and the one left over goes round by usage: over a busy
period every backlogged tenant gets decoded tokens in proportion to its weight, whatever the others
send.  A tenant that was idle starts again at the least usage among the busy ones (it cannot bank idle
time, as in start-time fair queuing).

With ``preemption`` the waiting tenant that would be served next also takes a sequence back from the
tenant holding the most seats, when that one would still hold at least as many after the move; the
same order decides both, so a sequence taken back goes to the tenant it was taken for, and no two
tenants can pass one back and forth.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from llama_cpp.engine.policy import Policy, Ticket


class FairSharePolicy(Policy):
    """See the module's docstring.  ``weights`` maps tenant names to positive weights; a tenant not in it
    weighs ``default_weight``."""

    name = "fair-share"

    def __init__(self, weights: Mapping[str, float] | None = None, default_weight: float = 1.0,
                 preemption: bool = True) -> None:
        self.weights = {str(k): _positive(f"weights[{k!r}]", v) for k, v in dict(weights or {}).items()}
        self.default_weight = _positive("default_weight", default_weight)
        self.preemption = bool(preemption)
        self._finished: dict[str, float] = {}  # tokens decoded for each tenant's finished requests
        self._live: dict[int, str] = {}  # arrival -> tenant of every ticket seen and not finished

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, self.default_weight)

    def usage(self, running: Sequence[Ticket], waiting: Sequence[Ticket]) -> dict[str, float]:
        """Tokens decoded per weight for every tenant with a ticket here: its finished requests and those
        alive now."""
        decoded: dict[str, float] = {}
        for ticket in (*running, *waiting):
            decoded[ticket.tenant] = decoded.get(ticket.tenant, self._finished.get(ticket.tenant, 0.0)) \
                + ticket.n_decoded
        return {tenant: n / self.weight(tenant) for tenant, n in decoded.items()}

    def seats(self, running: Sequence[Ticket]) -> dict[str, float]:
        """Sequences held per weight, by tenant (tenants holding none are absent)."""
        held: dict[str, int] = {}
        for ticket in running:
            held[ticket.tenant] = held.get(ticket.tenant, 0) + 1
        return {tenant: n / self.weight(tenant) for tenant, n in held.items()}

    def select(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        self._observe(waiting, running)
        return self._next(waiting, self.seats(running), self.usage(running, waiting))

    def preempt(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        self._observe(waiting, running)
        if not self.preemption:
            return None
        seats, usage = self.seats(running), self.usage(running, waiting)
        claimant = self._next(waiting, seats, usage).tenant
        holders = {t.tenant for t in running if t.preemptible and t.tenant != claimant}
        if not holders:
            return None
        holder = max(holders, key=lambda tenant: (seats[tenant], usage[tenant]))
        if seats[holder] - 1 / self.weight(holder) < seats.get(claimant, 0.0) + 1 / self.weight(claimant):
            return None  # the move would leave the holder with fewer than the claimant: no gain, only churn
        return max((t for t in running if t.preemptible and t.tenant == holder), key=lambda t: t.arrival)

    @staticmethod
    def _next(waiting: Sequence[Ticket], seats: dict[str, float], usage: dict[str, float]) -> Ticket:
        """The waiting ticket served next: its tenant's fewest seats, then least usage, then arrival."""
        return min(waiting, key=lambda t: (seats.get(t.tenant, 0.0), usage[t.tenant], t.arrival))

    def finished(self, ticket: Ticket) -> None:
        if self._live.pop(ticket.arrival, None) is not None:
            self._finished[ticket.tenant] = self._finished.get(ticket.tenant, 0.0) + ticket.n_decoded

    def _observe(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> None:
        """Note new tickets; a tenant that comes back from idle starts at the least usage of the busy ones."""
        new = [t for t in (*running, *waiting) if t.arrival not in self._live]
        if not new:
            return
        busy = set(self._live.values())
        usage = self.usage(running, waiting) if busy else {}
        for ticket in new:
            if ticket.tenant not in busy and busy:
                floor = min(usage.get(tenant, self._finished.get(tenant, 0.0) / self.weight(tenant))
                            for tenant in busy) * self.weight(ticket.tenant)
                self._finished[ticket.tenant] = max(self._finished.get(ticket.tenant, 0.0), floor)
            self._live[ticket.arrival] = ticket.tenant
            busy.add(ticket.tenant)


def _positive(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    return float(value)
