"""The ledger of one sequence: what its part of llama.cpp's memory holds.

A sequence's memory holds the tokens at positions ``0..n-1`` (a media chunk
holds several positions, written as media entries: :mod:`.media`), evaluated
under one set of adapters.
The ledger mirrors that exactly, so that a new request can reuse the longest
common prefix, a context shift can drop the middle, and a snapshot of one
sequence can be taken and put back (the contract of the prompt caches).
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs
import numpy as np

from .._adapters import NO_ADAPTERS, AdapterKey
from .checkpoints import Checkpoint, checkpoint_flags, reachable
from .prefix import common_prefix
from .context import Context
from .media import chunk_boundary, is_continuation
from .origin import ForeignStateError, StateOrigin


@attrs.frozen
class SequenceSnapshot:
    """One sequence's tokens and llama.cpp's serialized state of it (``llama_state_seq_get_data``).

    ``checkpoints`` are the partial states (:class:`Checkpoint`) of a memory
    that cannot drop an arbitrary suffix (recurrent, hybrid, sliding window):
    with them a restored snapshot can still be cut back to a checkpoint's
    length.  ``origin`` says which model and context parameters the state
    belongs to (None: unknown, accepted only by the context that made it).
    """

    tokens: tuple[int, ...]
    state: bytes = attrs.field(repr=lambda s: f"<{len(s)} bytes>")
    adapters: AdapterKey | None = NO_ADAPTERS
    checkpoints: tuple[Checkpoint, ...] = ()
    origin: StateOrigin | None = None

    @property
    def nbytes(self) -> int:
        return len(self.state) + 4 * len(self.tokens) + sum(c.nbytes for c in self.checkpoints)

    def fits(self, origin: StateOrigin | None) -> bool:
        """Whether a context of ``origin`` may restore this snapshot: unless both origins are known and
        differ."""
        return origin is None or self.origin is None or self.origin == origin


def lookup_by_protocol(cache: Any, tokens: Sequence[int], adapters: Any = None,
                       origin: StateOrigin | None = None) -> tuple[int, SequenceSnapshot] | None:
    """A seed-protocol cache's entry for ``tokens`` (``tokens in cache``, ``cache[tokens]``) as
    ``(shared prefix length, snapshot)``: only a snapshot evaluated under ``adapters`` and made by a
    context of ``origin`` (None: any)."""
    if tokens not in cache:
        return None
    value = cache[tokens]
    if not isinstance(value, SequenceSnapshot) or (adapters is not None and value.adapters != adapters) or \
            not value.fits(origin):
        return None
    return common_prefix(value.tokens, tokens), value


class Ledger:
    """The tokens one sequence holds in memory, and the adapters they were evaluated with.

    ``adapters`` is None when the tokens were evaluated under a mix of
    adapter sets: such a ledger is never reused as a prefix.  ``checkpoints``
    are partial states taken along the way, for memories that cannot drop a
    suffix (see :mod:`.checkpoints`).  With
    ``logits_all`` the ledger also keeps each token's logits row (``scores``),
    moved together with the tokens when the context shifts.
    """

    __slots__ = ("seq_id", "tokens", "adapters", "scores", "checkpoints")

    def __init__(self, seq_id: int) -> None:
        self.seq_id = seq_id
        self.tokens: list[int] = []
        self.adapters: AdapterKey | None = NO_ADAPTERS
        self.scores: np.ndarray | None = None
        self.checkpoints: list[Checkpoint] = []  # oldest first, each at most len(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def note_adapters(self, key: AdapterKey) -> None:
        """Tokens are about to be appended under ``key``."""
        if key is self.adapters:
            return
        if not self.tokens:
            self.adapters = key
        elif key != self.adapters:
            self.adapters = None  # a mix: never reused as a prefix

    def reusable_prefix(self, tokens: Sequence[int], adapters: AdapterKey) -> int:
        """How much of ``tokens`` this sequence already holds, evaluated under ``adapters``."""
        if adapters != self.adapters:
            return 0
        return common_prefix(self.tokens, tokens)

    def truncate(self, ctx: Context, n: int) -> int:
        """Keep at most the first ``n`` tokens; returns how many are kept.

        Where the memory cannot drop the suffix at ``n`` (a recurrent state, a
        sliding window that pruned cells the next token needs), the newest
        checkpoint at or before ``n`` is put back instead, and the tokens after
        it go; without one the sequence is cleared (0 kept).
        """
        if n >= len(self.tokens):
            return len(self.tokens)
        if n > 0 and ctx.seq_rm(self.seq_id, n, -1) and ctx.window_holds(self.seq_id, n):
            self._cut(n)
            return n
        for checkpoint in reversed(self.checkpoints):
            if checkpoint.n_tokens <= n and self.rewind(ctx, checkpoint):
                return checkpoint.n_tokens
        self.clear(ctx)
        return 0

    def rewind(self, ctx: Context, checkpoint: Checkpoint) -> bool:
        """Go back to ``checkpoint``: its partial state, the attention part cut to its length, the tokens
        after it forgotten.  False (nothing changed) if llama.cpp refused the state."""
        if checkpoint.on_device and checkpoint.seq_id != self.seq_id:
            return False  # device buffers belong to the sequence that took them
        if not ctx.set_seq_state(self.seq_id, checkpoint.state, checkpoint_flags(checkpoint.on_device)) or \
                not ctx.seq_rm(self.seq_id, checkpoint.n_tokens, -1):
            return False
        self._cut(checkpoint.n_tokens)
        return True

    def _cut(self, n: int) -> None:
        del self.tokens[n:]
        if self.checkpoints and self.checkpoints[-1].n_tokens > n:
            self.checkpoints = [c for c in self.checkpoints if c.n_tokens <= n]

    def reuse_chunks(self, ctx: Context, prompt: Sequence[int], start: int, min_chunk: int) -> int:
        """llama-server's ``n_cache_reuse``: after the first ``start`` tokens (the prefix both share), every run
        of at least ``min_chunk`` held tokens that the prompt goes on with moves into place (its positions
        shifted in memory) and the held tokens the prompt skips before it leave; returns how many of the
        prompt's first tokens the sequence then holds (the held tokens after them are ``truncate``'s).
        Only for a memory that can shift positions, of tokens alone, without kept logits
        (:meth:`can_reuse_chunks`)."""
        held = self.tokens
        head_c = head_p = start
        while head_c < len(held) and head_p < len(prompt):
            n = 0
            while head_c + n < len(held) and head_p + n < len(prompt) and held[head_c + n] == prompt[head_p + n]:
                n += 1
            if n < min_chunk:
                head_c += 1
                continue
            ctx.seq_rm(self.seq_id, head_p, head_c)
            ctx.seq_shift(self.seq_id, head_c, head_p - head_c, head_c + n)
            held[head_p:head_p + n] = held[head_c:head_c + n]
            head_c += n
            head_p += n
        return head_p

    def can_reuse_chunks(self, ctx: Context, prompt: Sequence[int]) -> bool:
        """Whether :meth:`reuse_chunks` may move this sequence's tokens for ``prompt``: positions that can
        shift (no recurrent state, no sliding window), no media entries, no logits rows kept beside them."""
        return (ctx.can_shift() and ctx.window == 0 and not ctx.recurrent and self.scores is None
                and not self.checkpoints and min(self.tokens, default=0) >= 0 and min(prompt, default=0) >= 0)

    def reachable(self, n: int, ctx: Context) -> int:
        """How many of the first ``n`` tokens ``truncate(ctx, n)`` can be expected to keep: all of them, or
        on a recurrent memory only up to a checkpoint (a pruned window is found out by ``truncate``)."""
        return reachable(len(self.tokens), self.checkpoints, n, ctx.recurrent)

    def clear(self, ctx: Context) -> None:
        ctx.seq_rm(self.seq_id, 0, -1)
        self.tokens = []
        self.checkpoints = []
        self.adapters = NO_ADAPTERS

    def mirror(self, other: Ledger) -> None:
        """This sequence's memory was just copied from ``other``'s (``seq_cp``): the same tokens, adapters
        and host checkpoints (on-device ones stay with the sequence that took them)."""
        self.tokens = list(other.tokens)
        self.adapters = other.adapters
        self.checkpoints = [c for c in other.checkpoints if not c.on_device]

    def shift(self, ctx: Context, n_keep: int, incoming: int) -> None:
        """Make room for ``incoming`` tokens: discard old ones after the first ``n_keep``.

        Discards ``max(needed, (n - keep) // 2)`` tokens (llama.cpp's rule),
        keeping ``min(n_keep, n - needed)`` so that something is discarded;
        both ends move outwards to media chunk boundaries.
        """
        if not ctx.can_shift():
            raise RuntimeError(
                f"the context is full ({len(self.tokens)} + {incoming} > {ctx.n_ctx_seq} tokens per sequence) "
                "and this model's memory cannot shift; increase n_ctx")
        n_past = len(self.tokens)
        required = n_past + incoming - ctx.n_ctx_seq
        keep = chunk_boundary(self.tokens, min(n_keep, n_past - required))
        end = keep + max(required, (n_past - keep) // 2)
        while end < n_past and is_continuation(self.tokens[end]):  # a media chunk goes whole or stays
            end += 1
        discard = end - keep
        ctx.seq_rm(self.seq_id, keep, keep + discard)
        ctx.seq_shift(self.seq_id, keep + discard, -discard)
        self.checkpoints = []  # states of positions that moved
        if self.scores is not None:
            self.scores[keep:n_past - discard] = self.scores[keep + discard:n_past]
        del self.tokens[keep:keep + discard]

    def keep_scores(self, n_ctx: int, n_vocab: int) -> np.ndarray:
        """The logits rows of this sequence's tokens (allocated on first use, with ``logits_all``)."""
        if self.scores is None:
            self.scores = np.zeros((n_ctx, n_vocab), dtype=np.float32)
        return self.scores

    def snapshot(self, ctx: Context) -> SequenceSnapshot:
        return SequenceSnapshot(tokens=tuple(self.tokens), state=ctx.seq_state(self.seq_id), adapters=self.adapters,
                                checkpoints=tuple(c for c in self.checkpoints if not c.on_device), origin=ctx.origin)

    def restore(self, ctx: Context, snapshot: SequenceSnapshot) -> None:
        """Replace this sequence's memory with ``snapshot``; ValueError if llama.cpp refuses it, and
        ForeignStateError (nothing changed) if the snapshot says it belongs to another model or context."""
        if not snapshot.fits(ctx.origin):
            assert snapshot.origin is not None and ctx.origin is not None  # fits() is False only when both are
            raise ForeignStateError(f"this sequence state belongs to another model or context "
                                    f"({snapshot.origin.differences(ctx.origin)}): not restored")
        ctx.seq_rm(self.seq_id, 0, -1)
        if not ctx.set_seq_state(self.seq_id, snapshot.state):
            self.tokens = []
            self.checkpoints = []
            self.adapters = NO_ADAPTERS
            raise ValueError("llama.cpp did not accept the sequence state: was it saved from another model "
                             "or with other context parameters?")
        self.tokens = list(snapshot.tokens)
        self.adapters = snapshot.adapters
        self.checkpoints = [c for c in snapshot.checkpoints if c.n_tokens <= len(self.tokens)]
