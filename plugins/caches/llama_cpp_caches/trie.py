"""A token trie: which stored token sequences share the longest prefix with a query.

Entries are small integers (the cache maps them to its keys), so a key of n
tokens costs n node visits to add or remove, and a lookup costs the length of
the shared prefix, whatever the number of entries.
"""

from __future__ import annotations

from typing import Sequence


class _Node:
    __slots__ = ("children", "entries")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.entries: set[int] = set()  # every entry whose tokens pass through this node


class TokenTrie:
    """Token sequences by their prefixes."""

    def __init__(self) -> None:
        self._root = _Node()

    def add(self, tokens: Sequence[int], entry: int) -> None:
        node = self._root
        node.entries.add(entry)
        for token in tokens:
            node = node.children.setdefault(token, _Node())
            node.entries.add(entry)

    def remove(self, tokens: Sequence[int], entry: int) -> None:
        node = self._root
        node.entries.discard(entry)
        for token in tokens:
            child = node.children.get(token)
            if child is None:
                return
            child.entries.discard(entry)
            if not child.entries:  # nothing else below: drop the branch
                del node.children[token]
                return
            node = child

    def shared(self, tokens: Sequence[int]) -> list[set[int]]:
        """For each depth d >= 1 along ``tokens``: the entries sharing its first d tokens (deepest last)."""
        path: list[set[int]] = []
        node = self._root
        for token in tokens:
            child = node.children.get(token)
            if child is None:
                break
            node = child
            path.append(node.entries)
        return path
