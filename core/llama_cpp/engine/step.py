"""The step: what one running sequence feeds into a tick's decode, and what it takes out.

The plain step decodes the last sampled token and samples the next one from its logits row.  A
speculative step (``engine.speculative``) is the same seam with more in it: it proposes draft tokens
after the pending ones, has them decoded in the same batch with logits on every row, keeps what the
sequence's own sampler agrees with and reports how many of the fed tokens stay in memory; the engine
rolls the rest back.  The engine does not know which kind of step it runs: the planner asks every step
what a running sequence feeds (``feed``) and the update what it takes out (``take``); both tell every
step when a sequence starts and ends a request and when its memory is cut back.  A step that ``drafts``
is asked to ``prepare`` every running sequence's draft before a batch is packed, and one that
``observes_batches`` sees every decoded batch.  A step that ``bursts`` takes nothing from a decode but the
sequence's sampler's token from its last row, so a lone sequence may take several tokens in one tick: the
runner decodes each chosen token right away, natively (:class:`.slot.Burst`), and the update hands them
out as the step's samples.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol, Sequence

import numpy as np

from .context import Context, RowMode
from .sampler import SequenceSampler


class DecodedBatch(NamedTuple):
    """The rows of one decode, as a step that ``observes_batches`` sees them (views, valid until the next)."""

    tokens: np.ndarray  # int32
    positions: np.ndarray  # int32
    seq_ids: np.ndarray  # int32
    outputs: np.ndarray  # int8: the row has logits


class Sampled(NamedTuple):
    """A token chosen from batch row ``row``; ``raw`` is the row before a logits processor edited it."""

    token: int
    row: int
    raw: Any = None  # a numpy array, or None when the buffer holds the row as llama.cpp computed it


class DraftWanted(NamedTuple):
    """A running sequence a drafting step is asked to draft for, before a batch is packed."""

    state: Any  # what the step's begin() returned for the sequence's request
    seq_id: int
    pending: Sequence[int]  # the tokens it decodes next (the last sampled one, and any sent in)
    history: Sequence[int]  # what its memory holds
    n_max: int  # the most draft tokens that fit this tick


class Step(Protocol):
    """How a running sequence advances in one tick.

    A step keeps what it needs per sequence in the object its ``begin`` returns: the engine keeps that on
    the sequence's slot (``Slot.step_state``) and hands it to every later call about that request
    (``None`` where the sequence serves none).
    """

    observes_batches: bool  # decoded() is called after every decode
    drafts: bool  # prepare() is called before every batch is packed
    bursts: bool  # take() is the sampler's token from the last row and nothing else (see the module's docstring)

    def begin(self, seq_id: int, tokens: Sequence[int], started: float) -> Any:
        """A request starts generating on ``seq_id``, whose memory holds ``tokens``: the sequence's state."""

    def prepare(self, wanted: Sequence[DraftWanted]) -> None:
        """Before the batch is packed (``drafts``): every running sequence's draft, all at once."""

    def feed(self, state: Any, seq_id: int, pending: Sequence[int], n_max: int) -> tuple[list[int], RowMode]:
        """The tokens to decode for ``seq_id`` whose next inputs are ``pending`` (at most ``n_max`` more
        fit this tick), and which of their rows want logits (LAST or ALL)."""

    def take(self, state: Any, seq_id: int, ctx: Context, sampler: SequenceSampler, rows: Sequence[int],
             fed: Sequence[int], eog: Callable[[int], bool] | None = None) -> tuple[list[Sampled], int, list[int]]:
        """After the decode (``rows[i]`` is the batch row of ``fed[i]``): the sampled tokens in order (none
        after an ``eog`` token), how many of ``fed`` stay in memory (fewer when drafts were rejected), and
        the tokens to decode again before the last sampled one (the accepted part of a draft whose
        rejection restored a state checkpoint)."""

    def decoded(self, batch: DecodedBatch, states: Sequence[Any], seconds: float) -> None:
        """After every decode (``observes_batches``): its rows, the states of its sequences (one per
        sequence in the batch, in row order; None for one that serves no generating request), and how long
        it took."""

    def rollback(self, state: Any, seq_id: int, n_tokens: int) -> None:
        """The memory of ``seq_id`` now holds only its first ``n_tokens`` tokens."""

    def end(self, state: Any, seq_id: int, n_generated: int) -> None:
        """The request on ``seq_id`` is over."""

    def close(self) -> None:
        """Free what the step holds."""


class PlainStep:
    """One token per sequence per tick: decode the pending tokens, sample from the last row."""

    observes_batches = False
    drafts = False
    bursts = True

    def begin(self, seq_id: int, tokens: Sequence[int], started: float) -> None:
        return None  # nothing kept per sequence

    def prepare(self, wanted: Sequence[DraftWanted]) -> None:
        pass

    def feed(self, state: None, seq_id: int, pending: Sequence[int], n_max: int) -> tuple[list[int], RowMode]:
        return list(pending), RowMode.LAST

    def take(self, state: None, seq_id: int, ctx: Context, sampler: SequenceSampler, rows: Sequence[int],
             fed: Sequence[int], eog: Callable[[int], bool] | None = None) -> tuple[list[Sampled], int, list[int]]:
        token, raw = sampler.sample(ctx, rows[-1])
        return [Sampled(token, rows[-1], raw)], len(fed), []

    def decoded(self, batch: DecodedBatch, states: Sequence[Any], seconds: float) -> None:
        pass

    def rollback(self, state: None, seq_id: int, n_tokens: int) -> None:
        pass

    def end(self, state: None, seq_id: int, n_generated: int) -> None:
        pass

    def close(self) -> None:
        pass
