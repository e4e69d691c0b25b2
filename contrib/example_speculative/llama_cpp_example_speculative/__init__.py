"""An example speculative engine: a bigram chain, per sequence, in pure Python.

The contract (``LlamaSpecEngine``), per sequence ``seq_id``:

- ``begin(tokens, seq_id)``: a request starts; ``tokens`` are in the target's memory;
- ``draft(input_ids, n_past=, id_last=, n_max=, seq_id=)``: propose what follows ``id_last``;
- ``accept(n_accepted, seq_id)``: that many drafted tokens were kept (``id_last`` too);
- ``rollback(n_tokens, seq_id)``: the target's memory was cut back to ``n_tokens`` tokens.

This engine mirrors each sequence in those calls and keeps, per sequence,
the last successor of every token; ``draft`` follows that chain from
``id_last``.  Register it with the ``llama_cpp_speculative_engines`` hook
and an entry point in the ``llama_cpp`` group (see pyproject.toml).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from llama_cpp import hookimpl
from llama_cpp.llama_speculative import LlamaSpecEngine
from llama_cpp.plugins import SpeculativeEngine

__all__ = ["BigramEngine"]


class _Sequence:
    """One sequence as the engine sees it: its tokens and the last successor of each token."""

    __slots__ = ("tokens", "successor")

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens: list[int] = []
        self.successor: dict[int, int] = {}
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            if self.tokens:
                self.successor[self.tokens[-1]] = int(token)
            self.tokens.append(int(token))


class BigramEngine(LlamaSpecEngine):
    """Drafts up to ``max_tokens`` tokens by following the most recent successor of each token."""

    name = "example-bigram"

    def __init__(self, max_tokens: int = 8) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"example-bigram: max_tokens must be an integer >= 1, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self._seqs: dict[int, _Sequence] = {}
        self._last: dict[int, tuple[int, list[int]]] = {}  # seq_id -> (id_last, draft) awaiting accept

    def max_draft_tokens(self) -> int:
        return self.max_tokens

    def begin(self, prompt_tokens: Sequence[int], seq_id: int = 0) -> None:
        self._seqs[seq_id] = _Sequence(prompt_tokens)

    def draft(self, input_ids: np.ndarray, /, *, n_past: int, id_last: int, n_max: int,
              seq_id: int = 0) -> np.ndarray:
        seq = self._seqs.get(seq_id)
        if seq is None or len(seq.tokens) != n_past:  # tokens came in that we did not see: resynchronize
            seq = self._seqs[seq_id] = _Sequence(input_ids[:n_past].tolist())
        chain: list[int] = []
        token = id_last
        while len(chain) < min(n_max, self.max_tokens) and token in seq.successor:
            token = seq.successor[token]
            chain.append(token)
        self._last[seq_id] = (id_last, chain)
        return np.asarray(chain, dtype=np.intc)

    def accept(self, n_accepted: int, seq_id: int = 0) -> None:
        id_last, chain = self._last.pop(seq_id, (None, []))
        seq = self._seqs.get(seq_id)
        if seq is not None and id_last is not None:
            seq.extend([id_last, *chain[:n_accepted]])

    def rollback(self, n_tokens: int, seq_id: int = 0) -> None:
        seq = self._seqs.get(seq_id)
        if seq is not None and len(seq.tokens) > n_tokens:
            self._seqs[seq_id] = _Sequence(seq.tokens[:n_tokens])

    def clear(self) -> None:
        self._seqs.clear()
        self._last.clear()


@hookimpl
def llama_cpp_speculative_engines() -> list[SpeculativeEngine]:
    return [SpeculativeEngine(name=BigramEngine.name, factory=BigramEngine,
                              description="example: follows the most recent successor of each token")]
