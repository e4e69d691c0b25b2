"""The update: what a decoded tick means for each sequence, applied in one place.

After the runner (:mod:`.runner`) has run a tick's plan, :meth:`Update.apply` walks the plan's rows on
the tick's driver, outside the engine's lock: the decoded tokens go into the ledgers (a media chunk's
entries too), rejected drafts leave memory, prompt positions advance, a finished prompt starts its
request's step and its forks, and every running sequence samples from its rows (user hooks run here,
on the driver's thread).  What that amounts to per sequence is an :class:`Outcome`;
:meth:`Update.deliver` then hands the events to the requests and ends the finished ones, under the lock.
A failed decode leaves nothing of its batch in memory and ends the requests in it.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from .context import DECODE_ABORTED, Context
from .media import media_entries
from .planner import Planner
from .request import PromptProgress, Request, RequestState, TokenEvent
from .runner import Decoded
from ..sampling import chain_failure
from .sampler import SequenceSampler, token_logprob
from .slot import BatchRow, RowKind, Slot, TickPlan
from .stats import Counters
from .step import Sampled, Step


class Outcome:
    """What one sequence's part of a tick amounts to: its new events, and how its request ends (if it does);
    or how far its prompt is (``progress``, for a request that asked)."""

    __slots__ = ("events", "finish", "error", "progress")

    def __init__(self, finish: str | None = None, error: BaseException | None = None,
                 progress: PromptProgress | None = None) -> None:
        self.events: list[TokenEvent] = []
        self.finish = finish
        self.error = error
        self.progress = progress


class Update:
    """Applies a tick's results to ledgers, samplers, requests and counters (see the module's docstring)."""

    def __init__(self, ctx: Context, step: Step, planner: Planner, counters: Counters, *,
                 is_eog: Callable[[int], bool], n_vocab: int, logits_all: bool) -> None:
        self.ctx = ctx
        self.step = step
        self.planner = planner
        self.counters = counters
        self.is_eog = is_eog
        self.n_vocab = n_vocab
        self.logits_all = logits_all

    def apply(self, plan: TickPlan, decoded: Decoded) -> list[tuple[Slot, Outcome]]:
        """The outcome of every sequence the plan served (the tick's driver, no lock held)."""
        outcomes = [(slot, Outcome(finish="error", error=error)) for slot, error in plan.refused]
        if plan.media:
            self._media_done(plan, decoded, outcomes)
        rows = plan.rows
        if not rows:
            return outcomes
        if decoded.error is not None or decoded.status != 0:
            self._decode_failed(rows, decoded, outcomes)
            return outcomes
        counters = self.counters
        burst = decoded.chosen[:-1]  # the tokens a burst decoded after the batch, one decode each
        counters.n_decodes += 1 + len(burst)
        counters.n_burst_decodes += len(burst)
        counters.n_tokens_decoded += rows[-1].first + len(rows[-1].fed) + len(burst)
        counters.n_sequences_decoded += len(rows) + len(burst)
        self.planner.ticks += 1
        now = self.planner.ticks
        for row in rows:
            slot, fed = row.slot, row.fed
            if burst:  # (a burst's plan has this one row)
                fed = [*fed, *burst]
            request = slot.request
            if plan.ahead and (request is None or request.cancelled):
                self._unasked(slot)
                continue
            slot.last_used = now
            if self.logits_all:
                self._keep_logits(slot, row.rows)
            tokens = slot.ledger.tokens
            tokens.extend(fed)  # the decoded tokens are in memory now
            if len(tokens) > counters.n_tokens_max:
                counters.n_tokens_max = len(tokens)
            if request is None or request.cancelled:
                continue
            if request.ticket is not None:
                request.ticket.n_decoded += len(fed)
            if row.kind is RowKind.STEP:
                outcomes.append((slot, self._advance(row, request) if plan.burst is None else
                                 self._burst_taken(row, request, decoded)))
                continue
            request.n_prompt_evaluated += len(fed)
            counters.n_prompt_tokens += len(fed)
            slot.prefill_at += len(fed)
            if request.report_progress:
                outcomes.append((slot, Outcome(progress=self._progress(slot, request))))
            if slot.prefill_at == len(request.prompt):
                self._prompt_done(slot)
                if request.max_tokens == 0:  # evaluate only (Llama.eval)
                    outcomes.append((slot, Outcome(finish="length")))
                    continue
                for member in [slot, *self._start_forks(slot)]:
                    outcomes.append((member, self._first_token(member, row.first + len(fed) - 1)))
        return outcomes

    def deliver(self, outcomes: Sequence[tuple[Slot, Outcome]]) -> None:
        """Hand each outcome's events to its request and end the finished ones (the engine's lock held)."""
        for slot, outcome in outcomes:
            request = slot.request
            if request is None or request.cancelled:
                continue
            if outcome.progress is not None:
                request.progress.append(outcome.progress)
            if outcome.events and not request.first_token:
                request.first_token = time.perf_counter()
            request.events.extend(outcome.events)
            self.counters.n_generated_tokens += len(outcome.events)
            if outcome.finish is not None:
                request.finish(outcome.finish, outcome.error)
                self.planner.release(slot)

    def _media_done(self, plan: TickPlan, decoded: Decoded, outcomes: list[tuple[Slot, Outcome]]) -> None:
        """The evaluated media chunks are in memory: their entries go into the ledgers."""
        for i, (slot, chunk, _position) in enumerate(plan.media):
            error = decoded.media_errors.get(i)
            if error is not None:
                outcomes.append((slot, Outcome(finish="error", error=error)))
                continue
            request, ledger = slot.serving, slot.ledger
            ledger.note_adapters(plan.adapter_key)
            ledger.tokens.extend(media_entries(chunk.key, chunk.n_pos))
            slot.prefill_at += chunk.n_pos
            request.n_prompt_evaluated += chunk.n_pos
            self.counters.n_prompt_tokens += chunk.n_tokens
            self.counters.n_media_evaluated += 1

    @staticmethod
    def _progress(slot: Slot, request: Request) -> PromptProgress:
        return PromptProgress(len(request.prompt), request.n_prompt_reused, slot.prefill_at,
                              (time.perf_counter() - request.started) * 1000.0)

    def _unasked(self, slot: Slot) -> None:
        """A row decoded ahead for a reader that stopped before it read the tokens before it: it leaves
        memory, so the sequence holds what it would have held without the overlap."""
        at = len(slot.ledger)
        self.ctx.seq_rm(slot.seq_id, at, -1)
        self.step.rollback(slot.step_state, slot.seq_id, at)

    def _decode_failed(self, rows: list[BatchRow], decoded: Decoded, outcomes: list[tuple[Slot, Outcome]]) -> None:
        """Nothing of a failed batch stays in memory; its requests end (aborted, or with the error)."""
        if decoded.error is not None:
            outcome = Outcome(finish="error", error=decoded.error)
        elif decoded.status == DECODE_ABORTED:
            outcome = Outcome(finish="abort")
        else:
            n = rows[-1].first + len(rows[-1].fed)
            outcome = Outcome(finish="error", error=RuntimeError(
                f"llama_decode failed ({decoded.status}) on a batch of {n} tokens"
                + (": no room left in the KV cache; increase n_ctx" if decoded.status == 1 else "")))
        for row in rows:
            slot = row.slot
            self.ctx.seq_rm(slot.seq_id, len(slot.ledger), -1)
            self.step.rollback(slot.step_state, slot.seq_id, len(slot.ledger))
            outcomes.append((slot, outcome))

    def _keep_logits(self, slot: Slot, fed_rows: Sequence[int]) -> None:
        """With logits_all: the rows of the tokens just decoded go into the ledger's scores (also when the
        request has just been released: the rows are in memory all the same)."""
        request, ledger = slot.request, slot.ledger
        if request is not None and not request.keep_scores:
            return
        scores = ledger.keep_scores(self.ctx.n_ctx_seq, self.n_vocab)
        for i, row in enumerate(fed_rows):
            scores[len(ledger) + i] = self.ctx.logits_row(row)

    def _prompt_done(self, slot: Slot) -> None:
        request = slot.serving
        request.state = RequestState.RUNNING
        if request.max_tokens > 0 and not request.media:
            # (a drafter cannot see media: a request with media is not speculated)
            slot.step_state = self.step.begin(slot.seq_id, slot.ledger.tokens, request.started)
        if request.keep_prompt_logits and slot.ledger.scores is not None:
            n = len(slot.ledger)
            request.prompt_logits = slot.ledger.scores[n - len(request.prompt):n].copy()

    def _start_forks(self, slot: Slot) -> list[Slot]:
        """``slot``'s prompt is evaluated: its forks copy it and will sample from the same row."""
        forks, slot.forks = slot.forks, []
        started = []
        for fork in forks:
            request = fork.request
            if request is None or request.cancelled:
                continue
            self.ctx.seq_rm(fork.seq_id, 0, -1)
            self.ctx.seq_cp(slot.seq_id, fork.seq_id)
            self.step.rollback(None, fork.seq_id, 0)
            fork.ledger.mirror(slot.ledger)
            fork.prefill_at = len(request.prompt)
            self.counters.n_prompt_cached += fork.prefill_at
            if request.keep_prompt_logits:
                request.prompt_logits = slot.serving.prompt_logits
            request.state = RequestState.RUNNING
            if not request.media:
                fork.step_state = self.step.begin(fork.seq_id, fork.ledger.tokens, request.started)
            started.append(fork)
        return started

    def _first_token(self, slot: Slot, row: int) -> Outcome:
        try:
            token, raw = slot.chain.sample(self.ctx, row)
        except Exception as exc:  # noqa: BLE001 - a user hook's error belongs to its request
            return Outcome(finish="error", error=exc)
        return self._outcome(slot, slot.serving, slot.chain, [Sampled(token, row, raw)])

    def _advance(self, row: BatchRow, request: Request) -> Outcome:
        """A running sequence's step rows are decoded: the step takes its samples out of them."""
        slot, fed, sampler = row.slot, row.fed, row.slot.chain
        try:
            eog = None if request.params.ignore_eos else self.is_eog
            samples, kept, replay = self.step.take(slot.step_state, slot.seq_id, self.ctx, sampler, row.rows, fed,
                                                   eog)
        except Exception as exc:  # noqa: BLE001 - a user hook's error belongs to its request
            return Outcome(finish="error", error=exc)
        if kept < len(fed):  # rejected drafts leave memory
            slot.ledger.truncate(self.ctx, len(slot.ledger) - (len(fed) - kept))
            self.step.rollback(slot.step_state, slot.seq_id, len(slot.ledger))
        outcome = self._outcome(slot, request, sampler, samples)
        if replay and outcome.finish is None:  # decoded again, then the last sampled token
            slot.pending = [*replay, *slot.pending]
        return outcome

    def _burst_taken(self, row: BatchRow, request: Request, decoded: Decoded) -> Outcome:
        """A burst's chosen tokens are the step's samples (the step ``bursts``: it would have taken the same
        token from the last row); a choice that failed after them ends the request with its error."""
        last = row.rows[-1]
        if not decoded.chosen:
            return Outcome(finish="error", error=chain_failure(decoded.choice_failure, f"output {last}"))
        outcome = self._outcome(row.slot, request, row.slot.chain, [Sampled(token, last) for token in decoded.chosen])
        if decoded.choice_failure and outcome.finish is None:
            outcome.finish, outcome.error = "error", chain_failure(decoded.choice_failure, f"output {last}")
        return outcome

    def _outcome(self, slot: Slot, request: Request, sampler: SequenceSampler, samples: Sequence[Sampled]) -> Outcome:
        """The events of the sampled tokens (of ``slot``, serving ``request`` with ``sampler``), and whether
        they end it."""
        outcome = Outcome()
        stop_on_eog = not request.params.ignore_eos
        wants_row = request.logprobs is not None or request.stopping_criteria is not None
        is_eog = self.is_eog
        for token, row_index, raw in samples:
            if stop_on_eog and is_eog(token):
                request.eog_token = token
                outcome.finish = "stop"
                return outcome
            row: np.ndarray | None = None
            if wants_row:
                row = raw if raw is not None else self.ctx.logits_row(row_index)
                try:
                    if sampler.stops(token, row):
                        outcome.finish = "stop"
                        return outcome
                except Exception as exc:  # noqa: BLE001
                    outcome.finish, outcome.error = "error", exc
                    return outcome
            if request.logprobs is not None:
                assert row is not None  # asking for logprobs wants the row
                value, top = sampler.kept[row_index] if request.post_sampling_probs else \
                    token_logprob(row, token, request.logprobs)
                outcome.events.append(TokenEvent(token, value, top))
            else:
                outcome.events.append(TokenEvent(token))
            if sampler.history is not None:
                sampler.accepted((token,))
            request.n_generated += 1
            if request.n_generated >= request.max_tokens:
                outcome.finish = "length"
                return outcome
        slot.pending = [samples[-1].token]
        return outcome
