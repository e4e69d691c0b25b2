"""Priorities with aging: lower ``priority`` runs sooner, and a waiting request moves up one level for
every ``aging`` requests admitted ahead of it, so a steady stream of urgent requests delays a less urgent
one by at most ``aging`` admissions per level between them, never forever."""

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

    def urgency(self, ticket: Ticket) -> tuple[int, int]:
        """Smaller is sooner: the priority less what waiting earned, then arrival."""
        earned = ticket.passed_over // self.aging if self.aging else 0
        return ticket.priority - earned, ticket.arrival

    def select(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        return min(waiting, key=self.urgency)

    def preempt(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        candidates = [t for t in running if t.preemptible]
        if not self.preemption or not candidates:
            return None
        urgent = self.urgency(min(waiting, key=self.urgency))[0]
        victim = max(candidates, key=self.urgency)
        return victim if self.urgency(victim)[0] > urgent else None
