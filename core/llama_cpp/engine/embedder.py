"""Embeddings over the engine's context: many inputs per ``llama_decode``, one idle sequence each.

Like llama.cpp's examples/embedding/embedding.cpp, inputs are packed into
one batch, each as its own sequence from position 0 with every row an
output, until the batch or the sequences run out; the batch is decoded and
llama.cpp's pooled row of each sequence (or, without pooling, each token's
row) is copied out.  The context is the one generation uses, so:

- each decode runs on sequences the scheduler lends (``Scheduler.scratch()``:
  no tick meanwhile, so a generation on another thread gets its ticks between
  the decodes of a long call; only sequences no generation is using, emptied
  before and after: a generation's sequences are never touched), through the
  engine's runner;
- the adapters are set to the default set, as for a request that names none.

Models without a memory (BERT and other encoder-only models: llama.cpp
creates no KV cache for them, and ``llama_decode`` runs their encoder) and
causal models loaded with ``embeddings=True`` go through the same path.
llama.cpp needs a non-causal batch to fit in one micro-batch, and pools
per micro-batch, so a decode holds at most ``n_ubatch`` tokens unless the
rows are per token (no pooling) and a KV cache carries the attention
across micro-batches.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from llama_cpp_native import ffi, lib

from .context import DECODE_ABORTED, RowMode
from .scheduler import CLOSED, Scheduler
from .slot import BatchRow, RowKind, Slot

POOLING_NAMES = {-1: "unspecified", 0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


class Embedder:
    """What the pooling of a context gives for token inputs: a vector per input, or a row per token."""

    __slots__ = ("scheduler", "ctx", "pooling", "n_embd_out", "n_cls_out", "has_memory", "tokens_per_decode",
                 "limit")

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        ctx, model = scheduler.ctx, scheduler.model
        self.ctx = ctx
        self.pooling: int = int(lib.llama_pooling_type(ctx.ptr))
        self.n_embd_out: int = lib.llama_model_n_embd_out(model.ptr)
        self.n_cls_out: int = lib.llama_model_n_cls_out(model.ptr)
        self.has_memory = ctx.mem != ffi.NULL
        n_ubatch = lib.llama_n_ubatch(ctx.ptr)
        spans_ubatches = (self.has_memory and self.pooling == lib.LLAMA_POOLING_TYPE_NONE
                          and bool(lib.llama_get_causal_attn(ctx.ptr)))
        self.tokens_per_decode: int = ctx.n_batch if spans_ubatches else min(ctx.n_batch, n_ubatch)
        # the most tokens one input may have: one decode, and the context window of its sequence
        self.limit: int = min(self.tokens_per_decode, ctx.n_ctx_seq if self.has_memory else ctx.n_ctx,
                              ctx.max_positions or ctx.n_ctx)

    @property
    def pooling_name(self) -> str:
        return POOLING_NAMES.get(self.pooling, str(self.pooling))

    @property
    def output_width(self) -> int:
        """Floats per output row: the classifier's outputs under rank pooling, else n_embd_out."""
        return self.n_cls_out if self.pooling == lib.LLAMA_POOLING_TYPE_RANK else self.n_embd_out

    def describe_limit(self) -> str:
        """Why ``limit`` is what it is (for error messages)."""
        ctx = self.ctx
        window = f"n_ctx_seq {ctx.n_ctx_seq}" if self.has_memory else f"n_ctx {ctx.n_ctx}"
        trained = f", the model's {ctx.max_positions} trained positions" if ctx.max_positions else ""
        return (f"{self.limit} tokens (the smallest of {window}, n_batch {ctx.n_batch}, n_ubatch "
                f"{lib.llama_n_ubatch(ctx.ptr)}{trained}: an input is decoded in one piece)")

    def run(self, inputs: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """The raw output of each input, in order: a float32 vector (``output_width``) when the context
        pools, else a ``(tokens, n_embd_out)`` matrix.  Each input must hold 1..``limit`` valid token ids;
        an empty one gives an empty array without a decode."""
        for i, tokens in enumerate(inputs):
            if len(tokens) > self.limit:
                raise ValueError(f"input {i} has {len(tokens)} tokens; at most {self.describe_limit()}")
        pooled = self.pooling != lib.LLAMA_POOLING_TYPE_NONE
        empty = np.zeros(0 if pooled else (0, self.n_embd_out), dtype=np.float32)
        outputs: list[np.ndarray] = [empty] * len(inputs)
        pending = [i for i, tokens in enumerate(inputs) if len(tokens)]
        if not pending:
            return outputs
        at = 0
        while at < len(pending):
            # one decode per loan of the sequences: a generation on another thread gets its tick in between
            with self.scheduler.scratch() as scratch:
                if at == 0:
                    self.ctx.clear_abort()  # an abort() before this call was for the generations it flagged
                group = self._fill(inputs, pending[at:], scratch.slots)
                rc = scratch.decode(group)
                if rc == DECODE_ABORTED:
                    raise RuntimeError(f"{CLOSED}: close() was called during the embedding" if self.scheduler.closed
                                       else "the embedding was aborted (Llama.abort())")
                if rc != 0:
                    raise RuntimeError(f"llama_decode failed ({rc}) on a batch of {sum(len(r.fed) for r in group)} "
                                       f"tokens of {len(group)} inputs")
                self._read(group, [pending[at + k] for k in range(len(group))], outputs)
            at += len(group)
        return outputs

    def _fill(self, inputs: Sequence[Sequence[int]], pending: list[int], slots: list[Slot]) -> list[BatchRow]:
        """Rows for the first inputs of ``pending`` that fit one decode, each into a sequence of ``slots``
        from position 0, every row an output."""
        rows: list[BatchRow] = []
        used = 0
        for index in pending[:len(slots)]:
            tokens = list(inputs[index])
            if used + len(tokens) > self.tokens_per_decode:
                break
            rows.append(BatchRow(slots[len(rows)], tokens, 0, used, RowMode.ALL, RowKind.PROMPT))
            used += len(tokens)
        return rows

    def _read(self, group: list[BatchRow], indices: list[int], outputs: list[np.ndarray]) -> None:
        """Copy the decoded rows of each row group of ``group`` into ``outputs`` (``indices[i]``: the input
        of ``group[i]``)."""
        ptr = self.ctx.ptr
        if self.pooling == lib.LLAMA_POOLING_TYPE_NONE:
            n_rows = group[-1].first + len(group[-1].fed)
            base = lib.llama_get_embeddings(ptr)
            if base == ffi.NULL:
                raise RuntimeError("llama.cpp returned no token embeddings (was the context made with "
                                   "embeddings=True?)")
            rows = np.frombuffer(ffi.buffer(base, n_rows * self.n_embd_out * 4), dtype=np.float32)
            rows = rows.reshape(n_rows, self.n_embd_out)
            for index, row in zip(indices, group):
                outputs[index] = rows[row.first:row.first + len(row.fed)].copy()
            return
        width = self.output_width
        for index, batch_row in zip(indices, group):
            seq_id = batch_row.slot.seq_id
            row = lib.llama_get_embeddings_seq(ptr, seq_id)
            if row == ffi.NULL:
                raise RuntimeError(f"llama.cpp returned no pooled embedding for sequence {seq_id}")
            outputs[index] = np.frombuffer(ffi.buffer(row, width * 4), dtype=np.float32).copy()
