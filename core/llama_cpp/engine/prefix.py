"""Shared prefixes of token sequences."""

from __future__ import annotations

from typing import Sequence

from .media import chunk_boundary


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token sequences, never ending inside a media chunk of either
    (a chunk is kept whole or not at all: see :mod:`.media`)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    if (n < len(a) and a[n] < 0) or (n < len(b) and b[n] < 0):
        n = min(chunk_boundary(a, n), chunk_boundary(b, n))
    return n
