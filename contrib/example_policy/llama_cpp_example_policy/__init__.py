"""An example third-party scheduling policy: the waiting request with the shortest prompt goes first.

Short prompts cost little to evaluate, so taking them first lowers the mean time to first token when
many requests wait (at the price of long prompts waiting longer; ``max_wait`` bounds that: a request
passed over that many times goes next regardless).  Chosen by name::

    Llama(model_path, n_seq_max=4, scheduling={"policy": "shortest-prompt-first", "max_wait": 8})
"""

from __future__ import annotations

from typing import Sequence

from llama_cpp import hookimpl
from llama_cpp.engine.policy import Policy, Ticket
from llama_cpp.plugins import SchedulingPolicy

__all__ = ["ShortestPromptFirst"]


class ShortestPromptFirst(Policy):
    """See the module's docstring.  Never preempts (the base class's ``preempt``)."""

    name = "shortest-prompt-first"

    def __init__(self, max_wait: int = 16) -> None:
        if isinstance(max_wait, bool) or not isinstance(max_wait, int) or max_wait < 1:
            raise ValueError(f"max_wait must be an integer >= 1 (admissions a request may be passed over), "
                             f"got {max_wait!r}")
        self.max_wait = max_wait

    def select(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        overdue = [t for t in waiting if t.passed_over >= self.max_wait]
        if overdue:
            return min(overdue, key=lambda t: t.arrival)
        return min(waiting, key=lambda t: (t.n_prompt, t.arrival))


@hookimpl
def llama_cpp_scheduling_policies() -> list[SchedulingPolicy]:
    return [SchedulingPolicy(name="shortest-prompt-first", factory=ShortestPromptFirst,
                             description="the shortest waiting prompt first; none passed over more than max_wait")]
