"""The speculative step: a proposer's drafts, verified in the tick's one decode.

For each running sequence the step asks the engine (a
:class:`llama_cpp.llama_speculative.LlamaSpecEngine`) for a draft to follow
the pending token, feeds ``[last, draft...]`` with logits on every row, and
after the decode samples row by row with the sequence's own sampler while it
agrees with the draft (llama.cpp's ``common_sampler_sample_and_accept_n``):
every token kept is the one the target chooses at that position, so the
output is the target's whatever the engine proposes.  The scheduler rolls
the rejected rows out of memory and tells the step, which tells the engine.

A recurrent (or hybrid) target cannot drop a suffix of its state; llama.cpp
keeps its last ``n_rs_seq`` states for that.  A longer draft is verified from
a checkpoint instead (llama.cpp's tools do the same): the sequence's
recurrent state is saved before the decode, and after a rejection it is put
back and the accepted tokens are decoded again with the next tick.
"""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any, Sequence

import numpy as np
from llama_cpp_native import lib

from ..llama_speculative import DraftRequest, LlamaSpecEngine
from .context import Context, RowMode
from .sampler import SequenceSampler, TokenHistory
from .step import DecodedBatch, DraftWanted, Sampled

STATS_KEYS = (
    "drafted", "verified", "accepted", "begin_calls", "draft_calls", "process_calls", "accept_calls",
    "generated_drafts", "accepted_drafts", "accepted_draft_tokens", "draft_batch_acceptance_rate",
    "draft_token_acceptance_rate", "mean_accepted_length", "acceptance_rate_per_position", "acceptance_rate",
    "verification_steps", "rollbacks", "native_rollbacks", "checkpoint_rollbacks",
    "begin_seconds", "draft_seconds", "target_decode_seconds", "target_sync_seconds", "process_seconds",
    "accept_seconds",
    "checkpoint_captures", "checkpoint_restores", "checkpoint_verification_reuses", "checkpoint_native_captures",
    "checkpoint_native_restores", "checkpoint_device_captures", "checkpoint_device_restores",
    "checkpoint_native_verification_rollbacks", "checkpoint_buffer_bytes", "checkpoint_capture_seconds",
    "checkpoint_restore_seconds",
    "generation_tokens", "generation_seconds", "generation_tokens_per_second", "time_to_first_token_seconds",
    "sustained_tokens", "sustained_seconds", "sustained_tokens_per_second", "decode_tokens", "decode_seconds",
    "decode_tokens_per_second",
)


