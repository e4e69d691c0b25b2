"""Checkpoints of the part of a sequence's memory that cannot drop a suffix.

A KV cache can forget the tokens after any position, so reusing a prefix of
what a sequence holds is a ``seq_rm``.  A recurrent state (Mamba, RWKV, the
recurrent layers of a hybrid model) and a sliding-window cache that has
already pruned old cells cannot: they only know the state after the last
token.  A checkpoint is llama.cpp's partial state of the sequence
(``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``) taken after its first ``n_tokens``
tokens; putting it back and cutting the attention part at ``n_tokens`` makes
the sequence hold exactly that prefix again (llama-server's context
checkpoints do the same).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Sequence

import attrs
from llama_cpp_native import lib

from .prefix import common_prefix

if TYPE_CHECKING:
    from .context import Context
    from .ledger import Ledger


@attrs.frozen
class Checkpoint:
    """llama.cpp's partial state of one sequence after its first ``n_tokens`` tokens.

    ``on_device``: the state's tensors stayed in llama.cpp's per-sequence
    device buffers (``LLAMA_STATE_SEQ_FLAGS_ON_DEVICE``) and ``state`` only
    describes them; such a checkpoint can be put back only into the sequence
    it was taken from, and only until that sequence takes another one.
    """

    n_tokens: int
    state: bytes = attrs.field(repr=lambda s: f"<{len(s)} bytes>")
    seq_id: int = -1
    on_device: bool = False

    @property
    def nbytes(self) -> int:
        return len(self.state)


def checkpoint_flags(on_device: bool) -> int:
    """The ``llama_state_seq_*_ext`` flags of a checkpoint."""
    return lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY | (lib.LLAMA_STATE_SEQ_FLAGS_ON_DEVICE if on_device else 0)


def reachable(n_held: int, checkpoints: Sequence[Checkpoint], n: int, recurrent: bool) -> int:
    """How much of a sequence holding ``n_held`` tokens survives being cut back to ``n``: everything up to
    ``n`` where the memory can drop a suffix, else only up to the newest checkpoint at or before ``n``."""
    if n >= n_held:
        return n_held
    if not recurrent:
        return n
    return max((c.n_tokens for c in checkpoints if c.n_tokens <= n), default=0)


PROMPT_TAIL = 4  # a checkpoint is taken this many tokens before the end of each prompt (as llama-server does)


class HybridCheckpointCache:
    """Takes the checkpoints of every sequence of one context, and keeps their number bounded.

    ``Llama`` makes one for every model whose memory cannot always drop a
    suffix (``Llama.is_hybrid``: recurrent, hybrid, or sliding-window attention
    without ``swa_full``), from ``ctx_checkpoints`` (``max_checkpoints``),
    ``checkpoint_interval`` and ``checkpoint_on_device``.  The engine asks it
    before each prompt chunk (:meth:`due`): a checkpoint is taken every
    ``interval`` prompt tokens and :data:`PROMPT_TAIL` tokens before the end of
    the prompt, so that the same prompt, or one that differs only at its end,
    continues from there instead of from the start.  The checkpoints
    themselves belong to the sequences' ledgers: they follow a sequence into
    snapshots (the prompt cache, sessions, ``save_state``) and are dropped
    when the tokens they cover are.

    With ``on_device`` each sequence keeps one checkpoint in llama.cpp's
    device buffers (faster to take and restore, not copied to host memory,
    never saved in a snapshot); otherwise up to ``max_checkpoints`` host
    copies per sequence, the oldest dropped first.

    The seed's methods (``save_checkpoint``, ``find_best_checkpoint``,
    ``restore_checkpoint``, ``clear``, ``close``, ``cache_size``) work on the
    sequences by id; like every memory operation they must not run while a
    generation uses that sequence.
    """

    def __init__(self, ctx: Context, max_checkpoints: int = 16, on_device: bool = False, verbose: bool = False, *,
                 interval: int = 4096, ledgers: Sequence[Ledger] = ()) -> None:
        for name, value, low in (("max_checkpoints", max_checkpoints, 0), ("interval", interval, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.ctx = ctx
        self.max_checkpoints = max_checkpoints
        self.on_device = bool(on_device)
        self.verbose = verbose
        self.interval = interval
        self._ledgers = {ledger.seq_id: ledger for ledger in ledgers}

    # -- the engine's side ------------------------------------------------------------------
    def chunk_end(self, ledger: Ledger, prompt_len: int, end: int) -> int:
        """Where a prompt chunk that would end at ``end`` stops instead, so that a checkpoint falls due at
        its end (the next interval mark, or the prompt's tail)."""
        if self.max_checkpoints == 0:
            return end
        start = len(ledger)
        last = ledger.checkpoints[-1].n_tokens if ledger.checkpoints else 0
        for mark in (last + self.interval, prompt_len - PROMPT_TAIL):
            if start < mark < end:
                end = mark
        return end

    def due(self, ledger: Ledger, prompt_len: int) -> None:
        """Before a prompt chunk is decoded: take a checkpoint of what the sequence holds if one is due."""
        n = len(ledger)
        if n == 0 or self.max_checkpoints == 0:
            return
        last = ledger.checkpoints[-1].n_tokens if ledger.checkpoints else 0
        if n > last and (n == prompt_len - PROMPT_TAIL or n - last >= self.interval):
            self.take(ledger)

    def take(self, ledger: Ledger) -> Checkpoint | None:
        """A checkpoint of the sequence as it is now (None if llama.cpp could not write one)."""
        state = self.ctx.seq_state(ledger.seq_id, checkpoint_flags(self.on_device))
        if not state:
            return None
        checkpoint = Checkpoint(len(ledger), state, ledger.seq_id, self.on_device)
        kept = ledger.checkpoints
        if self.on_device:  # llama.cpp keeps one device state per sequence: the new one replaces it
            kept = [c for c in kept if not c.on_device]
        else:
            host = [c for c in kept if not c.on_device]
            while len(host) >= self.max_checkpoints:
                kept.remove(host.pop(0))
        ledger.checkpoints = [c for c in kept if c.n_tokens < checkpoint.n_tokens] + [checkpoint]
        if self.verbose:
            print(f"checkpoint of sequence {ledger.seq_id} at {checkpoint.n_tokens} tokens "
                  f"({len(state)} bytes{', on device' if self.on_device else ''})", file=sys.stderr)
        return checkpoint

    # -- the seed's methods -------------------------------------------------------------------
    @property
    def cache_size(self) -> int:
        """Host bytes held by the checkpoints of every sequence."""
        return sum(c.nbytes for ledger in self._ledgers.values() for c in ledger.checkpoints if not c.on_device)

    def save_checkpoint(self, current_pos: int, tokens: Sequence[int], seq_id: int = 0) -> bool:
        """Take a checkpoint of ``seq_id``, which must hold exactly ``tokens[:current_pos]``."""
        ledger = self._ledger(seq_id)
        if self.max_checkpoints == 0 or current_pos != len(ledger) or \
                [int(t) for t in tokens[:current_pos]] != ledger.tokens:
            return False
        return self.take(ledger) is not None

    def find_best_checkpoint(self, tokens: Sequence[int], seq_id: int = 0) -> Checkpoint | None:
        """The newest checkpoint of ``seq_id`` that covers a prefix of ``tokens``."""
        ledger = self._ledger(seq_id)
        shared = common_prefix(ledger.tokens, tokens)
        return next((c for c in reversed(ledger.checkpoints) if c.n_tokens <= shared), None)

    def restore_checkpoint(self, checkpoint: Checkpoint, seq_id: int = 0) -> bool:
        """Cut ``seq_id`` back to ``checkpoint`` (one of its own); False if it is not, or llama.cpp refused."""
        ledger = self._ledger(seq_id)
        return checkpoint in ledger.checkpoints and ledger.rewind(self.ctx, checkpoint)

    def clear(self) -> None:
        """Forget every sequence's checkpoints (the memory itself stays)."""
        for ledger in self._ledgers.values():
            ledger.checkpoints = []

    def close(self) -> None:
        self.clear()
        self._ledgers = {}

    def _ledger(self, seq_id: int) -> Ledger:
        ledger = self._ledgers.get(seq_id)
        if ledger is None:
            raise ValueError(f"seq_id must be one of {sorted(self._ledgers)}, got {seq_id!r}")
        return ledger
