"""The step: what one running sequence feeds into a tick's decode, and what it takes out.

The plain step decodes the last sampled token and samples the next one from
its logits row.  A speculative step is the same seam with more in it: it
proposes draft tokens after the pending ones, has them decoded in the same
batch with logits on every row, keeps what the sequence's own sampler agrees
with (``SequenceSampler.sample_and_accept_n``) and reports how many of the
fed tokens stay in memory; the scheduler rolls the rest back.  The scheduler
does not know which kind of step it runs.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, Sequence

from .context import Context
from .sampler import SequenceSampler


class Sampled(NamedTuple):
    """A token chosen from batch row ``row``; ``raw`` is the row before a logits processor edited it."""

    token: int
    row: int
    raw: Any = None  # a numpy array, or None when the buffer holds the row as llama.cpp computed it


class Step(Protocol):
    """How a running sequence advances in one tick."""

    def feed(self, seq_id: int, pending: Sequence[int]) -> tuple[list[int], str]:
        """The tokens to decode for ``seq_id`` whose next inputs are ``pending``, and which of their rows
        want logits: ``"last"`` or ``"all"``."""

    def take(self, seq_id: int, ctx: Context, sampler: SequenceSampler, rows: Sequence[int],
             fed: Sequence[int]) -> tuple[list[Sampled], int]:
        """After the decode (``rows[i]`` is the batch row of ``fed[i]``): the sampled tokens in order,
        and how many of ``fed`` stay in memory (fewer when drafts were rejected)."""


class PlainStep:
    """One token per sequence per tick: decode the pending tokens, sample from the last row."""

    def feed(self, seq_id: int, pending: Sequence[int]) -> tuple[list[int], str]:
        return pending, "last"  # type: ignore[return-value]

    def take(self, seq_id: int, ctx: Context, sampler: SequenceSampler, rows: Sequence[int],
             fed: Sequence[int]) -> tuple[list[Sampled], int]:
        token, raw = sampler.sample(ctx, rows[-1])
        return [Sampled(token, rows[-1], raw)], len(fed)
