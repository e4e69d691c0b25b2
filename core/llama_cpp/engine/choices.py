"""Choices made by separate calls that share one prompt evaluation.

``create_completion(n=...)`` submits its ``n`` engine requests together: the first evaluates the prompt
and the others fork from it (they copy its memory and sample their first token from the same logits
row).  Some callers make ``n`` choices with ``n`` calls instead: a server's chat completion with
``n > 1`` runs the chat handler once per choice (a handler makes one choice), each call on its own
thread.  Those calls run inside one :class:`ChoiceGroup`, each in its :meth:`ChoiceGroup.member` block.
The first engine request each call submits is held back until every call has submitted one or ended
without; then each one whose prompt and adapters equal the first one's becomes its fork, so the prompt
is evaluated once, as for ``create_completion(n=...)``.  A call whose prompt differs runs on its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from .request import Request


class ChoiceGroup:
    """The ``n`` calls that make one response's choices (see the module's docstring)."""

    def __init__(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"a choice group has at least one call, got {n!r}")
        self.n = n
        self.requests: list[Request] = []  # the first request of each call, in submission order
        self.paired = False  # the forks have been set
        self._ended = 0  # calls that ended without submitting a request
        self._lock = threading.Lock()
        self._wake: Callable[[], None] | None = None  # tells the engine that holds the requests

    @property
    def complete(self) -> bool:
        """Every call has submitted its first request or ended without one."""
        with self._lock:
            return len(self.requests) + self._ended >= self.n

    @contextlib.contextmanager
    def member(self) -> Iterator[None]:
        """One call of the group runs in this block (on its own thread, or in a copied context)."""
        member = _Member(self)
        token = _current.set(member)
        try:
            yield
        finally:
            _current.reset(token)
            if not member.joined:
                self._end_without_request()

    def arrive(self, request: Request, wake: Callable[[], None]) -> None:
        """A call's first request is submitted (by the engine, which ``wake`` tells of later changes)."""
        with self._lock:
            self.requests.append(request)
            self._wake = wake

    def pair(self) -> None:
        """The group is complete: the requests equal to the first become its forks (once)."""
        self.paired = True
        leader, *others = self.requests
        if leader.media:
            return
        for request in others:
            if request.prompt == leader.prompt and request.adapter_key == leader.adapter_key and \
                    not request.media and not request.continues and request.fork_of is None:
                request.fork_of = leader

    def _end_without_request(self) -> None:
        with self._lock:
            self._ended += 1
            wake = self._wake
        if wake is not None:
            wake()


class _Member:
    __slots__ = ("group", "joined")

    def __init__(self, group: ChoiceGroup) -> None:
        self.group = group
        self.joined = False


_current: contextvars.ContextVar[_Member | None] = contextvars.ContextVar("llama_cpp_choice_member", default=None)


def join_choice_group() -> ChoiceGroup | None:
    """The group the request being submitted here belongs to: the call's group, for its first request
    only (None: no group, or this call has joined already)."""
    member = _current.get()
    if member is None or member.joined:
        return None
    member.joined = True
    return member.group
