"""Scheduling policies: which waiting request gets the next free sequence, and which running one makes room.

The scheduler owns the mechanics (sequences, memory, snapshots); a policy only decides.  It sees every
request as a :class:`Ticket`, the few facts a decision needs, and answers two questions whenever
admission is due (a request arrived, finished or was cancelled):

- :meth:`Policy.select`: a sequence is free; which waiting ticket takes it (None: leave them waiting);
- :meth:`Policy.preempt`: no sequence is free and requests wait; which running ticket, if any, gives its
  sequence up.  The scheduler then snapshots that sequence (``llama_state_seq_get_data``, the same snapshot
  the prompt caches keep), frees it, and puts the request back among the waiting; when it is selected again
  its memory is put back and it goes on where it stopped: no token is evaluated twice and its output is the
  one an uninterrupted run gives.

:class:`Policy` itself is first come, first served, with no preemption: the engine's default, and the
``fcfs`` policy of the scheduling plugin.  A policy is chosen by name (``Llama(scheduling={"policy":
"priority"})``, registered through the ``llama_cpp_scheduling_policies`` hook) or passed as an object.

Requests carry a ``priority`` (an integer, lower runs sooner, as vLLM's) and a ``tenant`` (a name: whom the
request is served for; a server maps API keys to tenants).  ``create_completion(priority=..., tenant=...)``
sets them; for the requests a chat handler makes, ``create_chat_completion`` passes them on through
:func:`tagged`.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, NamedTuple, Sequence

import attrs


@attrs.define(eq=False)
class Ticket:
    """What a policy knows of one request.  The engine writes it; a policy only reads it.

    ``arrival`` orders requests by submission (unique, increasing).  ``n_decoded`` counts the batch rows
    decoded for the request (prompt and generated tokens alike: what it cost the engine);
    ``passed_over`` how many requests were admitted while it waited (what aging is measured in);
    ``preemptions`` how often it gave its sequence up.  ``preemptible`` is False for a running request the
    engine cannot suspend: one that continues its caller's sequence (``generate(reset=False)``, ``eval``),
    one whose choices share its prompt, one that keeps every logits row, or any under a step that drafts
    (its drafter mirrors the sequence).
    """

    arrival: int
    priority: int = 0
    tenant: str = ""
    n_prompt: int = 0
    n_decoded: int = 0
    passed_over: int = 0
    preemptions: int = 0
    preemptible: bool = True


class Policy:
    """First come, first served, never preempting: the contract's defaults (see the module's docstring).

    A policy's methods run on the thread that drives the engine, under its lock: keep them quick and free
    of I/O.  An exception ends the waiting requests the call was deciding about, with an error that names
    the policy; running requests are not touched.
    """

    name = "fcfs"

    def select(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        """The waiting ticket that takes the free sequence (one of ``waiting``), or None to leave them all
        waiting.  ``running`` are the tickets of the requests that hold sequences now."""
        return min(waiting, key=_by_arrival)

    def preempt(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        """No sequence is free: the running ticket (one of ``running`` with ``preemptible``) whose sequence
        is given up for the waiting ones, or None.  Asked again after each preemption, at most once per
        sequence per admission; a request admitted in the same round is never offered."""
        return None

    def admitted(self, ticket: Ticket) -> None:
        """``ticket`` took a sequence (first time, or resumed after a preemption)."""

    def finished(self, ticket: Ticket) -> None:
        """``ticket``'s request is over (finished, failed or cancelled); it is not seen again."""


def _by_arrival(ticket: Ticket) -> int:
    return ticket.arrival


class Tags(NamedTuple):
    """The scheduling fields of requests made inside a :func:`tagged` block."""

    priority: int | None = None
    tenant: str | None = None


_UNTAGGED = Tags()
_tags: contextvars.ContextVar[Tags] = contextvars.ContextVar("llama_cpp_scheduling_tags", default=_UNTAGGED)


@contextlib.contextmanager
def tagged(priority: int | None = None, tenant: str | None = None) -> Iterator[None]:
    """Requests made inside the block (in this context) get this priority and tenant, unless they set
    their own; None keeps what an enclosing block set."""
    outer = _tags.get()
    token = _tags.set(Tags(outer.priority if priority is None else check_priority(priority),
                           outer.tenant if tenant is None else check_tenant(tenant)))
    try:
        yield
    finally:
        _tags.reset(token)


def current_tags() -> Tags:
    return _tags.get()


def check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be an integer (lower runs sooner), got {priority!r}")
    return priority


MAX_TENANT_LENGTH = 256  # characters of a tenant's name (the server's ``user`` field is held to it too)


def check_tenant(tenant: object) -> str:
    if not isinstance(tenant, str) or len(tenant) > MAX_TENANT_LENGTH:
        raise ValueError(f"tenant must be a string of at most {MAX_TENANT_LENGTH} characters, got {tenant!r:.80}")
    return tenant
