"""The scheduler: many requests, one context, one ``llama_decode`` per tick.

Requests wait for a free sequence (a *slot*: a ``seq_id`` below
``n_seq_max`` with its ledger); the scheduling policy (:mod:`.policy`;
first come, first served by default) says which takes a free one, and
which running request gives its sequence up to a more urgent one.  Each
tick the scheduler retires cancelled requests, admits waiting ones (into
the free slot whose ledger shares the longest prefix with the prompt), packs the pending tokens of every
running sequence and then prompt chunks into one batch, decodes it, and
samples every sequence from its own logits row.  Sequences whose adapters
differ are never in the same batch: adapters are set on the whole context,
so each tick serves one adapter set, the one that has waited longest.

No thread is dedicated to this.  A caller that wants its next token and finds
none becomes the *driver* and runs ticks until it has one, serving every
other sequence on the way; the other callers wait on a condition and are
woken after each tick.  A single caller therefore decodes on its own thread
with no hand-off per token, and many callers batch together without a
server loop.  User hooks (logits processors, stopping criteria) run on the
driver's thread, outside the engine's lock.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import time
import warnings
from typing import Any, Iterator, NamedTuple, Sequence

import attrs
import numpy as np

from llama_cpp_native import lib

from .._adapters import NO_ADAPTERS, Adapters
from .context import DECODE_ABORTED, Context, RowMode
from .scope import current_scope
from .checkpoints import HybridCheckpointCache, reachable
from .ledger import Ledger, SequenceSnapshot, lookup_by_protocol
from .prefix import common_prefix
from .media import media_entries, next_chunk, text_only
from .model import Model
from .policy import Policy, Ticket
from .request import Request, RequestState, Suspended, TokenEvent
from .sampler import SequenceSampler, chain_context, token_logprob
from .step import DecodedBatch, PlainStep, Sampled, Step


class Slot:
    """A sequence id, its ledger, and the request it serves (if any)."""

    __slots__ = ("seq_id", "ledger", "request", "sampler", "pending", "prefill_at", "last_used", "forks")

    def __init__(self, seq_id: int) -> None:
        self.seq_id = seq_id
        self.ledger = Ledger(seq_id)
        self.request: Request | None = None
        self.sampler: SequenceSampler | None = None
        self.pending: list[int] = []  # tokens to decode next (the last sampled one, and any sent in)
        self.prefill_at = 0  # next prompt token to evaluate
        self.last_used = 0  # the tick it last decoded in: the least recently used slot is reused first
        self.forks: list[Slot] = []  # choices waiting to share this slot's prompt (n > 1)

    @property
    def serving(self) -> Request:
        """The request of a busy slot (the engine asks only where it knows there is one)."""
        request = self.request
        assert request is not None, f"sequence {self.seq_id} serves no request"
        return request

    @property
    def chain(self) -> SequenceSampler:
        """The sampler of a busy slot's request."""
        sampler = self.sampler
        assert sampler is not None, f"sequence {self.seq_id} has no sampler"
        return sampler


class BatchRow(NamedTuple):
    """One sequence's part of a tick's batch."""

    slot: Slot
    fed: list[int]  # the tokens decoded
    rows: list[int]  # their rows in the batch
    prefill: bool  # prompt tokens (else the step's: the pending token and any draft)


@attrs.frozen
class EngineStats:
    """The scheduler's counters at one moment (``Scheduler.stats()``): what a server's metrics and the
    benchmarks read, taken together under the engine's lock."""

    n_decodes: int  # llama_decode calls (embeddings included)
    n_tokens_decoded: int  # batch rows decoded
    n_sequences_decoded: int  # sequences served, summed over decodes
    n_prompt_tokens: int  # prompt tokens evaluated (not reused from a prefix, a fork or a cache)
    n_generated_tokens: int  # tokens handed to requests
    n_media_evaluated: int  # media chunks put into memory
    n_preemptions: int  # running requests suspended for more urgent ones
    seconds_prompt: float  # admission to first token, summed over finished requests
    seconds_generating: float  # first token to the end, summed over finished requests
    busy_sequences: int  # sequences serving a request now
    waiting: int  # requests waiting for a sequence now (suspended ones included)

    @property
    def busy_per_decode(self) -> float:
        return self.n_sequences_decoded / self.n_decodes if self.n_decodes else 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.n_prompt_tokens / self.seconds_prompt if self.seconds_prompt else 0.0

    @property
    def generated_tokens_per_second(self) -> float:
        return self.n_generated_tokens / self.seconds_generating if self.seconds_generating else 0.0


class _Outcome:
    """What one sequence's samples of a tick amount to, worked out before taking the lock."""

    __slots__ = ("events", "finish", "error")

    def __init__(self, finish: str | None = None, error: BaseException | None = None) -> None:
        self.events: list[TokenEvent] = []
        self.finish = finish
        self.error = error


