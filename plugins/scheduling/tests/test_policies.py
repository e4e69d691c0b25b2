"""The built-in policies decide on tickets alone: no model, no engine."""

from __future__ import annotations

import pytest

from llama_cpp.engine.policy import Policy, Ticket
from llama_cpp_scheduling import FairSharePolicy, PriorityPolicy


def tickets(*specs: tuple[int, str], start: int = 0) -> list[Ticket]:
    """Tickets of (priority, tenant), arriving in order."""
    return [Ticket(start + i, priority=p, tenant=t) for i, (p, t) in enumerate(specs)]


def test_fcfs_takes_the_oldest_and_never_preempts() -> None:
    waiting = tickets((5, "a"), (0, "b"), (9, "c"))
    waiting.reverse()
    policy = Policy()
    assert policy.select(waiting, []) is waiting[-1]
    assert policy.preempt(waiting, tickets((9, "x"), start=10)) is None


def test_priority_takes_the_most_urgent_then_the_oldest() -> None:
    waiting = tickets((5, ""), (1, ""), (1, ""), (3, ""))
    assert PriorityPolicy().select(waiting, []) is waiting[1]


def test_aging_moves_a_waiting_request_up_one_level_per_aging_admissions() -> None:
    policy = PriorityPolicy(aging=2)
    old, new = Ticket(0, priority=3), Ticket(9, priority=0)
    old.passed_over = 5  # two levels earned: urgency 1
    assert policy.select([old, new], []) is new
    old.passed_over = 6  # three levels: urgency 0, and older
    assert policy.select([old, new], []) is old
    assert PriorityPolicy(aging=0).select([old, new], []) is new  # strict priorities


def test_aging_stops_at_the_most_urgent_level_present() -> None:
    """Urgent requests age too, but never past level 0 here: once the patient one is level, it is older."""
    policy = PriorityPolicy(aging=1)
    patient, urgent = Ticket(0, priority=10), Ticket(5, priority=0)
    patient.passed_over, urgent.passed_over = 10, 50
    assert policy.select([urgent, patient], []) is patient


def test_priority_preempts_the_least_urgent_running_request_only_for_a_strictly_more_urgent_one() -> None:
    policy = PriorityPolicy()
    running = tickets((2, ""), (7, ""), (7, ""), start=0)
    assert policy.preempt(tickets((0, ""), start=10), running) is running[2]  # least urgent, newest
    assert policy.preempt(tickets((7, ""), start=10), running) is None  # a tie never preempts
    running[2].preemptible = running[1].preemptible = False
    assert policy.preempt(tickets((0, ""), start=10), running) is running[0]
    assert PriorityPolicy(preemption=False).preempt(tickets((0, ""), start=10), running) is None


def test_an_aged_running_request_keeps_its_sequence() -> None:
    policy = PriorityPolicy(aging=1)
    aged = Ticket(0, priority=10)
    aged.passed_over = 10  # admitted at urgency 0
    assert policy.preempt(tickets((0, ""), start=5), [aged]) is None


def test_fair_share_gives_a_free_sequence_to_the_tenant_that_got_least() -> None:
    policy = FairSharePolicy()
    running = tickets((0, "big"), (0, "big"))
    running[0].n_decoded = running[1].n_decoded = 50
    waiting = tickets((0, "big"), (0, "big"), (0, "small"), start=2)
    assert policy.select(waiting, running) is waiting[2]


def test_fair_share_weights_scale_the_usage() -> None:
    policy = FairSharePolicy(weights={"gold": 4})
    running = tickets((0, "gold"), (0, "plain"))
    running[0].n_decoded, running[1].n_decoded = 300, 100  # per weight: 75 and 100
    waiting = tickets((0, "plain"), (0, "gold"), start=2)
    assert policy.select(waiting, running) is waiting[1]


def test_fair_share_takes_a_seat_back_without_churn() -> None:
    policy = FairSharePolicy()
    running = tickets((0, "big"), (0, "big"), (0, "big"), (0, "small"))
    waiting = tickets((0, "other"), start=4)
    victim = policy.preempt(waiting, running)
    assert victim is running[2]  # the newest of the tenant holding most
    balanced = tickets((0, "big"), (0, "big"), (0, "small"), (0, "other"))
    assert policy.preempt(tickets((0, "small"), start=9), balanced) is None  # 2-1 would become 1-2: no gain
    assert FairSharePolicy(preemption=False).preempt(waiting, running) is None


def test_a_tenant_back_from_idle_cannot_bank_its_idle_time() -> None:
    policy = FairSharePolicy()
    busy = tickets((0, "a"))
    busy[0].n_decoded = 1000
    waiting = tickets((0, "a"), start=1)
    policy.select(waiting, busy)  # "a" is busy, "b" has not been seen
    newcomer = Ticket(5, tenant="b")
    a_next = Ticket(6, tenant="a")
    policy.select([newcomer, a_next], busy)
    usage = policy.usage(busy, [newcomer, a_next])
    assert usage["b"] == pytest.approx(1000.0)  # starts at the busy tenant's usage, not at zero


def test_finished_requests_count_for_their_tenant() -> None:
    policy = FairSharePolicy()
    done = Ticket(0, tenant="a")
    policy.select([done], [])
    done.n_decoded = 40
    policy.finished(done)
    assert policy.usage([], [Ticket(1, tenant="a")])["a"] == 40


@pytest.mark.parametrize("options, message", [
    ({"aging": -1}, "aging must be a whole number"),
    ({"aging": 1.5}, "aging must be a whole number"),
])
def test_priority_options_are_checked(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PriorityPolicy(**options)


@pytest.mark.parametrize("options, message", [
    ({"weights": {"a": 0}}, r"weights\['a'\] must be a positive number"),
    ({"weights": {"a": float("inf")}}, "must be a positive number"),
    ({"default_weight": -2}, "default_weight must be a positive number"),
])
def test_fair_share_options_are_checked(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FairSharePolicy(**options)


def test_fair_share_seats_first_then_usage_decides() -> None:
    policy = FairSharePolicy()
    running = tickets((0, "a"), (0, "b"), (0, "b"))
    running[0].n_decoded = 500  # "a" has decoded far more, but holds fewer sequences
    waiting = tickets((0, "b"), (0, "a"), start=3)
    assert policy.select(waiting, running) is waiting[1]
    even = tickets((0, "a"), (0, "b"))
    even[0].n_decoded, even[1].n_decoded = 500, 10  # the same seats: the one left over goes by usage
    assert policy.select(tickets((0, "a"), (0, "b"), start=3), even).tenant == "b"