class SequenceStats:
    """Counters and timings of one request's speculation (``Llama.last_speculative_stats``)."""

    __slots__ = ("counts", "seconds", "per_position", "drafted_at", "started", "first_token", "ended",
                 "checkpoint_bytes")

    def __init__(self, started: float) -> None:
        self.counts = dict.fromkeys(("drafted", "accepted", "begin_calls", "draft_calls", "process_calls",
                                     "accept_calls", "generated_drafts", "accepted_drafts", "verification_steps",
                                     "rollbacks", "generation_tokens", "checkpoint_captures",
                                     "checkpoint_restores"), 0)
        self.seconds = dict.fromkeys(("begin", "draft", "target_decode", "target_sync", "process", "accept",
                                      "checkpoint_capture", "checkpoint_restore"), 0.0)
        self.checkpoint_bytes = 0  # the largest checkpoint taken
        self.per_position: list[int] = []  # accepted at draft position i
        self.drafted_at: list[int] = []  # drafts that reached position i
        self.started = started
        self.first_token: float | None = None
        self.ended: float | None = None

    def verified(self, n_drafted: int, n_accepted: int) -> None:
        c = self.counts
        c["drafted"] += n_drafted
        c["accepted"] += n_accepted
        c["accept_calls"] += 1
        c["generated_drafts"] += 1
        c["verification_steps"] += 1
        c["accepted_drafts"] += n_accepted > 0
        c["rollbacks"] += n_accepted < n_drafted
        for store, n in ((self.drafted_at, n_drafted), (self.per_position, n_accepted)):
            if len(store) < n:
                store.extend([0] * (n - len(store)))
            for i in range(n):
                store[i] += 1

    def as_dict(self) -> dict[str, Any]:
        c, s = self.counts, self.seconds
        drafted, accepted = c["drafted"], c["accepted"]
        end = self.ended if self.ended is not None else time.perf_counter()
        total = max(end - self.started, 0.0)
        ttft = (self.first_token - self.started) if self.first_token is not None else 0.0
        sustained_tokens = max(c["generation_tokens"] - 1, 0)
        sustained = max(end - self.first_token, 0.0) if self.first_token is not None else 0.0

        def rate(n: float, d: float) -> float:
            return n / d if d else 0.0

        out: dict[str, Any] = {
            "drafted": drafted, "verified": drafted, "accepted": accepted,
            "begin_calls": c["begin_calls"], "draft_calls": c["draft_calls"], "process_calls": c["process_calls"],
            "accept_calls": c["accept_calls"], "generated_drafts": c["generated_drafts"],
            "accepted_drafts": c["accepted_drafts"], "accepted_draft_tokens": accepted,
            "draft_batch_acceptance_rate": rate(c["accepted_drafts"], c["generated_drafts"]),
            "draft_token_acceptance_rate": rate(accepted, drafted),
            "mean_accepted_length": 1.0 + rate(accepted, c["accept_calls"]),
            "acceptance_rate_per_position": [rate(a, d) for a, d in zip(self.per_position + [0] * (
                len(self.drafted_at) - len(self.per_position)), self.drafted_at)],
            "acceptance_rate": rate(accepted, drafted),
            "verification_steps": c["verification_steps"], "rollbacks": c["rollbacks"],
            "native_rollbacks": c["rollbacks"] - c["checkpoint_restores"],
            "checkpoint_rollbacks": c["checkpoint_restores"],
            **{f"{name}_seconds": value for name, value in s.items()},
            "checkpoint_captures": c["checkpoint_captures"], "checkpoint_restores": c["checkpoint_restores"],
            # host copies of the recurrent state: never reused, never on the device, never llama.cpp's own
            **dict.fromkeys(("checkpoint_verification_reuses", "checkpoint_native_captures",
                             "checkpoint_native_restores", "checkpoint_device_captures", "checkpoint_device_restores",
                             "checkpoint_native_verification_rollbacks"), 0),
            "checkpoint_buffer_bytes": self.checkpoint_bytes,
            "generation_tokens": c["generation_tokens"], "generation_seconds": total,
            "generation_tokens_per_second": rate(c["generation_tokens"], total),
            "time_to_first_token_seconds": ttft,
            "sustained_tokens": sustained_tokens, "sustained_seconds": sustained,
            "sustained_tokens_per_second": rate(sustained_tokens, sustained),
        }
        out["decode_tokens"] = out["sustained_tokens"]
        out["decode_seconds"] = out["sustained_seconds"]
        out["decode_tokens_per_second"] = out["sustained_tokens_per_second"]
        return out


def empty_stats() -> dict[str, Any]:
    """The stats of a generation without speculation: every counter zero."""
    stats = SequenceStats(time.perf_counter())
    stats.ended = stats.started
    return stats.as_dict()


class _Sequence:
    """What the step knows of one sequence between its feed and its take."""

    __slots__ = ("draft", "asked", "error", "stats", "active", "checkpoint", "tokens")

    def __init__(self, stats: SequenceStats, tokens: Sequence[int]) -> None:
        self.draft: list[int] = []
        # the sequence's tokens as the engine's input_ids: appended as the memory grows, cut on rollback,
        # so a tick costs the new tokens, not a copy of the whole history
        self.tokens = TokenHistory(tokens)
        self.checkpoint: bytes | None = None  # the recurrent state before this tick's draft
        self.asked = False  # the engine was asked for a draft this tick (it hears the outcome, even of none)
        self.error: BaseException | None = None
        self.stats = stats
        self.active = True  # False after a process() failure: this request drafts no more


def _duration(seconds: float) -> str:
    """Seconds as the seed prints phase times: milliseconds below one second, so small costs show."""
    return f"{seconds:.3f} s" if seconds >= 1.0 else f"{seconds * 1000.0:.3f} ms"


