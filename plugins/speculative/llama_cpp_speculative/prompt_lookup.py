"""Prompt lookup decoding: draft by copying what followed the latest earlier occurrence of the last n-gram.

The reference's ``LlamaPromptLookupDecoding`` (removed upstream, still
imported by code written for it): try the longest suffix n-gram first, down
to one token; the first earlier match proposes the tokens after it.  Pure
numpy, no state, so it also shows how little an engine needs.
"""

from __future__ import annotations

import numpy as np
from llama_cpp.llama_speculative import LlamaSpecEngine


class LlamaPromptLookupDecoding(LlamaSpecEngine):
    """Drafts up to ``num_pred_tokens`` tokens from the history by matching its last 1..``max_ngram_size`` tokens."""

    name = "prompt-lookup"

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10) -> None:
        for label, value in (("max_ngram_size", max_ngram_size), ("num_pred_tokens", num_pred_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"LlamaPromptLookupDecoding: {label} must be an integer >= 1, got {value!r}")
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens

    def max_draft_tokens(self) -> int:
        return self.num_pred_tokens

    def draft(self, input_ids: np.ndarray, /, *, n_past: int, id_last: int, n_max: int,
              seq_id: int = 0) -> np.ndarray:
        tokens = np.append(np.asarray(input_ids[:n_past], dtype=np.intc), np.intc(id_last))
        return self.lookup(tokens, min(n_max, self.num_pred_tokens))

    def lookup(self, tokens: np.ndarray, n_max: int) -> np.ndarray:
        """The draft after ``tokens`` (whose last one is the token to follow)."""
        n = len(tokens)
        for size in range(min(self.max_ngram_size, n - 1), 0, -1):
            windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], size)  # earlier n-grams only
            hits = np.flatnonzero((windows == tokens[n - size:]).all(axis=1))
            if len(hits):
                start = int(hits[-1]) + size  # the latest occurrence
                return tokens[start:start + n_max].copy()
        return np.empty(0, dtype=np.intc)

    def __call__(self, input_ids: np.ndarray, /, **kwargs: object) -> np.ndarray:
        """The seed's draft-model call: drafts after ``input_ids``."""
        return self.lookup(np.asarray(input_ids, dtype=np.intc), self.num_pred_tokens)
