"""Prompt caches for llama_cpp, as a plugin.

Registers the ``ram``, ``trie`` and ``disk`` cache strategies
(``Llama(cache={"strategy": "ram", "capacity_bytes": ...})``,
``cache={"strategy": "disk", "path": ..., "capacity_bytes": ...}``) and exports
the seed's classes for ``llama_cpp.llama_cache``.
"""

from __future__ import annotations

from llama_cpp import hookimpl
from llama_cpp.plugins import CacheStrategy

from .disk import LlamaDiskCache, disk_cache_from_options
from .ram import LlamaCache, LlamaRAMCache, LlamaTrieCache
from .trie import TokenTrie

__all__ = ["LlamaCache", "LlamaDiskCache", "LlamaRAMCache", "LlamaTrieCache", "TokenTrie"]

__llama_cache_exports__ = frozenset({"LlamaCache", "LlamaDiskCache", "LlamaRAMCache", "LlamaTrieCache"})


@hookimpl
def llama_cpp_cache_strategies() -> list[CacheStrategy]:
    return [
        CacheStrategy(name="ram", factory=LlamaRAMCache,
                      description="snapshots in memory, least recently used out, bounded by capacity_bytes",
                      options={"capacity_bytes": 2 << 30, "verbose": False}),
        CacheStrategy(name="trie", factory=LlamaTrieCache, description="the RAM cache with the seed's signature",
                      options={"capacity_bytes": 2 << 30}),
        CacheStrategy(name="disk", factory=disk_cache_from_options,
                      description="snapshots as checked state files in a directory (path, or the seed's cache_dir), "
                                  "least recently used out, bounded by capacity_bytes; shareable between processes",
                      options={"path": ".cache/llama_cache", "capacity_bytes": 2 << 30, "verbose": False}),
    ]