def stats_summary(name: str, stats: dict[str, Any]) -> str:
    """The summary llama-cpp-python prints (to stderr, when verbose) after a speculative generation:
    calls, acceptance, phase times, checkpoints and output speed, from ``last_speculative_stats``."""
    per_position = ", ".join(f"{rate:.1%}" for rate in stats["acceptance_rate_per_position"])
    native, device = stats["checkpoint_native_captures"], stats["checkpoint_device_captures"]
    mode = (f"mixed (native {native:,}, device {device:,})" if native and device
            else "native-rs" if native else "on-device" if device else "none")
    return "\n".join([
        f"Llama.generate: {name} summary",
        f"  Calls       begin {stats['begin_calls']:,} | draft {stats['draft_calls']:,} | "
        f"process {stats['process_calls']:,} | accept {stats['accept_calls']:,}",
        f"  Acceptance  batches {stats['accepted_drafts']:,} / {stats['generated_drafts']:,} = "
        f"{stats['draft_batch_acceptance_rate']:.1%} | tokens {stats['accepted_draft_tokens']:,} / "
        f"{stats['drafted']:,} = {stats['draft_token_acceptance_rate']:.1%} | "
        f"mean step length {stats['mean_accepted_length']:.2f} | by position [{per_position}]",
        "  Phase time  " + " | ".join(f"{label} {_duration(stats[key + '_seconds'])}" for label, key in (
            ("begin", "begin"), ("draft", "draft"), ("target decode", "target_decode"),
            ("target sync", "target_sync"), ("process", "process"), ("accept", "accept"))),
        f"  Checkpoint  capture {stats['checkpoint_captures']:,} in {_duration(stats['checkpoint_capture_seconds'])} | "
        f"restore {stats['checkpoint_restores']:,} in {_duration(stats['checkpoint_restore_seconds'])} | "
        f"reuse {stats['checkpoint_verification_reuses']:,} | mode {mode}",
        f"  Output      {stats['generation_tokens']:,} tokens / {stats['generation_seconds']:.3f} s = "
        f"{stats['generation_tokens_per_second']:.2f} tok/s | "
        f"sustained {stats['sustained_tokens_per_second']:.2f} tok/s | "
        f"TTFT {stats['time_to_first_token_seconds'] * 1000.0:.2f} ms | rollbacks {stats['rollbacks']:,} "
        f"(native {stats['native_rollbacks']:,}, checkpoint {stats['checkpoint_rollbacks']:,})",
    ])


