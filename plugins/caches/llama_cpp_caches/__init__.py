"""Prompt caches for llama_cpp, as a plugin.

Registers the ``ram`` and ``trie`` cache strategies
(``Llama(cache={"strategy": "ram", "capacity_bytes": ...})``) and exports the
seed's classes for ``llama_cpp.llama_cache``.
"""

from __future__ import annotations

from llama_cpp import hookimpl
from llama_cpp.plugins import CacheStrategy

from .ram import LlamaCache, LlamaRAMCache, LlamaTrieCache
from .trie import TokenTrie

__all__ = ["LlamaCache", "LlamaRAMCache", "LlamaTrieCache", "TokenTrie"]

__llama_cache_exports__ = frozenset({"LlamaCache", "LlamaRAMCache", "LlamaTrieCache"})


@hookimpl
def llama_cpp_cache_strategies() -> list[CacheStrategy]:
    return [
        CacheStrategy(name="ram", factory=LlamaRAMCache,
                      description="snapshots in memory, least recently used out, bounded by capacity_bytes",
                      options={"capacity_bytes": 2 << 30, "verbose": False}),
        CacheStrategy(name="trie", factory=LlamaTrieCache, description="the RAM cache with the seed's signature",
                      options={"capacity_bytes": 2 << 30}),
    ]
