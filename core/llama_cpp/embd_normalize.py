"""Normalization of embeddings: one meaning everywhere, llama.cpp's ``--embd-normalize``.

``normalize`` takes the integer modes of ``common_embd_normalize``
(llama.cpp's common/common.cpp) and computes exactly what it computes, so a
vector equals what ``llama-embedding --embd-normalize N`` prints:

====  ==================  ====================================================
mode  name                each row is divided by
====  ==================  ====================================================
-1    none                1 (the raw output)
0     max absolute        max|x| / 32760: the largest component becomes ±32760,
                          the int16 range (values are not rounded)
1     taxicab             sum |x|
2     euclidean           sqrt(sum x²): unit length, cosine = dot product
p>2   p-norm              (sum |x|^p)^(1/p)
====  ==================  ====================================================

A row whose norm is 0 becomes all zeros.  ``True`` means euclidean and
``False`` none (llama-cpp-python's boolean); any other type is a TypeError.
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike

NORM_MODE_NONE = -1
NORM_MODE_MAX_INT16 = 0
NORM_MODE_TAXICAB = 1
NORM_MODE_EUCLIDEAN = 2
NORM_MODE_PNORM = 6  # llama-cpp-python's constant; every integer above 2 is a p-norm

INT16_SCALE = 32760.0  # common_embd_normalize's "int16 range"

ALLOWED = ("-1 (none), 0 (max absolute, int16 range), 1 (taxicab), 2 (euclidean), an integer p > 2 (p-norm), "
           "True (euclidean) or False (none)")


def norm_mode(normalize: object) -> int:
    """``normalize`` as a ``--embd-normalize`` mode; TypeError/ValueError naming what is allowed."""
    if isinstance(normalize, (bool, np.bool_)):
        return NORM_MODE_EUCLIDEAN if normalize else NORM_MODE_NONE
    if not isinstance(normalize, numbers.Integral):
        raise TypeError(f"normalize must be {ALLOWED}; got {type(normalize).__name__} {normalize!r}")
    mode = int(normalize)
    if mode < NORM_MODE_NONE:
        raise ValueError(f"normalize must be {ALLOWED}; got {mode}")
    return mode


def normalize_rows(rows: np.ndarray, mode: int) -> np.ndarray:
    """Each row of a float32 matrix normalized as ``common_embd_normalize(row, out, n, mode)`` does.

    The arithmetic is llama.cpp's: squares in float32 summed in float64, the
    norm's reciprocal rounded to float32, then one float32 multiply per value.
    """
    rows = np.asarray(rows, dtype=np.float32)
    if mode == NORM_MODE_NONE or rows.size == 0:
        return rows.copy()
    if mode == NORM_MODE_MAX_INT16:
        norms = np.abs(rows).max(axis=-1).astype(np.float64) / INT16_SCALE
    elif mode == NORM_MODE_EUCLIDEAN:
        norms = np.sqrt((rows * rows).astype(np.float64).sum(axis=-1))
    else:
        with np.errstate(over="ignore"):  # a huge p overflows to inf, as in C: the row becomes zeros
            norms = (np.abs(rows).astype(np.float64) ** mode).sum(axis=-1) ** (1.0 / mode)
    with np.errstate(divide="ignore"):
        scale = np.where(norms > 0.0, 1.0 / norms, 0.0).astype(np.float32)
    return rows * scale[..., None]


def cosine_similarity(a: ArrayLike, b: ArrayLike) -> float:
    """``common_embd_similarity_cos``: float64 sums; two zero vectors are similar (1), one is not (0)."""
    x, y = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    dot = float((x * y).astype(np.float64).sum())
    sum_a = float((x * x).astype(np.float64).sum())
    sum_b = float((y * y).astype(np.float64).sum())
    if sum_a == 0.0 or sum_b == 0.0:
        return 1.0 if sum_a == 0.0 and sum_b == 0.0 else 0.0
    return dot / (np.sqrt(sum_a) * np.sqrt(sum_b))