class SpeculativeStep:
    """The scheduler's step for speculative decoding over one :class:`LlamaSpecEngine`.

    ``max_draft`` caps every draft (the decode's per-sequence outputs minus
    the last token).  ``rollback_states`` is None for a target whose memory
    drops any suffix, else the states llama.cpp keeps per sequence
    (``n_rs_seq``): a longer draft is verified from a checkpoint.  With
    ``verbose`` the summary of each finished request's speculation is printed
    to stderr, as llama-cpp-python does.
    """

    observes_batches = True
    drafts = True
    bursts = False

    def __init__(self, engine: LlamaSpecEngine, *, max_draft: int, name: str = "", ctx: Context | None = None,
                 rollback_states: int | None = None, verbose: bool = False) -> None:
        self.engine = engine
        self.verbose = verbose
        self.max_draft = max(0, max_draft)
        self.name = name or type(engine).__name__
        self.ctx = ctx
        self.rollback_states = rollback_states
        self.last_stats: dict[str, Any] = empty_stats()
        self._totals = {"drafted": 0, "accepted": 0, "verification_steps": 0}
        self._accepted_per_position: list[int] = []
        self._warned = False

    # -- lifecycle, called by the scheduler ---------------------------------------------
    def begin(self, seq_id: int, tokens: Sequence[int], started: float) -> _Sequence:
        """A request starts generating on ``seq_id`` with ``tokens`` in memory: its state."""
        state = _Sequence(SequenceStats(started), tokens)
        t0 = state.stats.first_token = time.perf_counter()  # the prompt is in: its first token comes now
        try:
            self.engine.begin(tokens, seq_id)
        except Exception as exc:  # noqa: BLE001 - the request ends with it at its first take
            state.error = RuntimeError(f"speculative engine {self.name!r} failed to begin: {exc}")
            state.error.__cause__ = exc
        state.stats.seconds["begin"] += time.perf_counter() - t0
        state.stats.counts["begin_calls"] += 1
        return state

    def end(self, state: _Sequence | None, seq_id: int, n_generated: int) -> None:
        """The request on ``seq_id`` is over; its stats become ``last_stats``."""
        if state is None:
            return
        stats = state.stats
        stats.counts["generation_tokens"] = n_generated
        stats.ended = time.perf_counter()
        self.last_stats = stats.as_dict()
        if self.verbose:
            print(stats_summary(self.name, self.last_stats), file=sys.stderr)
        for key in self._totals:
            self._totals[key] += stats.counts[key]
        per_position = self._accepted_per_position
        per_position.extend([0] * (len(stats.per_position) - len(per_position)))
        for i, n in enumerate(stats.per_position):
            per_position[i] += n

    def totals(self) -> dict[str, Any]:
        """Counters over every finished request, under llama-server's metric names (a server's /metrics)."""
        return {
            "spec_decode_num_draft_tokens_total": self._totals["drafted"],
            "spec_decode_num_accepted_tokens_total": self._totals["accepted"],
            "spec_decode_num_drafts_total": self._totals["verification_steps"],
            "spec_decode_num_accepted_tokens_per_pos_total": list(self._accepted_per_position),
        }

    def rollback(self, state: _Sequence | None, seq_id: int, n_tokens: int) -> None:
        """The target's memory of ``seq_id`` now holds its first ``n_tokens`` tokens."""
        if state is not None:
            state.tokens.n = min(state.tokens.n, n_tokens)
        self.engine.rollback(n_tokens, seq_id)

    def decoded(self, batch: DecodedBatch, states: Sequence[_Sequence | None], seconds: float) -> None:
        """After every target decode: the engine sees the batch; drafting sequences are timed."""
        drafting = [s for s in states if s is not None]
        for state in drafting:
            if state.draft:
                state.stats.seconds["target_decode"] += seconds
        t0 = time.perf_counter()
        try:
            self.engine.process(batch)
        except Exception as exc:  # noqa: BLE001 - drafting stops for these requests; their output stays right
            for state in drafting:
                state.active = False
            if not self._warned:
                self._warned = True
                warnings.warn(f"speculative engine {self.name!r} failed to process a batch ({exc}); the requests "
                              "in it go on without drafts", RuntimeWarning, stacklevel=2)
        elapsed = time.perf_counter() - t0
        for state in drafting:
            state.stats.seconds["process"] += elapsed
            state.stats.counts["process_calls"] += 1

    # -- the Step protocol ----------------------------------------------------------------
    def prepare(self, wanted: Sequence[DraftWanted]) -> None:
        """Before the batch is packed: drafts for every running sequence at once (one ``draft_many`` call,
        so a draft model decodes them together)."""
        asked: list[tuple[_Sequence, DraftRequest]] = []
        for state, seq_id, pending, history, n_max in wanted:
            if state is None:
                continue
            state.draft, state.asked = [], False
            n_max = min(n_max, self.max_draft)
            if not state.active or state.error is not None or len(pending) != 1 or n_max <= 0:
                continue
            state.asked = True
            tokens = state.tokens  # every change but an append came through rollback: catch up the appends
            if tokens.n < len(history):
                tokens.extend(history[tokens.n:])
            asked.append((state, DraftRequest(seq_id, tokens.view(), len(history),
                                              int(pending[0]), n_max)))
        if not asked:
            return
        t0 = time.perf_counter()
        if type(self.engine).draft_many is LlamaSpecEngine.draft_many:  # one call each: an error is its own
            for state, request in asked:
                self._collect([(state, request)], lambda r=request: [self.engine.draft(
                    r.input_ids, n_past=r.n_past, id_last=r.id_last, n_max=r.n_max, seq_id=r.seq_id)])
        else:
            self._collect(asked, lambda: self.engine.draft_many([r for _s, r in asked]))
        elapsed = (time.perf_counter() - t0) / len(asked)
        for state, _request in asked:
            state.stats.seconds["draft"] += elapsed
            state.stats.counts["draft_calls"] += 1

    def _collect(self, asked: list[tuple[_Sequence, DraftRequest]], call: Any) -> None:
        """Run one drafting ``call`` for ``asked`` and keep each draft (an error ends those requests)."""
        try:
            proposed = call()
            if len(proposed) != len(asked):
                raise ValueError(f"draft_many returned {len(proposed)} drafts for {len(asked)} sequences")
            for (state, request), tokens in zip(asked, proposed):
                state.draft = [int(t) for t in np.asarray(tokens).reshape(-1)[:request.n_max]]
        except Exception as exc:  # noqa: BLE001 - ends these requests (at their take), not the others
            for state, _request in asked:
                state.error = RuntimeError(f"speculative engine {self.name!r} failed to draft: {exc}")
                state.error.__cause__ = exc
                state.draft = []

    def feed(self, state: _Sequence | None, seq_id: int, pending: Sequence[int],
             n_max: int) -> tuple[list[int], RowMode]:
        """``pending`` and the prepared draft after it, cut to the ``n_max`` tokens that still fit."""
        if state is None or not state.draft:
            return list(pending), RowMode.LAST
        draft = state.draft = state.draft[:max(0, n_max)]
        if not draft:
            return list(pending), RowMode.LAST
        if self.rollback_states is not None and len(draft) > self.rollback_states:
            self._capture(seq_id, state)
        return [*pending, *draft], RowMode.ALL

    def _capture(self, seq_id: int, state: _Sequence) -> None:
        """Save the recurrent part of the sequence's state before a draft too long to roll back natively."""
        t0 = time.perf_counter()
        assert self.ctx is not None  # given whenever rollback_states is
        state.checkpoint = self.ctx.seq_state(seq_id, lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
        stats = state.stats
        stats.seconds["checkpoint_capture"] += time.perf_counter() - t0
        stats.counts["checkpoint_captures"] += 1
        stats.checkpoint_bytes = max(stats.checkpoint_bytes, len(state.checkpoint))

    def take(self, state: _Sequence | None, seq_id: int, ctx: Context, sampler: SequenceSampler,
             rows: Sequence[int], fed: Sequence[int], eog: Any = None) -> tuple[list[Sampled], int, list[int]]:
        """Verify the draft: sample each row while the sampler agrees with it; how many fed tokens stay,
        and what to decode again (after a rejection restored a checkpoint)."""
        if state is not None and state.error is not None:
            error, state.error = state.error, None
            raise error
        draft = state.draft if state is not None else []
        if not draft:
            token, raw = sampler.sample(ctx, rows[-1])
            if state is not None and state.asked:
                state.asked = False
                self.engine.accept(0, seq_id)
            return [Sampled(token, rows[-1], raw)], len(fed), []
        assert state is not None  # a draft is only made for a sequence the step knows
        t0 = time.perf_counter()
        first = len(fed) - len(draft) - 1  # the row of the last pending token
        history = sampler.history
        samples: list[Sampled] = []
        pushed = 0
        try:
            for i in range(len(draft) + 1):
                row = rows[first + i]
                token, raw = sampler.sample(ctx, row)
                samples.append(Sampled(token, row, raw))
                if i == len(draft) or token != draft[i] or (eog is not None and eog(token)):
                    break
                if history is not None:  # the next row's hooks see this token
                    history.append(token)
                    pushed += 1
        finally:
            if pushed and history is not None:
                history.n -= pushed  # the scheduler adds what it hands out
        n_accepted = len(samples) - 1
        checkpoint, state.checkpoint = state.checkpoint, None
        state.draft, state.asked = [], False
        stats = state.stats
        stats.seconds["target_sync"] += time.perf_counter() - t0
        stats.verified(len(draft), n_accepted)
        t0 = time.perf_counter()
        self.engine.accept(n_accepted, seq_id)
        stats.seconds["accept"] += time.perf_counter() - t0
        kept = len(fed) - (len(draft) - n_accepted)
        if checkpoint is None or kept == len(fed):
            return samples, kept, []
        # the recurrent state went past the rejection: put it back, and decode the accepted tokens again
        t0 = time.perf_counter()
        if not ctx.set_seq_state(seq_id, checkpoint, lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY):
            raise RuntimeError(f"llama.cpp refused the state checkpoint of sequence {seq_id}")
        stats.seconds["checkpoint_restore"] += time.perf_counter() - t0
        stats.counts["checkpoint_restores"] += 1
        return samples, 0, list(fed[:kept])

    def close(self) -> None:
        self.engine.close()