class Scheduler:
    """Serves requests from any number of threads in one context (see the module's docstring)."""

    def __init__(self, model: Model, ctx: Context, adapters: Adapters, *, n_keep: int, logits_all: bool,
                 max_outputs: int = 0, step: Step | None = None, checkpoints: bool | dict[str, Any] = False,
                 policy: Policy | None = None) -> None:
        self.model = model
        self.max_outputs = max_outputs or ctx.n_batch  # logits rows one decode may ask for (n_outputs_max)
        self.ctx = ctx
        self.adapters = adapters
        self.n_keep = n_keep
        self.logits_all = logits_all
        self.step: Step = step or PlainStep()
        # the one special case of the plain step: the per-token path (fill and take) inlines it, saving two
        # calls per token; everything else goes through the protocol whatever the step
        self._plain = type(self.step) is PlainStep
        self._observes = self.step.observes_batches
        self._drafts = self.step.drafts
        self._is_eog = functools.partial(lib.llama_vocab_is_eog, model.vocab)  # no Python frame per token
        self.slots = [Slot(i) for i in range(ctx.n_seq_max)]
        # a memory that cannot always drop a suffix is checkpointed while prompts are evaluated
        # (``checkpoints``: True, or HybridCheckpointCache's options)
        self.checkpoints: HybridCheckpointCache | None = None
        if checkpoints is not False:
            options = checkpoints if isinstance(checkpoints, dict) else {}
            self.checkpoints = HybridCheckpointCache(ctx, ledgers=[s.ledger for s in self.slots], **options)
        self.waiting: collections.deque[Request] = collections.deque()
        self.policy = policy or Policy()
        self._arrivals = 0  # tickets given out
        self.current = self.slots[0]  # the sequence that eval/sample/save_state and input_ids refer to
        # re-entrant: a stream that the garbage collector finalizes inside our own critical section
        # cancels itself through this lock
        self._mutex = threading.RLock()
        self._changed = threading.Condition(self._mutex)
        self._driving = False
        self._epoch = 0  # bumped whenever something a stalled driver may be waiting for happens
        self._waiters = 0
        self._abort_pending = False
        self._dirty = False  # a submit, cancel, abort or finish happened: retire and admit at the next tick
        self._ticks = 0  # the clock of least-recently-used slot choice
        self._applied: tuple[object, object] = (None, None)  # (request key, Adapters.applied) of the last check
        # a prompt cache (llama_cpp.llama_cache): consulted when a request takes a sequence, given the
        # sequence's snapshot when a generation ends
        self.cache: Any = None
        # counters (tests, benchmarks, a server's metrics)
        self.n_decodes = 0  # llama_decode calls
        self.n_tokens_decoded = 0  # batch rows decoded
        self.n_sequences_decoded = 0  # sequences served, summed over decodes (/ n_decodes: busy slots per decode)
        self.n_prompt_tokens = 0  # prompt tokens evaluated (not reused from a prefix or a fork)
        self.n_generated_tokens = 0  # tokens handed to requests
        self.n_media_evaluated = 0  # media chunks put into memory (not reused from a prefix)
        self.n_preemptions = 0  # running requests suspended for more urgent ones (each resumes later)
        self.seconds_prompt = 0.0  # from admission to the first token, summed over finished requests
        self.seconds_generating = 0.0  # from the first token to the end, summed over finished requests

    def stats(self) -> EngineStats:
        """The counters, taken together."""
        with self._mutex:
            return EngineStats(
                n_decodes=self.n_decodes, n_tokens_decoded=self.n_tokens_decoded,
                n_sequences_decoded=self.n_sequences_decoded, n_prompt_tokens=self.n_prompt_tokens,
                n_generated_tokens=self.n_generated_tokens, n_media_evaluated=self.n_media_evaluated,
                n_preemptions=self.n_preemptions, seconds_prompt=self.seconds_prompt,
                seconds_generating=self.seconds_generating, busy_sequences=sum(map(self.busy, self.slots)),
                waiting=len(self.waiting))

    # -- the callers' side ------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Queue ``request``; RuntimeError if it could only ever wait on its own thread's streams.

        Everything about the request that can fail or take long (its checks, building its sampler chain:
        a grammar, DRY's breakers) happens here, on the caller's thread and outside the engine's lock, so
        a bad or expensive request is refused or paid for by its own caller, never by the others.
        """
        limit = self.ctx.n_ctx_seq
        scope = current_scope()
        if scope is not None:
            scope.check(len(request.prompt))
        if request.media and request.continues:
            raise ValueError("a prompt with media starts a sequence of its own: it cannot continue another")
        if len(request.prompt) >= limit and not request.continues:
            raise ValueError(f"the prompt has {len(request.prompt)} tokens, more than fit in the context window "
                             f"of {limit} tokens per sequence (n_ctx {self.ctx.n_ctx}, n_seq_max "
                             f"{self.ctx.n_seq_max})")
        if request.max_tokens > 0 and not self.ctx.causal:
            raise ValueError("this model's attention is not causal (an encoder such as BERT): it makes embeddings "
                             "and scores, not text; generation needs a causal language model")
        if request.max_tokens > 0 and request.sampler is None:
            request.sampler = self._new_sampler(request)
        try:
            with self._mutex:
                me = threading.get_ident()
                holders = [s.request for s in self._candidate_slots(request)]
                if all(r is not None and not r.cancelled and r.owner == me for r in holders):
                    raise RuntimeError(
                        f"every sequence this call could use (n_seq_max={self.ctx.n_seq_max}) is held by a "
                        "generation this thread started and has not finished (a stream or generator still open): "
                        "the call would wait for itself forever. Finish or close() that stream first, or create "
                        "the Llama with a larger n_seq_max")
                request.ticket = Ticket(self._arrivals, request.priority, request.tenant, len(request.prompt))
                self._arrivals += 1
                self.waiting.append(request)
                self._bump()
        except BaseException:
            request.close_sampler()
            raise
        if scope is not None:
            scope.join(request, self.cancel)

    def _new_sampler(self, request: Request) -> SequenceSampler:
        """The request's sampler, primed with the tokens before its generation: the prompt, or for a
        request that continues its sequence, what the sequence holds and then the prompt (read here: only
        the request's own caller advances that sequence)."""
        history = request.prompt
        if request.continues:
            seq = request.seq_hint if request.seq_hint is not None else self.current.seq_id
            history = [*self.slots[seq].ledger.tokens, *request.prompt]
        if request.media:
            history = text_only(history)
        chain = chain_context(self.model, self.ctx.n_ctx_seq, request.params, history)
        return SequenceSampler(request.params, chain, history, request.logits_processor, request.stopping_criteria)

    def next_event(self, request: Request) -> TokenEvent | None:
        """The request's next token (None once it has finished), running ticks while none is ready."""
        return self.next_of([request])[1]

    def next_of(self, requests: Sequence[Request]) -> tuple[Request, TokenEvent | None]:
        """The next token of the first of ``requests`` that has one, or a request that has finished
        (with None); runs ticks while neither is ready.  A finished request's error is raised here."""
        mutex = self._mutex
        me = threading.get_ident()
        for request in requests:
            if request.owner != me:
                request.owner = me
        with mutex:
            while True:
                for request in requests:
                    if request.events:  # the common case, inline: a token is waiting
                        return self._take_event(request, requests)
                ready = self._take_finished(requests)
                if ready is not None:
                    return ready
                changed = False
                for request in requests:
                    if not request.wanted:  # a read_ahead=0 sequence may advance while its reader waits
                        request.wanted = changed = True
                if changed and self._waiters:
                    self._bump()
                if self._driving:  # another thread runs the ticks; it wakes us after each
                    self._wait()
                    continue
                self._driving = True
                epoch = self._epoch
                mutex.release()
                progressed = False
                try:
                    progressed = self._tick()
                finally:
                    mutex.acquire()
                    self._driving = False
                    if self._waiters:
                        self._changed.notify_all()
                if not progressed and epoch == self._epoch and not any(
                        r.events or r.state == RequestState.DONE for r in requests):
                    self._wait()  # nothing can move until another thread reads, closes or submits

    def _take_event(self, request: Request, requests: Sequence[Request]) -> tuple[Request, TokenEvent]:
        """Pop the request's next event (mutex held)."""
        events = request.events
        event = events.popleft()
        if request.read_ahead and len(events) + 1 == request.read_ahead:
            self._bump()  # it was paused: a stalled driver can go on
        for r in requests:
            r.wanted = False
        return request, event

    def _take_finished(self, requests: Sequence[Request]) -> tuple[Request, None] | None:
        """One of ``requests`` that has finished (its error raised), or None (mutex held)."""
        for request in requests:
            if request.state == RequestState.DONE:
                for r in requests:
                    r.wanted = False
                if request.error is not None:
                    error, request.error = request.error, None
                    raise error
                return request, None
        return None

    def cancel(self, request: Request) -> None:
        """Stop ``request`` alone (finish "abort"); its sequence is freed at the next tick.

        Only flags change here (a waiting request stays queued, finished, until
        admission skips it), so a cancel from a finalizer that runs inside one
        of the scheduler's own critical sections disturbs nothing.
        """
        with self._mutex:
            if request.state == RequestState.DONE:
                return
            request.cancelled = True
            if request.state == RequestState.WAITING:
                request.finish("abort")
            self._bump()

    def abort(self) -> None:
        """Abort every request admitted or waiting now (finish "abort"); later requests run normally."""
        with self._mutex:
            for request in [*self.waiting, *(s.request for s in self.slots if s.request is not None)]:
                request.cancelled = True
                if request.state == RequestState.WAITING:
                    request.finish("abort")
            self._abort_pending = True
            self.ctx.request_abort()
            self._bump()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Own the context for a low-level call (eval, sample, state): no tick runs meanwhile."""
        with self._mutex:
            while self._driving:
                self._wait()
            self._driving = True
        try:
            yield
        finally:
            with self._mutex:
                self._driving = False
                self._bump()

    def busy(self, slot: Slot) -> bool:
        request = slot.request
        return request is not None and not request.cancelled

    def _candidate_slots(self, request: Request) -> list[Slot]:
        if request.continues:
            return [self.slots[request.seq_hint if request.seq_hint is not None else self.current.seq_id]]
        return self.slots

    def _wait(self) -> None:
        """Wait for a change (mutex held); the timeout only bounds the cost of a missed wake-up."""
        self._waiters += 1
        self._changed.wait(timeout=1.0)
        self._waiters -= 1

    def _bump(self) -> None:
        """Something changed that a stalled driver or a waiting caller may wait for (mutex held)."""
        self._epoch += 1
        self._dirty = True
        if self._waiters:
            self._changed.notify_all()

    # -- the tick ---------------------------------------------------------------------------
    def _tick(self) -> bool:
        """One decode for every sequence that can advance; False if nothing could."""
        ctx = self.ctx
        with self._mutex:
            if self._abort_pending:
                self._abort_pending = False
                ctx.clear_abort()
            written_outside = ctx.written_outside()
            if self._dirty or written_outside:
                self._dirty = False
                self._retire()
                if written_outside:  # after _retire: an abandoned generator's sequence is idle now
                    self._forget_idle_memory()
                self._admit()
            plan = self._plan()
        if not plan:
            return False
        rows = self._fill_batch(plan)
        if not rows:
            return False
        try:
            self._use_adapters(rows[0].slot.serving)
            t0 = time.perf_counter() if self._observes else 0.0
            rc = ctx.decode()
        except Exception as exc:  # noqa: BLE001 - llama.cpp refused the adapters: those requests end with it
            self._failed_decode(-1, rows, exc)
            return True
        self.n_decodes += 1
        self.n_tokens_decoded += ctx.batch.n
        self.n_sequences_decoded += len(rows)
        if rc != 0:
            self._failed_decode(rc, rows)
            return True
        if self._observes:
            self._show_batch(rows, time.perf_counter() - t0)
        self._ticks += 1
        now = self._ticks
        outcomes: list[tuple[Slot, _Outcome]] = []
        for slot, fed, fed_rows, prefill in rows:
            slot.last_used = now
            if self.logits_all:
                self._keep_logits(slot, fed_rows)
            slot.ledger.tokens.extend(fed)  # the decoded tokens are in memory now
            request = slot.request
            if request is None or request.cancelled:
                continue
            if request.ticket is not None:
                request.ticket.n_decoded += len(fed)
            if not prefill:
                outcomes.append((slot, self._advance(slot, fed, fed_rows)))
                continue
            request.n_prompt_evaluated += len(fed)
            self.n_prompt_tokens += len(fed)
            slot.prefill_at += len(fed)
            if slot.prefill_at == len(request.prompt):
                self._prompt_done(slot)
                if request.max_tokens == 0:  # evaluate only (Llama.eval)
                    outcomes.append((slot, _Outcome(finish="length")))
                    continue
                for member in [slot, *self._start_forks(slot)]:
                    outcomes.append((member, self._first_token(member, fed_rows[-1])))
        with self._mutex:
            for slot, outcome in outcomes:
                request = slot.request
                if request is None or request.cancelled:
                    continue
                if outcome.events and not request.first_token:
                    request.first_token = time.perf_counter()
                request.events.extend(outcome.events)
                self.n_generated_tokens += len(outcome.events)
                if outcome.finish is not None:
                    request.finish(outcome.finish, outcome.error)
                    self._release(slot)
            if self._waiters:
                self._changed.notify_all()
        return True

    def _use_adapters(self, request: Request) -> None:
        """Set ``request``'s adapters on the context, unless they are set already."""
        key = request.adapter_key
        if (key, self.adapters.applied) != self._applied:  # compared by identity first: cheap per tick
            if key != self.adapters.applied:
                self.adapters.apply(self.ctx.ptr, *request.adapters)
            self._applied = (key, self.adapters.applied)

    def _evaluate_media(self, slot: Slot) -> bool:
        """Put the media chunks at the slot's prefill point into memory (mtmd decodes each itself, outside
        the batch); False if that failed and the request ended with the error."""
        request, ledger = slot.serving, slot.ledger
        media = request.media
        while slot.prefill_at in media:
            chunk = media[slot.prefill_at]
            try:
                if len(ledger) + chunk.n_pos > self.ctx.n_ctx_seq:
                    self._make_room(slot, chunk.n_pos)
                self._use_adapters(request)
                chunk.evaluate(self.ctx, len(ledger), slot.seq_id)
            except Exception as exc:  # noqa: BLE001 - the media's failure belongs to its request
                self.ctx.seq_rm(slot.seq_id, len(ledger), -1)
                with self._mutex:
                    request.finish("error", exc)
                    self._release(slot)
                return False
            ledger.note_adapters(request.adapter_key)
            ledger.tokens.extend(media_entries(chunk.key, chunk.n_pos))
            slot.prefill_at += chunk.n_pos
            request.n_prompt_evaluated += chunk.n_pos
            self.n_prompt_tokens += chunk.n_tokens
            self.n_media_evaluated += 1
        return True

    def _show_batch(self, rows: list[BatchRow], seconds: float) -> None:
        """Hand the decoded batch to a step that observes batches (a speculative engine reads it)."""
        builder = self.ctx.batch
        n = builder.n
        seq_ids = np.repeat(np.asarray([row.slot.seq_id for row in rows], dtype=np.int32),
                            [len(row.fed) for row in rows])
        self.step.decoded(DecodedBatch(builder.tokens[:n], builder.positions[:n], seq_ids,
                                       builder.outputs[:n]), seconds)

    def _plan(self) -> list[Slot]:
        """The slots to decode this tick: those that can advance, of one adapter set (mutex held)."""
        ready: list[Slot] = []
        for slot in self.slots:
            request = slot.request
            if request is None or request.cancelled:
                continue
            if request.state == RequestState.PREFILL:
                ready.append(slot)
            elif request.state == RequestState.RUNNING and slot.pending and (
                    len(request.events) < request.read_ahead or (request.wanted and not request.events)):
                ready.append(slot)
        if len(ready) > 1:
            keys = {s.serving.adapter_key for s in ready}
            if len(keys) > 1:  # serve the adapter set that has waited longest
                key = min(ready, key=lambda s: s.last_used).serving.adapter_key
                ready = [s for s in ready if s.serving.adapter_key == key]
            # decode steps first (one token each), then prompt chunks
            ready.sort(key=lambda s: s.serving.state == RequestState.PREFILL)
        return ready

    def _ask_drafts(self, plan: list[Slot]) -> None:
        """A step that drafts is asked for every running sequence's draft at once, each sized to a fair
        share of the batch and of the decode's outputs (``_fill_batch`` cuts them to what is left)."""
        running = [s for s in plan if s.serving.state == RequestState.RUNNING]
        if not running:
            return
        pendings = [[*s.pending, *s.serving.sent] for s in running]
        fed = sum(len(p) for p in pendings)
        share = (min(self.ctx.batch.capacity, self.max_outputs) - fed) // len(running)
        wanted = []
        for slot, pending in zip(running, pendings):
            request = slot.serving
            room = min(share, request.max_tokens - request.n_generated - len(pending),
                       self.ctx.n_ctx_seq - len(slot.ledger) - len(pending))
            wanted.append((slot.seq_id, pending, slot.ledger.tokens, room))
        self.step.prepare(wanted)

    def _fill_batch(self, plan: list[Slot]) -> list[BatchRow]:
        """Write the plan into the batch: a row group per sequence."""
        batch = self.ctx.batch
        batch.n = 0
        if self._drafts:
            self._ask_drafts(plan)
        rows = []
        outputs = 0
        key = plan[0].serving.adapter_key
        for slot in plan:
            request = slot.serving
            prefill = request.state == RequestState.PREFILL
            if prefill:
                prompt = request.prompt
                if request.media and not self._evaluate_media(slot):
                    continue
                end = slot.prefill_at + batch.capacity - batch.n
                if request.media:
                    end = min(end, next_chunk(request.media, slot.prefill_at, end))
                if self.checkpoints is not None:  # memory holds exactly the ledger's tokens here
                    self.checkpoints.due(slot.ledger, len(prompt))
                    end = self.checkpoints.chunk_end(slot.ledger, len(prompt), end)
                fed = prompt[slot.prefill_at:end]
                if self.logits_all:
                    fed = fed[:self.max_outputs - outputs]
                last = slot.prefill_at + len(fed) == len(prompt)
                mode = RowMode.ALL if self.logits_all else (RowMode.LAST if last else RowMode.NONE)
            else:
                pending = [*slot.pending, *request.sent] if request.sent else slot.pending
                if self._plain:
                    fed, mode = pending, RowMode.LAST
                else:
                    room = min(batch.capacity - batch.n, self.max_outputs - outputs,
                               request.max_tokens - request.n_generated,
                               self.ctx.n_ctx_seq - len(slot.ledger)) - len(pending)
                    fed, mode = self.step.feed(slot.seq_id, pending, room)
                if self.logits_all:
                    mode = RowMode.ALL
            wanted = len(fed) if mode is RowMode.ALL else int(mode is RowMode.LAST)  # logits rows asked for
            if not fed or len(fed) > batch.capacity - batch.n or outputs + wanted > self.max_outputs:
                continue
            outputs += wanted
            ledger = slot.ledger
            if len(ledger.tokens) + len(fed) > self.ctx.n_ctx_seq:
                try:
                    self._make_room(slot, len(fed))
                except (RuntimeError, ValueError) as exc:
                    with self._mutex:
                        request.finish("error", exc)
                        self._release(slot)
                    continue
            start = len(ledger.tokens)
            if len(fed) == 1:
                first = batch.add_one(fed[0], start, slot.seq_id, mode is not RowMode.NONE)
            else:
                first = batch.add(fed, start, slot.seq_id, mode)
            if ledger.adapters is not key:
                ledger.note_adapters(key)
            if not prefill:
                slot.pending = []
                if request.sent:
                    slot.chain.accepted(request.sent)
                    request.sent.clear()
            rows.append(BatchRow(slot, fed, [first] if len(fed) == 1 else list(range(first, first + len(fed))),
                                 prefill))
        return rows

    def _make_room(self, slot: Slot, incoming: int) -> None:
        """Shift the sequence's context so that ``incoming`` more tokens fit."""
        limit = self.ctx.n_ctx_seq
        if incoming > limit:
            raise ValueError(f"{incoming} tokens do not fit in the context window of {limit} tokens per sequence")
        slot.ledger.shift(self.ctx, self.n_keep, incoming)
        self.step.rollback(slot.seq_id, 0)  # positions moved: a step that mirrors the sequence starts over

    def memory_changed(self, slot: Slot) -> None:
        """The slot's memory was replaced outside the ticks (state restored, reset): the step forgets it."""
        self.step.rollback(slot.seq_id, 0)

    def _keep_logits(self, slot: Slot, fed_rows: list[int]) -> None:
        """With logits_all: the rows of the tokens just decoded go into the ledger's scores (also when the
        request has just been released: the rows are in memory all the same)."""
        request, ledger = slot.request, slot.ledger
        if request is not None and not request.keep_scores:
            return
        scores = ledger.keep_scores(self.ctx.n_ctx_seq, self.model.n_vocab)
        for i, row in enumerate(fed_rows):
            scores[len(ledger) + i] = self.ctx.logits_row(row)

    def _prompt_done(self, slot: Slot) -> None:
        request = slot.serving
        request.state = RequestState.RUNNING
        if request.max_tokens > 0 and not request.media:
            # (a drafter cannot see media: a request with media is not speculated)
            self.step.begin(slot.seq_id, slot.ledger.tokens, request.started)
        if request.keep_prompt_logits and slot.ledger.scores is not None:
            n = len(slot.ledger)
            request.prompt_logits = slot.ledger.scores[n - len(request.prompt):n].copy()

    def _first_token(self, slot: Slot, row: int) -> _Outcome:
        try:
            token, raw = slot.chain.sample(self.ctx, row)
        except Exception as exc:  # noqa: BLE001 - a user hook's error belongs to its request
            return _Outcome(finish="error", error=exc)
        return self._outcome(slot, [Sampled(token, row, raw)])

    def _advance(self, slot: Slot, fed: list[int], fed_rows: list[int]) -> _Outcome:
        try:
            replay: list[int] = []
            samples: Sequence[tuple[int, int, Any]]  # Sampled, or the plain path's tuple of the same fields
            if self._plain:  # the plain step, without its call: one token from the last row
                token, raw = slot.chain.sample(self.ctx, fed_rows[-1])
                samples, kept = ((token, fed_rows[-1], raw),), len(fed)
            else:
                eog = None if slot.serving.params.ignore_eos else self._is_eog
                samples, kept, replay = self.step.take(slot.seq_id, self.ctx, slot.chain, fed_rows, fed, eog)
        except Exception as exc:  # noqa: BLE001 - a user hook's error belongs to its request
            return _Outcome(finish="error", error=exc)
        if kept < len(fed):  # rejected drafts leave memory
            slot.ledger.truncate(self.ctx, len(slot.ledger) - (len(fed) - kept))
            self.step.rollback(slot.seq_id, len(slot.ledger))
        outcome = self._outcome(slot, samples)
        if replay and outcome.finish is None:  # decoded again, then the last sampled token
            slot.pending = [*replay, *slot.pending]
        return outcome

    def _outcome(self, slot: Slot, samples: Sequence[tuple[int, int, Any]]) -> _Outcome:
        """The events of the sampled tokens (``Sampled`` or plain ``(token, row, raw)`` tuples), and whether
        they end the request (no lock needed)."""
        request, sampler = slot.serving, slot.chain
        outcome = _Outcome()
        stop_on_eog = not request.params.ignore_eos
        wants_row = request.logprobs is not None or request.stopping_criteria is not None
        for token, row_index, raw in samples:
            if stop_on_eog and self._is_eog(token):
                outcome.finish = "stop"
                return outcome
            row = None
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
                value, top = token_logprob(row, token, request.logprobs)
                outcome.events.append(TokenEvent(token, value, top))
            else:
                outcome.events.append(TokenEvent(token))
            if sampler.history is not None:
                sampler.accepted((token,))
            request.n_generated += 1
            if request.n_generated >= request.max_tokens:
                outcome.finish = "length"
                return outcome
        slot.pending = [samples[-1][0]]
        return outcome

    def _failed_decode(self, rc: int, rows: list[BatchRow],
                       error: BaseException | None = None) -> None:
        """Nothing of a failed batch stays in memory; its requests end (aborted, or with the error)."""
        with self._mutex:
            for slot, *_ in rows:
                self.ctx.seq_rm(slot.seq_id, len(slot.ledger), -1)
                self.step.rollback(slot.seq_id, len(slot.ledger))
                request = slot.request
                if request is None:
                    continue
                if rc == DECODE_ABORTED:
                    request.finish("abort")
                elif error is not None:
                    request.finish("error", error)
                else:
                    request.finish("error", RuntimeError(
                        f"llama_decode failed ({rc}) on a batch of {self.ctx.batch.n} tokens"
                        + (": no room left in the KV cache; increase n_ctx" if rc == 1 else "")))
                self._release(slot)
            self._bump()

    # -- slots ------------------------------------------------------------------------------
    def _forget_idle_memory(self) -> None:
        """Someone decoded on the context or edited its memory through the low-level API (guidance does,
        on ``Llama.ctx``): what the idle sequences' ledgers say their memory holds is no longer known, so
        they start empty and the next request evaluates its prompt (mutex held).  A sequence whose
        request is running keeps going: decoding on the context while a call runs on it is the caller's
        race, as with llama-cpp-python."""
        for slot in self.slots:
            if slot.request is None:
                slot.ledger.clear(self.ctx)

    def _retire(self) -> None:
        """Free the slots of cancelled and aborted requests (mutex held)."""
        for slot in self.slots:
            request = slot.request
            if request is not None and request.cancelled:
                request.finish("abort")
                self._release(slot)

    def _release(self, slot: Slot) -> None:
        """The slot's request is over: free its sampler and the slot (its ledger stays for prefix reuse)."""
        self._dirty = True  # a waiting request may take it
        request = slot.request
        if request is not None and request.started:
            end = time.perf_counter()
            first = request.first_token or end
            self.seconds_prompt += first - request.started
            self.seconds_generating += end - first
        if request is not None:
            self.step.end(slot.seq_id, request.n_generated)
            self._policy_finished(request)
        if self.cache is not None and request is not None and request.max_tokens > 0 and \
                request.finish_reason != "error":  # (a stop string cancels: "abort", memory still consistent)
            self._store(slot)
        if slot.sampler is not None:
            slot.sampler.close()
        slot.sampler = None
        slot.request = None
        slot.pending = []
        forks, slot.forks = slot.forks, []
        for fork in forks:  # choices that were to share a prompt that will not be evaluated now
            if fork.request is not None:
                fork.request.finish("abort")
            self._release(fork)

    def _admit(self) -> None:
        """Give waiting requests free slots in the policy's order, and suspend running ones where the
        policy makes room for more urgent ones (mutex held)."""
        waiting = self.waiting
        live = []
        for request in waiting:
            if request.cancelled or request.state == RequestState.DONE:
                request.close_sampler()
                self._policy_finished(request)
            else:
                live.append(request)
        if len(live) != len(waiting):
            waiting.clear()
            waiting.extend(live)
        fresh: set[int] = set()  # arrivals admitted in this round: never suspended in it
        suspended = 0
        while waiting:
            running = [s.request.ticket for s in self.slots if s.request is not None and s.request.ticket is not None]
            if any(s.request is None for s in self.slots):
                chosen = self._ask_policy("select", running)
                if chosen is None:
                    return
                slot = self._choose_slot(chosen)
                if slot is None:  # a request that continues its sequence waits for that one
                    return
                waiting.remove(chosen)
                for other in waiting:
                    if other.ticket is not None:
                        other.ticket.passed_over += 1
                assert chosen.ticket is not None  # only ticketed requests are offered
                fresh.add(chosen.ticket.arrival)
                try:
                    self._start(slot, chosen)
                except Exception as exc:  # noqa: BLE001 - the request's own failure: it ends, the slot is free
                    self._abandon_start(slot, chosen, exc)
                    continue
                self._policy_admitted(slot)
                continue
            if suspended >= len(self.slots):
                return
            for slot in self.slots:
                if slot.request is not None and slot.request.ticket is not None:
                    slot.request.ticket.preemptible = self._preemptible(slot, fresh)
            victim = self._ask_policy("preempt", running)
            if victim is None:
                return
            self._suspend(next(s for s in self.slots if s.request is victim))
            suspended += 1

    def _ask_policy(self, question: str, running: list[Ticket]) -> Request | None:
        """The waiting request the policy ``select``-s, or the running one it would ``preempt`` (None: no
        answer).  A policy that fails, or answers with a ticket it was not offered, ends the waiting
        requests it was deciding about (mutex held)."""
        waiting = {r.ticket: r for r in self.waiting if r.ticket is not None}
        policy = self.policy
        try:
            if question == "select":
                answer = policy.select(list(waiting), running)
                offered: dict[Any, Request] = waiting
            else:
                answer = policy.preempt(list(waiting), running)
                offered = {s.request.ticket: s.request for s in self.slots
                           if s.request is not None and s.request.ticket is not None and s.request.ticket.preemptible}
            if answer is None:
                return None
            if answer not in offered:
                raise ValueError(f"{question}() returned {answer!r}, which is not one of the "
                                 f"{'waiting' if question == 'select' else 'preemptible running'} tickets offered")
            return offered[answer]
        except Exception as exc:  # noqa: BLE001 - the policy's failure ends the requests it was deciding about
            error = RuntimeError(f"the scheduling policy {getattr(policy, 'name', type(policy).__name__)!r} "
                                 f"failed in {question}(): {exc}")
            error.__cause__ = exc
            for request in self.waiting:
                request.finish("error", error)
                request.close_sampler()
                self._policy_finished(request)
            self.waiting.clear()
            return None

    def _policy_admitted(self, slot: Slot) -> None:
        """Tell the policy a request took ``slot``; if the policy fails, that request ends with the error."""
        request = slot.request
        if request is None or request.ticket is None:
            return
        try:
            self.policy.admitted(request.ticket)
        except Exception as exc:  # noqa: BLE001
            request.finish("error", RuntimeError(f"the scheduling policy failed in admitted(): {exc}"))
            self._release(slot)

    def _policy_finished(self, request: Request) -> None:
        ticket, request.ticket = request.ticket, None  # told once, whichever way the request ends
        if ticket is None:
            return
        try:
            self.policy.finished(ticket)
        except Exception as exc:  # noqa: BLE001 - the request is over already: nothing else to end
            warnings.warn(f"the scheduling policy failed in finished(): {exc}", RuntimeWarning, stacklevel=2)

    def _preemptible(self, slot: Slot, fresh: set[int]) -> bool:
        """Whether ``slot``'s request can be suspended now (see :class:`.policy.Ticket`)."""
        request = slot.request
        return (request is not None and self._plain and not self.logits_all and not request.continues
                and not slot.forks and request.max_tokens > 0 and request.fork_of is None
                and request.state in (RequestState.PREFILL, RequestState.RUNNING)
                and request.ticket is not None and request.ticket.arrival not in fresh)

    def _suspend(self, slot: Slot) -> None:
        """Preempt ``slot``'s request: snapshot its sequence, free the slot, queue the request to resume
        where it stopped (its sampler, pending tokens and prompt position kept; mutex held)."""
        request = slot.request
        assert request is not None and request.ticket is not None
        request.suspended = Suspended(slot.ledger.snapshot(self.ctx), request.state, slot.pending,
                                      slot.prefill_at)
        request.sampler, slot.sampler = slot.sampler, None
        request.state = RequestState.WAITING
        request.ticket.preemptions += 1
        slot.request = None
        slot.pending = []
        self.n_preemptions += 1
        self.waiting.append(request)
        self._dirty = True

    def _resume(self, slot: Slot, request: Request) -> None:
        """Put a suspended request back: its memory (unless the slot still holds it), its place."""
        suspended = request.suspended
        assert suspended is not None
        request.suspended = None
        snapshot, ledger = suspended.snapshot, slot.ledger
        if len(ledger.tokens) != len(snapshot.tokens) or ledger.adapters != snapshot.adapters or \
                tuple(ledger.tokens) != snapshot.tokens:
            ledger.restore(self.ctx, snapshot)
            self.memory_changed(slot)
        request.state = suspended.state
        slot.pending = suspended.pending
        slot.prefill_at = suspended.prefill_at

    def _choose_slot(self, request: Request) -> Slot | None:
        """A free slot: the one that holds the longest prefix of the prompt, else the least recently used."""
        free = [s for s in self._candidate_slots(request) if s.request is None]
        if not free:
            return None
        if request.continues:
            return free[0]
        if request.suspended is not None:  # the slot that still holds its memory, if one does
            held = request.suspended.snapshot
            return max(free, key=lambda s: (s.ledger.reusable_prefix(held.tokens, held.adapters or NO_ADAPTERS),
                                            -s.last_used))
        return max(free, key=lambda s: (s.ledger.reusable_prefix(request.prompt, request.adapter_key),
                                        -s.last_used))

    def _start(self, slot: Slot, request: Request) -> None:
        """Put ``request`` into ``slot``: reuse what the sequence holds, take over its sampler (mutex held)."""
        request.seq_id = slot.seq_id
        slot.request = request
        slot.pending = []
        self.current = slot
        leader = self._leader_of(request)
        if request.suspended is not None:
            self._resume(slot, request)
        elif leader is not None and leader.serving.state == RequestState.PREFILL:
            request.state = RequestState.FORKED  # copies the leader's prompt once it is evaluated
            leader.forks.append(slot)
        elif request.continues:
            request.state = RequestState.PREFILL
            slot.prefill_at = 0
        else:
            request.state = RequestState.PREFILL
            slot.prefill_at = self._reuse_prefix(slot, request, leader)
        if not request.started:
            request.started = time.perf_counter()
        slot.sampler, request.sampler = request.sampler, None  # the slot owns it from now on

    def _abandon_start(self, slot: Slot, request: Request, error: Exception) -> None:
        """``_start`` failed part way (its memory calls, a cache's snapshot): the request ends with the error,
        and the slot is left free with a ledger that says what its memory holds (mutex held)."""
        if request.state == RequestState.FORKED:
            leader = self._leader_of(request)
            if leader is not None and slot in leader.forks:
                leader.forks.remove(slot)
        slot.ledger.clear(self.ctx)
        self.memory_changed(slot)
        request.finish("error", error)
        request.close_sampler()
        self._policy_finished(request)
        slot.request = None
        slot.pending = []
        self._dirty = True

    def _store(self, slot: Slot) -> None:
        """Give the cache the sequence's snapshot (tokens evaluated under one adapter set only)."""
        ledger = slot.ledger
        if ledger.tokens and ledger.adapters is not None:
            self.cache[list(ledger.tokens)] = ledger.snapshot(self.ctx)

    def _cached(self, prompt: list[int], key: Any, better_than: int) -> tuple[int, SequenceSnapshot] | None:
        """The cached snapshot sharing the longest prefix with ``prompt`` (under the request's adapters,
        made by a context of this one's origin), if that is longer than ``better_than``; through the
        cache's ``lookup`` when it has one, else the seed's protocol (``prompt in cache``, ``cache[prompt]``).
        A snapshot of another model or context is never restored, whatever the cache returns."""
        lookup = getattr(self.cache, "lookup", None)
        origin = self.ctx.origin
        found = lookup(prompt, key, origin) if lookup is not None else \
            lookup_by_protocol(self.cache, prompt, key, origin)
        if found is None:
            return None
        snapshot = found[1]
        if not isinstance(snapshot, SequenceSnapshot) or snapshot.adapters != key or not snapshot.fits(origin):
            return None
        usable = reachable(len(snapshot.tokens), snapshot.checkpoints,
                           min(common_prefix(snapshot.tokens, prompt), len(prompt) - 1), self.ctx.recurrent)
        return (usable, snapshot) if usable > better_than else None

    def _leader_of(self, request: Request) -> Slot | None:
        if request.fork_of is None:
            return None
        return next((s for s in self.slots if s.request is request.fork_of), None)

    def _reuse_prefix(self, slot: Slot, request: Request, donor: Slot | None) -> int:
        """Keep the longest prefix of the prompt the sequence holds (copied from ``donor`` when it holds
        more); returns where evaluation starts.  The last prompt token is always evaluated again: its
        logits are needed."""
        ctx, ledger, prompt = self.ctx, slot.ledger, request.prompt
        prefix = ledger.reusable_prefix(prompt, request.adapter_key)
        copied = donor is not None and donor.ledger.reusable_prefix(prompt, request.adapter_key) > prefix
        if copied and donor is not None:
            ctx.seq_rm(slot.seq_id, 0, -1)
            ctx.seq_cp(donor.seq_id, slot.seq_id)
            ledger.mirror(donor.ledger)
            prefix = ledger.reusable_prefix(prompt, request.adapter_key)
        prefix = ledger.reachable(min(prefix, len(prompt) - 1), ctx)
        cached = self._cached(prompt, request.adapter_key, prefix) if self.cache is not None else None
        if cached is not None:
            prefix, snapshot = cached
            try:
                ledger.restore(ctx, snapshot)
                copied = True
            except ValueError:  # not a state of this context: start from what the sequence holds
                prefix = 0
        kept = ledger.truncate(ctx, prefix) if prefix > 0 else 0
        if kept == 0:
            ledger.clear(ctx)
        ledger.adapters = request.adapter_key
        self.step.rollback(slot.seq_id, 0 if copied else kept)  # a mirroring step keeps what it evaluated
        return kept

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
            self.step.rollback(fork.seq_id, 0)
            fork.ledger.mirror(slot.ledger)
            fork.prefill_at = len(request.prompt)
            if request.keep_prompt_logits:
                request.prompt_logits = slot.serving.prompt_logits
            request.state = RequestState.RUNNING
            if not request.media:
                self.step.begin(fork.seq_id, fork.ledger.tokens, request.started)
            started.append(fork)
        return started
