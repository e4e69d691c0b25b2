"""Prompt caches: the seed's names and the contract cache strategies implement.

One cache serves every sequence of a Llama.  When a request takes a
sequence, the engine asks the cache for the snapshot that shares the longest
prefix with the prompt (:meth:`BaseLlamaCache.lookup`) and restores it if it
beats what the sequence already holds; when a generation ends it stores the
sequence's snapshot (``cache[tokens] = snapshot``).  A prompt with cache
breakpoints (Anthropic's ``cache_control``) has the prefix up to each one
kept pinned (:meth:`BaseLlamaCache.pin`, :meth:`BaseLlamaCache.renew`), so
that least-recently-used eviction does not take it while its ttl lasts.  The values are
:class:`llama_cpp.engine.SequenceSnapshot` objects: one sequence's tokens,
adapters and llama.cpp's state of that sequence.

The built-in strategies (``ram``, ``trie``) come from the ``llama-cpp-caches``
plugin; their classes are importable from here, as in the seed.
``HybridCheckpointCache`` is not a strategy but part of the engine (the
checkpoints of recurrent, hybrid and sliding-window memories); it is
importable from here under its seed name.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol, Sequence

from .engine.checkpoints import HybridCheckpointCache
from .engine.ledger import lookup_by_protocol
from .plugins import seed_exports

__all__ = ["BaseLlamaCache", "HybridCheckpointCache", "PromptCache"]


class PromptCache(Protocol):
    """What the engine asks of a prompt cache (a cache strategy's factory returns one): the seed's protocol.
    A cache may also have :meth:`BaseLlamaCache.lookup`, :meth:`~BaseLlamaCache.pin` and
    :meth:`~BaseLlamaCache.renew`; the engine uses them when they are there."""

    def __contains__(self, key: Sequence[int]) -> bool: ...

    def __getitem__(self, key: Sequence[int]) -> Any: ...

    def __setitem__(self, key: Sequence[int], value: Any) -> None: ...


class BaseLlamaCache(abc.ABC):
    """A prompt cache holding at most ``capacity_bytes`` of snapshots.

    The seed's protocol (``key in cache``, ``cache[key]`` for the entry with
    the longest matching prefix, ``cache[key] = value``) plus :meth:`lookup`,
    which says how long the match is; the default ``lookup`` is built on the
    protocol, so a cache written against the seed works unchanged.
    """

    def __init__(self, capacity_bytes: int = 2 << 30) -> None:
        if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int) or capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be an integer >= 0, got {capacity_bytes!r}")
        self.capacity_bytes = capacity_bytes

    @property
    @abc.abstractmethod
    def cache_size(self) -> int:
        """Bytes stored now."""

    @abc.abstractmethod
    def __getitem__(self, key: Sequence[int]) -> Any:
        """The entry whose tokens share the longest prefix with ``key`` (KeyError when none does)."""

    @abc.abstractmethod
    def __contains__(self, key: Sequence[int]) -> bool:
        """Whether some entry shares a prefix with ``key``."""

    @abc.abstractmethod
    def __setitem__(self, key: Sequence[int], value: Any) -> None:
        """Store ``value`` (a snapshot of the sequence holding ``key``)."""

    def lookup(self, tokens: Sequence[int], adapters: Any = None, origin: Any = None) -> tuple[int, Any] | None:
        """``(length of the common prefix, entry)`` for the entry sharing the longest prefix with
        ``tokens``, evaluated under ``adapters`` and made by a context of ``origin`` (a
        :class:`llama_cpp.engine.origin.StateOrigin`: the same model and context parameters), or None.
        None for ``adapters`` or ``origin`` means any: one cache may serve several models, so a strategy
        should skip the entries of another origin rather than hide a usable one behind them."""
        return lookup_by_protocol(self, tokens, adapters, origin)

    def pin(self, key: Sequence[int], value: Any, seconds: float) -> None:
        """Store ``value`` as ``cache[key] = value`` does, and keep it ahead of the entries that are not pinned
        for ``seconds`` (a prompt-cache breakpoint's ttl: Anthropic's ``cache_control``): while the cache makes
        room, pinned entries go only when no other is left, and after ``seconds`` without a renewal the entry
        is an ordinary one again.  The default cannot pin: it stores the entry as any other."""
        self[key] = value

    def renew(self, tokens: Sequence[int], adapters: Any = None, origin: Any = None, seconds: float = 0.0) -> bool:
        """Whether an entry holds all of ``tokens`` (evaluated under ``adapters``, of ``origin``: as
        :meth:`lookup`); if so, it is kept pinned for ``seconds`` from now (:meth:`pin`), so that a prefix
        already stored is not stored again.  The default asks :meth:`lookup` and pins nothing."""
        found = self.lookup(tokens, adapters, origin)
        return found is not None and found[0] >= len(tokens)

    def prefixes(self, origin: Any = None) -> list[tuple[tuple[int, ...], Any]]:
        """``(tokens, adapters)`` of the entries made by a context of ``origin`` (None: every entry): what a
        router learns of the cache from :meth:`Scheduler.prefix_summary <llama_cpp.engine.Scheduler>`.  A
        cache that cannot list its entries answers none (the default)."""
        return []


# Seed names implemented by plugins (``LlamaRAMCache``, ``LlamaTrieCache``, ``LlamaCache``...).
__getattr__ = seed_exports(__name__, "__llama_cache_exports__", "llama-cpp-caches")
