"""Priorities with aging: lower ``priority`` runs sooner, and a waiting request moves up one level for
every ``aging`` requests admitted ahead of it, up to the most urgent level among the requests present
(aging never makes a request more urgent than the most urgent one, so the requests of that level, which
age too, cannot run away from it).  Once level, the older request goes first: a steady stream of urgent
requests delays a less urgent one by at most ``aging`` admissions per level between them, plus the
requests of that level that arrived before it, never forever."""

from __future__ import annotations

from typing import Sequence

from llama_cpp.engine.policy import Policy, Ticket


class PriorityPolicy(Policy):
    """See the module's docstring.  ``aging=0`` turns aging off (strict priorities: a less urgent request
    can wait forever).  With ``preemption`` a waiting request preempts the least urgent running one when
    it is strictly more urgent (ties never preempt, so an aged request keeps the sequence it earned)."""

    name = "priority"

    def __init__(self, aging: int = 4, preemption: bool = True) -> None:
        if isinstance(aging, bool) or not isinstance(aging, int) or aging < 0:
            raise ValueError(f"aging must be a whole number of admissions per priority level (0: no aging), "
                             f"got {aging!r}")
        self.aging = aging
        self.preemption = bool(preemption)

    def urgency(self, ticket: Ticket, floor: int) -> tuple[int, int]:
        """Smaller is sooner: the priority less what waiting earned (down to ``floor``, the most urgent
        priority present), then arrival."""
        earned = ticket.passed_over // self.aging if self.aging else 0
        return max(ticket.priority - earned, floor), ticket.arrival

    def select(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        floor = min(t.priority for t in (*waiting, *running))
        return min(waiting, key=lambda t: self.urgency(t, floor))

    def preempt(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        candidates = [t for t in running if t.preemptible]
        if not self.preemption or not candidates:
            return None
        floor = min(t.priority for t in (*waiting, *running))
        urgent = min(self.urgency(t, floor)[0] for t in waiting)
        victim = max(candidates, key=lambda t: self.urgency(t, floor))
        return victim if self.urgency(victim, floor)[0] > urgent else None
