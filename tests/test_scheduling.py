"""The scheduling contract in the core: a policy chosen by name or passed in, its failures contained,
the request fields it reads checked.  The built-in policies have their own tests (plugins/scheduling)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Sequence

import pytest

from llama_cpp import Llama
from llama_cpp.engine.policy import Policy, Ticket, tagged

PROMPT = "Once upon a time"


class BrokenOnNinetyNine(Policy):
    """First come, first served, until it is asked about a priority-99 request."""

    name = "broken"

    def select(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        if any(t.priority == 99 for t in waiting):
            raise ZeroDivisionError("no policy for 99")
        return super().select(waiting, running)


class Noting(Policy):
    """FCFS, remembering every ticket it was told about."""

    def __init__(self) -> None:
        self.admitted_tickets: list[Ticket] = []
        self.finished_tickets: list[Ticket] = []

    def admitted(self, ticket: Ticket) -> None:
        self.admitted_tickets.append(ticket)

    def finished(self, ticket: Ticket) -> None:
        self.finished_tickets.append(ticket)


def test_the_default_policy_is_first_come_first_served(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        assert type(llm.scheduling_policy) is Policy
    with Llama(str(tiny_model_path), vocab_only=True, verbose=False) as llm:
        assert llm.scheduling_policy is None


def test_a_policy_that_raises_ends_only_the_requests_it_was_deciding_about(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=512, n_seq_max=2, verbose=False, scheduling=BrokenOnNinetyNine()) as llm:
        expected = llm.create_completion(PROMPT, max_tokens=24, temperature=0.0)["choices"][0]["text"]
        running = llm.create_completion(PROMPT, max_tokens=24, temperature=0.0, stream=True)
        first = next(running)["choices"][0]["text"]
        with pytest.raises(RuntimeError, match=r"scheduling policy 'broken' failed in select\(\): no policy for 99"):
            llm.create_completion("doomed", max_tokens=4, priority=99)
        assert first + "".join(c["choices"][0]["text"] for c in running) == expected
        assert llm.create_completion(PROMPT, max_tokens=24, temperature=0.0)["choices"][0]["text"] == expected


def test_a_policy_answering_with_a_ticket_it_was_not_offered_is_refused(tiny_model_path: Path) -> None:
    class Stranger(Policy):
        name = "stranger"

        def select(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
            return Ticket(10**6)

    with Llama(str(tiny_model_path), n_ctx=256, verbose=False, scheduling=Stranger()) as llm:
        with pytest.raises(RuntimeError, match=r"select\(\) returned .* not one of the waiting tickets"):
            llm.create_completion(PROMPT, max_tokens=2)


def test_the_policy_hears_of_every_ticket_once_each_way(tiny_model_path: Path) -> None:
    policy = Noting()
    with Llama(str(tiny_model_path), n_ctx=512, n_seq_max=2, verbose=False, scheduling=policy) as llm:
        llm.create_completion([PROMPT, "In the beginning"], max_tokens=3, n=2, temperature=0.9, seed=3,
                              priority=4, tenant="team-a")
        stream = llm.create_completion(PROMPT, max_tokens=20, stream=True)
        next(stream)
        stream.close()  # cancelled: finished too
        llm.create_completion(PROMPT, max_tokens=2)
    assert len(policy.admitted_tickets) == 6
    assert {id(t) for t in policy.admitted_tickets} == {id(t) for t in policy.finished_tickets}
    tagged_tickets = [t for t in policy.admitted_tickets if t.tenant == "team-a"]
    assert len(tagged_tickets) == 4 and {t.priority for t in tagged_tickets} == {4}
    assert all(t.n_decoded > 0 for t in policy.finished_tickets)


def test_chat_requests_carry_priority_and_tenant_through_the_handler(tiny_model_path: Path) -> None:
    policy = Noting()
    with Llama(str(tiny_model_path), n_ctx=512, verbose=False, chat_format="chatml", scheduling=policy) as llm:
        llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, priority=-3, tenant="bob")
        for _chunk in llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, stream=True,
                                                 priority=2, tenant="dave"):
            pass
        with tagged(priority=7):
            llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, tenant="carol")
            llm.create_completion(PROMPT, max_tokens=2)
    assert [(t.priority, t.tenant) for t in policy.admitted_tickets] == [(-3, "bob"), (2, "dave"), (7, "carol"),
                                                                          (7, "")]


def test_policies_by_name_and_bad_choices(tiny_model_path: Path) -> None:
    path = str(tiny_model_path)
    with Llama(path, n_ctx=256, verbose=False, scheduling={"policy": "priority", "aging": 3}) as llm:
        assert llm.scheduling_policy.name == "priority" and llm.scheduling_policy.aging == 3
    with pytest.raises(ValueError, match="unknown scheduling policy 'lottery'; valid names: .*fair-share.*fcfs"):
        Llama(path, n_ctx=256, verbose=False, scheduling={"policy": "lottery"})
    with pytest.raises(ValueError, match="must name a plugin with the key 'policy'"):
        Llama(path, n_ctx=256, verbose=False, scheduling={"name": "fcfs"})
    with pytest.raises(ValueError, match="must be a llama_cpp.engine.policy.Policy"):
        Llama(path, n_ctx=256, verbose=False, scheduling=object())
    with pytest.raises(ValueError, match="aging must be a whole number"):
        Llama(path, n_ctx=256, verbose=False, scheduling={"policy": "priority", "aging": -1})


def test_from_config_takes_a_scheduling_table(tiny_model_path: Path, tmp_path: Path) -> None:
    config = tmp_path / "llama.toml"
    config.write_text(f'model_path = "{tiny_model_path}"\nn_ctx = 256\nverbose = false\n'
                      '[scheduling]\npolicy = "fair-share"\nweights = { alice = 2.0 }\n')
    with Llama.from_config(config) as llm:
        assert llm.scheduling_policy.name == "fair-share" and llm.scheduling_policy.weight("alice") == 2.0


@pytest.mark.parametrize("kwargs, message", [
    ({"priority": "high"}, "priority must be an integer"),
    ({"priority": True}, "priority must be an integer"),
    ({"tenant": 5}, "tenant must be a string"),
    ({"tenant": "x" * 300}, "tenant must be a string of at most 256"),
])
def test_bad_scheduling_fields_are_refused(tiny_model_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        with pytest.raises(ValueError, match=message):
            llm.create_completion(PROMPT, max_tokens=2, **kwargs)


def test_a_suspended_request_that_is_cancelled_is_freed(tiny_model_path: Path) -> None:
    """Preempted, then closed before it resumed: its sampler and ticket go, the engine goes on."""

    class PreemptForUrgent(Noting):
        def preempt(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
            if min(t.priority for t in waiting) < min(t.priority for t in running):
                return max((t for t in running if t.preemptible), key=lambda t: t.priority, default=None)
            return None

        def select(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
            return min(waiting, key=lambda t: (t.priority, t.arrival))

    policy = PreemptForUrgent()
    with Llama(str(tiny_model_path), n_ctx=512, verbose=False, scheduling=policy) as llm:
        low = llm.create_completion(PROMPT, max_tokens=40, stream=True, priority=5)
        next(low)
        done: list[Any] = []
        urgent = threading.Thread(target=lambda: done.append(llm.create_completion(
            "urgent", max_tokens=2, priority=0)))
        urgent.start()
        urgent.join(timeout=600)
        assert llm.scheduler.counters.n_preemptions == 1 and done
        low.close()  # still suspended: never resumed
        assert llm.create_completion(PROMPT, max_tokens=2)["choices"][0]["finish_reason"] == "length"
        assert not llm.scheduler.waiting
    assert {id(t) for t in policy.admitted_tickets} <= {id(t) for t in policy.finished_tickets}
    assert len(policy.finished_tickets) == 3
