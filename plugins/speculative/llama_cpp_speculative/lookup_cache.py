"""Checking an n-gram lookup cache file before llama.cpp reads it.

``llama-lookup-create`` writes, back to back until the end of the file:
an n-gram (4 int32 tokens, unused places -1), the number of continuations
(int32 > 0), then that many (token int32, count int32 > 0) pairs.
llama.cpp's reader *aborts the process* on anything else, so a file from
elsewhere is parsed here first: a malformed one, or one naming tokens
outside the model's vocabulary, is refused with a ValueError.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

_NGRAM_MAX = 4  # LLAMA_NGRAM_MAX of common/ngram-cache.h
_TOKEN_NULL = -1


def check_lookup_cache(path: str | Path, n_vocab: int, *, max_bytes: int = 1 << 31) -> int:
    """Validate a lookup cache file; returns its number of n-grams.  ValueError says what is wrong."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ValueError(f"lookup cache {str(path)!r} cannot be read: {exc}") from exc
    if size > max_bytes:
        raise ValueError(f"lookup cache {str(path)!r} is {size} bytes, more than the {max_bytes} allowed")
    if size % 4:
        raise ValueError(f"lookup cache {str(path)!r} is not a lookup cache: its size ({size}) is not a "
                         "whole number of int32 values")
    words = np.fromfile(path, dtype="<i4")
    i, n_ngrams, n = 0, 0, len(words)
    while i < n:
        if i + _NGRAM_MAX + 1 > n:
            raise ValueError(f"lookup cache {str(path)!r} is truncated inside an n-gram header")
        ngram = words[i:i + _NGRAM_MAX]
        count = int(words[i + _NGRAM_MAX])
        if ((ngram < _TOKEN_NULL) | (ngram >= n_vocab)).any():
            raise ValueError(f"lookup cache {str(path)!r} names tokens outside this model's vocabulary "
                             f"of {n_vocab} (n-gram {n_ngrams})")
        if count <= 0:
            raise ValueError(f"lookup cache {str(path)!r} is malformed: n-gram {n_ngrams} has {count} continuations")
        pairs = words[i + _NGRAM_MAX + 1:i + _NGRAM_MAX + 1 + 2 * count]
        if len(pairs) != 2 * count:
            raise ValueError(f"lookup cache {str(path)!r} is truncated inside n-gram {n_ngrams}")
        tokens, counts = pairs[0::2], pairs[1::2]
        if ((tokens < 0) | (tokens >= n_vocab)).any() or (counts <= 0).any():
            raise ValueError(f"lookup cache {str(path)!r} is malformed or from another vocabulary "
                             f"(n-gram {n_ngrams})")
        i += _NGRAM_MAX + 1 + 2 * count
        n_ngrams += 1
    return n_ngrams
