"""The runner: executes what the planner decided, on the native context.

A tick's plan (:class:`.slot.TickPlan`) is media chunks to evaluate and one batch of rows.  The runner
sets the plan's adapters on the context (only when they differ from what is set: llama.cpp re-reserves
its graph on every change), evaluates each media chunk with mtmd's own decodes, writes the rows into the
batch, calls ``llama_decode`` once, and shows the decoded batch to a step that observes batches; a plan
with a burst goes on decoding its one sequence natively, choosing each next token by its sampler's native
choice (:class:`.slot.Burst`).  It changes no ledger and no request: it reports what happened
(:class:`Decoded`) and the update (:mod:`.update`) applies it.  Embeddings (:mod:`.embedder`) go through the same batch writing and decode.

:class:`Runner` is the seam: the scheduler calls nothing else of the native side to decode, so tests run
the planner and the update with a runner that decodes nothing.
"""

from __future__ import annotations

import functools
import time
from types import MappingProxyType
from typing import Mapping, NamedTuple, Protocol, Sequence

import numpy as np

from .._adapters import Adapters
from .context import Context, RowMode
from .slot import BatchRow, TickPlan
from .step import DecodedBatch, Step


class Decoded(NamedTuple):
    """What running a plan did."""

    status: int  # llama_decode's status (0 also when the plan had no rows; DECODE_ABORTED after an abort)
    error: BaseException | None  # set when nothing was decoded because llama.cpp refused the adapters
    media_errors: Mapping[int, BaseException]  # by index into plan.media: the chunks that are not in memory
    # a burst's chosen tokens (all but the last decoded after the batch), and the code of a choice that
    # failed after them (llama_cpp_native_choose's, 0 if none)
    chosen: Sequence[int] = ()
    choice_failure: int = 0


# the usual outcome, one object for every tick that has it (a tick of one token should allocate little)
DECODED = Decoded(0, None, MappingProxyType({}))


class Runner(Protocol):
    """Executes plans (the scheduler's only way to decode)."""

    def run(self, plan: TickPlan) -> Decoded:
        """Evaluate the plan's media chunks (at most one per slot), then decode its rows."""

    def embed(self, rows: Sequence[BatchRow]) -> int:
        """Decode ``rows`` under the default adapters (embeddings): llama_decode's status."""

    def caller_idle(self) -> None:
        """The calling thread runs no plan for a while (its request ended): let go what it holds to run
        one (:meth:`.ComputeThread.caller_idle`)."""

    def caller_waits(self) -> None:
        """The calling thread waits while another runs the ticks: plans run on behalf of several threads
        (:meth:`.ComputeThread.caller_waits`)."""


class ContextRunner:
    """The runner of a native context."""

    __slots__ = ("ctx", "adapters", "step", "_applied")

    def __init__(self, ctx: Context, adapters: Adapters, step: Step) -> None:
        self.ctx = ctx
        self.adapters = adapters
        self.step = step
        self._applied: tuple[object, object] = (None, None)  # (request key, Adapters.applied) of the last check

    def caller_idle(self) -> None:
        self.ctx.compute.caller_idle()

    def caller_waits(self) -> None:
        self.ctx.compute.caller_waits()

    def run(self, plan: TickPlan) -> Decoded:
        failed = self._evaluate_media(plan) if plan.media else DECODED.media_errors
        if not plan.rows:
            return Decoded(0, None, failed)
        self._write(plan.rows)
        try:
            self._use_adapters(plan)
        except Exception as exc:  # noqa: BLE001 - llama.cpp refused the adapters: those requests end with it
            return Decoded(-1, exc, failed)
        if plan.burst is not None:
            row, burst = plan.rows[0], plan.burst
            status, chosen, failure = self.ctx.decode_burst(burst.choice, row.slot.seq_id, row.position + len(row.fed),
                                                            burst.n_max, burst.budget_s, burst.stop_vocab)
            return Decoded(status, None, failed, chosen, failure)
        if not self.step.observes_batches:
            status = self.ctx.decode()
        else:
            t0 = time.perf_counter()
            status = self.ctx.decode()
            if status == 0:
                self._show(plan.rows, time.perf_counter() - t0)
        return DECODED if status == 0 and not failed else Decoded(status, None, failed)

    def _evaluate_media(self, plan: TickPlan) -> dict[int, BaseException]:
        """Evaluate the plan's media chunks; the failed ones, by index (their positions left empty)."""
        failed: dict[int, BaseException] = {}
        for i, media in enumerate(plan.media):
            seq_id = media.slot.seq_id
            try:
                self._use_adapters(plan)
                self.ctx.compute.run(functools.partial(media.chunk.evaluate, self.ctx, media.position, seq_id))
            except Exception as exc:  # noqa: BLE001 - the media's failure belongs to its request
                self.ctx.seq_rm(seq_id, media.position, -1)
                failed[i] = exc
        return failed

    def embed(self, rows: Sequence[BatchRow]) -> int:
        adapters = self.adapters
        adapters.apply(self.ctx.ptr, adapters.default, None)
        self._write(rows)
        return self.ctx.decode()

    def _write(self, rows: Sequence[BatchRow]) -> None:
        batch = self.ctx.batch
        batch.n = 0
        for row in rows:
            if len(row.fed) == 1:
                batch.add_one(row.fed[0], row.position, row.slot.seq_id, row.mode is not RowMode.NONE)
            else:
                batch.add(row.fed, row.position, row.slot.seq_id, row.mode)

    def _use_adapters(self, plan: TickPlan) -> None:
        """Set the plan's adapters on the context, unless they are set already."""
        key = plan.adapter_key
        if (key, self.adapters.applied) != self._applied:  # compared by identity first: cheap per tick
            if key != self.adapters.applied:
                self.adapters.apply(self.ctx.ptr, *plan.adapters)
            self._applied = (key, self.adapters.applied)

    def _show(self, rows: Sequence[BatchRow], seconds: float) -> None:
        """Hand the decoded batch to a step that observes batches (a speculative engine reads it)."""
        builder = self.ctx.batch
        n = builder.n
        seq_ids = np.repeat(np.asarray([row.slot.seq_id for row in rows], dtype=np.int32),
                            [len(row.fed) for row in rows])
        self.step.decoded(DecodedBatch(builder.tokens[:n], builder.positions[:n], seq_ids, builder.outputs[:n]),
                          [row.slot.step_state for row in rows], seconds)
