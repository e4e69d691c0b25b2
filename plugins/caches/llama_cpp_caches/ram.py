"""The RAM cache: sequence snapshots in memory, least recently used first out, bounded by bytes."""

from __future__ import annotations

import collections
import itertools
import sys
import time
from typing import Any, Sequence

from llama_cpp.llama_cache import BaseLlamaCache

from .trie import TokenTrie


def _nbytes(value: Any) -> int:
    """What an entry costs: a snapshot's state and tokens (``nbytes``), or the seed's LlamaState."""
    size = getattr(value, "nbytes", None)
    if isinstance(size, int):
        return size
    state = getattr(value, "llama_state", None)
    if isinstance(state, (bytes, bytearray)):
        return len(state)
    return sys.getsizeof(value)


def _identity(tokens: tuple[int, ...], value: Any) -> tuple[Any, ...]:
    """What makes two entries the same: their tokens, and the model/context and adapters of their state
    (so one cache shared by several Llamas keeps an entry per model)."""
    return tokens, getattr(value, "origin", None), getattr(value, "adapters", None)


class _Entry:
    __slots__ = ("key", "tokens", "value", "nbytes", "used", "pinned_until")

    def __init__(self, key: tuple[Any, ...], value: Any, nbytes: int, used: int, pinned_until: float) -> None:
        self.key, self.tokens, self.value, self.nbytes, self.used = key, key[0], value, nbytes, used
        self.pinned_until = pinned_until  # time.monotonic() until which eviction passes it over

    def fits(self, adapters: Any, origin: Any) -> bool:
        """Evaluated under ``adapters`` by a context of ``origin`` (None: any; an entry of unknown origin
        fits every one)."""
        if adapters is not None and getattr(self.value, "adapters", None) != adapters:
            return False
        entry_origin = getattr(self.value, "origin", None)
        return origin is None or entry_origin is None or entry_origin == origin


class LlamaRAMCache(BaseLlamaCache):
    """Snapshots in memory.  The stored bytes never exceed ``capacity_bytes``: the least recently used
    entries go first (pinned ones only when nothing else is left), and an entry larger than the whole capacity
    is not stored.  A lookup finds the
    entry sharing the longest prefix with the prompt (a token trie), the most recently used among equals.
    Entries are kept per model and context (a snapshot's ``origin``), so several Llamas can share one."""

    def __init__(self, capacity_bytes: int = 2 << 30, verbose: bool = False) -> None:
        super().__init__(capacity_bytes)
        self.verbose = verbose
        self._entries: dict[int, _Entry] = {}
        self._by_key: dict[tuple[Any, ...], int] = {}
        self._order: collections.OrderedDict[int, None] = collections.OrderedDict()  # least recently used first
        self._trie = TokenTrie()
        self._ids = itertools.count()
        self._clock = itertools.count(1)
        self._size = 0

    @property
    def cache_size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def __setitem__(self, key: Sequence[int], value: Any) -> None:
        self._store(key, value, 0.0)

    def pin(self, key: Sequence[int], value: Any, seconds: float) -> None:
        self._store(key, value, time.monotonic() + seconds)

    def renew(self, tokens: Sequence[int], adapters: Any = None, origin: Any = None, seconds: float = 0.0) -> bool:
        found = self._find(tokens, adapters, origin)
        if found is None or found[0] < len(tokens):
            return False
        entry = self._entries[found[1]]
        entry.pinned_until = max(entry.pinned_until, time.monotonic() + seconds)
        entry.used = next(self._clock)
        self._order.move_to_end(found[1])
        return True

    def _store(self, key: Sequence[int], value: Any, pinned_until: float) -> None:
        tokens = tuple(int(t) for t in key)
        identity = _identity(tokens, value)
        size = _nbytes(value)
        replaced = self._by_key.get(identity)
        if replaced is not None:  # a replaced entry gives its bytes back first, and keeps its pin
            pinned_until = max(pinned_until, self._entries[replaced].pinned_until)
            self._remove(replaced)
        if size > self.capacity_bytes:
            self._say(f"an entry of {size} bytes is larger than the capacity ({self.capacity_bytes}): not stored")
            return
        while self._size + size > self.capacity_bytes:
            self._remove(self._eviction_victim())
        entry_id = next(self._ids)
        self._entries[entry_id] = _Entry(identity, value, size, next(self._clock), pinned_until)
        self._by_key[identity] = entry_id
        self._order[entry_id] = None
        self._trie.add(tokens, entry_id)
        self._size += size

    def lookup(self, tokens: Sequence[int], adapters: Any = None, origin: Any = None) -> tuple[int, Any] | None:
        found = self._find(tokens, adapters, origin)
        if found is None:
            self._say(f"miss for {len(tokens)} tokens")
            return None
        depth, entry_id = found
        entry = self._entries[entry_id]
        entry.used = next(self._clock)
        self._order.move_to_end(entry_id)
        self._say(f"hit: {depth} of {len(tokens)} tokens")
        return depth, entry.value

    def __getitem__(self, key: Sequence[int]) -> Any:
        found = self.lookup(key)
        if found is None:
            raise KeyError("no cached entry shares a prefix with these tokens")
        return found[1]

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._find(key, None, None) is not None

    def prefixes(self, origin: Any = None) -> list[tuple[tuple[int, ...], Any]]:
        return [(e.tokens, getattr(e.value, "adapters", None)) for e in self._entries.values() if e.fits(None, origin)]

    def clear(self) -> None:
        for entry_id in list(self._entries):
            self._remove(entry_id)

    # -- inside ---------------------------------------------------------------------------
    def _find(self, tokens: Sequence[int], adapters: Any, origin: Any) -> tuple[int, int] | None:
        """(shared length, entry id): the deepest shared prefix with an entry of these adapters and origin
        (None: any, as the seed's protocol asks)."""
        path = self._trie.shared([int(t) for t in tokens])
        for depth in range(len(path), 0, -1):
            candidates = [self._entries[i] for i in path[depth - 1]]
            if adapters is not None or origin is not None:
                candidates = [e for e in candidates if e.fits(adapters, origin)]
            if candidates:
                best = max(candidates, key=lambda e: e.used)
                return depth, self._by_key[best.key]
        return None

    def _eviction_victim(self) -> int:
        """The least recently used entry that is not pinned now; the least recently used of all if every one
        is."""
        now = time.monotonic()
        return next((i for i in self._order if self._entries[i].pinned_until <= now), next(iter(self._order)))

    def _remove(self, entry_id: int) -> None:
        entry = self._entries.pop(entry_id)
        del self._by_key[entry.key]
        del self._order[entry_id]
        self._trie.remove(entry.tokens, entry_id)
        self._size -= entry.nbytes

    def _say(self, message: str) -> None:
        if self.verbose:
            print(f"{type(self).__name__}: {message}", file=sys.stderr)


class LlamaTrieCache(LlamaRAMCache):
    """The seed's trie cache (``LlamaCache`` is its alias): the RAM cache, with the seed's signature."""

    def __init__(self, capacity_bytes: int = 2 << 30) -> None:
        super().__init__(capacity_bytes)


LlamaCache = LlamaTrieCache
