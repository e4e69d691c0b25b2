"""Scheduling policies for llama_cpp, as a plugin.

Registers ``fcfs`` (the engine's default: arrival order, no preemption),
``priority`` (lower ``priority`` first, aging so nothing starves, preemption)
and ``fair-share`` (weighted fair queuing between tenants, preemption):
``Llama(scheduling={"policy": "fair-share", "weights": {"alice": 2}})``.
"""

from __future__ import annotations

from llama_cpp import hookimpl
from llama_cpp.engine.policy import Policy
from llama_cpp.plugins import SchedulingPolicy

from .fair_share import FairSharePolicy
from .priority import PriorityPolicy

__all__ = ["FairSharePolicy", "PriorityPolicy"]


@hookimpl
def llama_cpp_scheduling_policies() -> list[SchedulingPolicy]:
    return [
        SchedulingPolicy(name="fcfs", factory=Policy,
                         description="first come, first served; a running request runs to its end (the default)"),
        SchedulingPolicy(name="priority", factory=PriorityPolicy,
                         description="lower priority first, aging by `aging` admissions per level; preempts a "
                                     "less urgent running request for a more urgent one (`preemption`)"),
        SchedulingPolicy(name="fair-share", factory=FairSharePolicy,
                         description="weighted fair queuing between tenants (`weights`): each gets its share of "
                                     "sequences and of decoded tokens; preempts to hand a share back"),
    ]
