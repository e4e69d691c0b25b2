"""The requests of one piece of work, as a server sees them: held to its limits, cancelled together.

A server runs a blocking call (``create_chat_completion``) on a worker thread and must stop it from its
event loop when the client goes away or its time is up, but the call's engine requests are made deep
inside the library.  Requests submitted while a :class:`RequestScope` is active (in the context that
entered it: a thread, or what ``contextvars`` copies into one) join that scope: a prompt longer than the
scope's ``max_prompt_tokens`` is refused with a ValueError before it is queued, and ``cancel()`` cancels
every request of the scope, from any thread, and any that joins later.  A cancelled request finishes
"abort" at once, its sequence is freed at the next tick, and the blocked call returns.  ``requests`` are
all that joined, for what the server reports about the call once it is done (llama-server's ``timings``).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any, Callable, Iterator

_active: contextvars.ContextVar[RequestScope | None] = contextvars.ContextVar("llama_cpp_request_scope",
                                                                              default=None)


class RequestScope:
    """See the module's docstring."""

    def __init__(self, *, max_prompt_tokens: int | None = None) -> None:
        self.max_prompt_tokens = max_prompt_tokens
        self._lock = threading.Lock()
        self._joined: list[tuple[Any, Callable[[Any], None]]] = []
        self._requests: list[Any] = []
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def requests(self) -> tuple[Any, ...]:
        """Every engine request that joined, in the order they did (finished ones included)."""
        with self._lock:
            return tuple(self._requests)

    @contextlib.contextmanager
    def active(self) -> Iterator[RequestScope]:
        """Requests submitted inside the block join this scope."""
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)

    def check(self, n_prompt: int) -> None:
        """ValueError if a prompt of ``n_prompt`` positions is over the scope's limit."""
        if self.max_prompt_tokens is not None and n_prompt > self.max_prompt_tokens:
            raise ValueError(f"the prompt has {n_prompt} tokens; at most {self.max_prompt_tokens} are allowed")

    def join(self, request: Any, cancel: Callable[[Any], None]) -> None:
        """``request`` belongs to this scope; ``cancel(request)`` stops it (now, if the scope is cancelled)."""
        with self._lock:
            self._requests.append(request)
            if not self._cancelled:
                self._joined.append((request, cancel))
                return
        cancel(request)

    def cancel(self) -> None:
        """Cancel every request of the scope, and those that join later (idempotent, thread-safe)."""
        with self._lock:
            self._cancelled = True
            joined, self._joined = self._joined, []
        for request, cancel in joined:
            cancel(request)


def current_scope() -> RequestScope | None:
    """The scope requests submitted here join (None: none is active)."""
    return _active.get()
