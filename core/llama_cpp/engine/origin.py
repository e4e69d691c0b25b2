"""Which model and context parameters a saved sequence state belongs to.

llama.cpp checks little when it reads a sequence state: a state from another
model of the same shape, or from a context with another KV type, can be
accepted and silently give wrong results.  A :class:`StateOrigin` travels
with every snapshot, so that caches and state files can refuse a foreign one
before llama.cpp sees it.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class StateOrigin:
    """A model's fingerprint (hex digest) and the context parameters that shape its state, as
    ``(name, value)`` pairs in a fixed order."""

    model: str
    context: tuple[tuple[str, int], ...] = ()
