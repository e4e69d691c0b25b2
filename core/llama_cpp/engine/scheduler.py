"""The scheduler: many requests, one context, one ``llama_decode`` per tick.

Requests wait for a free sequence (a *slot*: a ``seq_id`` below ``n_seq_max`` with its ledger); the
scheduling policy (:mod:`.policy`; first come, first served by default) says which takes a free one, and
which running request gives its sequence up to a more urgent one.  A tick has three parts, a module each:

- the planner (:mod:`.planner`) retires cancelled requests, admits waiting ones (into the free slot whose
  ledger shares the longest prefix with the prompt), and packs the step tokens of every running sequence,
  then prompt chunks, into a plan (:class:`.slot.TickPlan`) of one adapter set;
- the runner (:mod:`.runner`) evaluates the plan's media chunks and decodes its batch;
- the update (:mod:`.update`) applies the results: ledgers, samples from every sequence's own logits
  rows, the requests' events, the counters.

This module is the callers' side, and the memory calls the facade and the embedder make through the
engine.  No thread is dedicated to the ticks.  A caller that wants its next token and finds none becomes
the *driver* and runs ticks until it has one, serving every other sequence on the way; the other callers
wait on a condition and are woken after each tick.  A single caller therefore decodes on its own thread
with no hand-off per token, and many callers batch together without a server loop.  User hooks (logits
processors, stopping criteria) run on the driver's thread, outside the engine's lock.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Sequence, overload

from .._adapters import Adapters
from .checkpoints import HybridCheckpointCache
from .choices import join_choice_group
from .context import Context
from .ledger import SequenceSnapshot
from .media import text_only
from .model import Model
from .planner import Planner
from .policy import Policy
from .prefix_summary import BLOCK_TOKENS, MAX_HASHES, PrefixSummary, summarize
from .request import PromptProgress, Request, RequestState, TokenEvent
from .runner import ContextRunner, Decoded, Runner
from .sampler import SequenceSampler, chain_context
from .scope import current_scope
from .slot import BatchRow, Slot, TickPlan
from .stats import Counters, EngineStats
from .step import PlainStep, Step
from .update import Outcome, Update


# what a call on a closed engine raises (the facade says the same of itself)
CLOSED = "this Llama instance is closed"


def _cut_short() -> RuntimeError:
    return RuntimeError(f"{CLOSED}: close() was called while this request was running or waiting")


class Scheduler:
    """Serves requests from any number of threads in one context (see the module's docstring).

    ``runner`` executes the plans (a :class:`.runner.ContextRunner` over ``ctx`` unless given: tests run
    the engine with a runner that decodes nothing).
    """

    def __init__(self, model: Model, ctx: Context, adapters: Adapters, *, n_keep: int, logits_all: bool,
                 max_outputs: int = 0, step: Step | None = None, checkpoints: bool | dict[str, Any] = False,
                 policy: Policy | None = None, runner: Runner | None = None, overlap: bool = False) -> None:
        self.model = model
        # start each next decode before the tick's tokens are handed out (see _tick)
        self.overlap = overlap
        self._in_flight: tuple[TickPlan, Decoded] | None = None  # a decode started and not yet applied
        self.ctx = ctx
        self.step: Step = step or PlainStep()
        self.runner: Runner = runner or ContextRunner(ctx, adapters, self.step)
        self.slots = [Slot(i) for i in range(ctx.n_seq_max)]
        self.counters = Counters()  # tests, benchmarks, a server's metrics (stats() takes them together)
        # a memory that cannot always drop a suffix is checkpointed while prompts are evaluated
        # (``checkpoints``: True, or HybridCheckpointCache's options)
        self.checkpoints: HybridCheckpointCache | None = None
        if checkpoints is not False:
            options = checkpoints if isinstance(checkpoints, dict) else {}
            self.checkpoints = HybridCheckpointCache(ctx, ledgers=[s.ledger for s in self.slots], **options)
        self.planner = Planner(ctx, self.step, self.slots, self.counters, n_keep=n_keep, logits_all=logits_all,
                               max_outputs=max_outputs or ctx.n_batch, policy=policy or Policy(),
                               checkpoints=self.checkpoints,
                               # (with overlap a tick's Python runs while the device computes: no burst)
                               burst_vocab=None if overlap else model.vocab)
        # whether a token ends a generation, asked of every sampled token: a set's lookup costs less than
        # the call into the vocabulary
        is_eog = frozenset(model.eog_tokens()).__contains__
        self.update = Update(ctx, self.step, self.planner, self.counters, is_eog=is_eog,
                             n_vocab=model.n_vocab, logits_all=logits_all)
        self.waiting = self.planner.waiting
        self.policy = self.planner.policy
        # re-entrant: a stream that the garbage collector finalizes inside our own critical section
        # cancels itself through this lock
        self._mutex = threading.RLock()
        self._changed = threading.Condition(self._mutex)
        self._driver: int | None = None  # the thread running ticks, or owning the context (exclusive)
        self._closed = False
        self._epoch = 0  # bumped whenever something a stalled driver may be waiting for happens
        self._waiters = 0
        self._abort_pending = False

    @property
    def current(self) -> Slot:
        """The sequence that eval/sample/save_state and input_ids refer to: the last one a request took."""
        return self.planner.current

    @property
    def cache(self) -> Any:
        """The prompt cache (llama_cpp.llama_cache), or None."""
        return self.planner.cache

    @cache.setter
    def cache(self, cache: Any) -> None:
        self.planner.cache = cache

    def stats(self) -> EngineStats:
        """The counters, taken together."""
        with self._mutex:
            return EngineStats.of(self.counters, sum(map(self.busy, self.slots)), len(self.waiting))

    def prefix_summary(self, block_tokens: int = BLOCK_TOKENS, max_hashes: int = MAX_HASHES) -> PrefixSummary:
        """The prefixes this engine can reuse: its sequences' and its prompt cache's (a cache lists its
        entries with ``prefixes(origin)``; one that cannot adds none), as block hashes
        (:mod:`.prefix_summary`)."""
        origin = self.ctx.origin  # None for a context whose model file is unknown: no fingerprint to chain from
        with self._mutex:
            held = [(list(s.ledger.tokens), s.ledger.adapters) for s in self.slots
                    if s.ledger.tokens and s.ledger.adapters is not None]
            listing = getattr(self.cache, "prefixes", None)
            if listing is not None:
                held += [(list(tokens), adapters) for tokens, adapters in listing(origin)]
        return summarize(origin.model if origin is not None else "", held, block_tokens=block_tokens,
                         max_hashes=max_hashes)

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
        if request.sequence is not None and not 0 <= request.sequence < self.ctx.n_seq_max:
            raise ValueError(f"sequence {request.sequence} does not exist: the sequences are 0.."
                             f"{self.ctx.n_seq_max - 1} (n_seq_max {self.ctx.n_seq_max})")
        if len(request.prompt) >= limit and not request.continues:
            raise ValueError(f"the prompt has {len(request.prompt)} tokens, more than fit in the context window "
                             f"of {limit} tokens per sequence (n_ctx {self.ctx.n_ctx}, n_seq_max "
                             f"{self.ctx.n_seq_max})")
        if request.max_tokens > 0 and not self.ctx.causal:
            raise ValueError("this model's attention is not causal (an encoder such as BERT): it makes embeddings "
                             "and scores, not text; generation needs a causal language model")
        with self.model.calling:  # close() on another thread frees the model only once the request is queued
            self._queue(request)
        if scope is not None:
            scope.join(request, self.cancel)

    def _queue(self, request: Request) -> None:
        """``submit``'s second half: build the request's sampler (on the caller's thread) and queue it."""
        if request.max_tokens > 0 and request.sampler is None:
            request.sampler = self._new_sampler(request)
        try:
            with self._mutex:
                if self._closed:
                    raise RuntimeError(CLOSED)
                me = threading.get_ident()
                holders = [s.request for s in self.planner.candidate_slots(request)]
                if all(r is not None and not r.cancelled and r.owner == me for r in holders):
                    raise RuntimeError(
                        f"every sequence this call could use (n_seq_max={self.ctx.n_seq_max}) is held by a "
                        "generation this thread started and has not finished (a stream or generator still open): "
                        "the call would wait for itself forever. Finish or close() that stream first, or create "
                        "the Llama with a larger n_seq_max")
                if not request.continues and request.max_tokens > 0 and request.fork_of is None:
                    group = join_choice_group()
                    if group is not None:
                        request.group = group
                        group.arrive(request, self._poke)
                self.planner.enqueue(request)
                self._bump()
        except BaseException:
            request.close_sampler()
            raise

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
        return SequenceSampler(request.params, chain, history, request.logits_processor, request.stopping_criteria,
                               kept=request.logprobs if request.post_sampling_probs else None)

    def next_event(self, request: Request) -> TokenEvent | None:
        """The request's next token (None once it has finished), running ticks while none is ready."""
        return self.next_of([request])[1]

    @overload
    def next_of(self, requests: Sequence[Request]) -> tuple[Request, TokenEvent | None]: ...

    @overload
    def next_of(self, requests: Sequence[Request],
                progress: bool) -> tuple[Request, TokenEvent | PromptProgress | None]: ...

    def next_of(self, requests: Sequence[Request],
                progress: bool = False) -> tuple[Request, TokenEvent | PromptProgress | None]:
        """The next token of the first of ``requests`` that has one, or a request that has finished
        (with None); runs ticks while neither is ready.  A finished request's error is raised here.  With
        ``progress``, a request's :class:`.PromptProgress` reports (``Request.report_progress``) come first.

        A caller whose request has ended (or failed) computes nothing until its next one: its thread lets
        its OpenMP team go (:meth:`.Runner.caller_idle`), outside the engine's lock."""
        outcome: tuple[Request, TokenEvent | PromptProgress | None] | None = None
        try:
            outcome = self._next_of(requests, progress)
            return outcome
        finally:
            if outcome is None or outcome[1] is None:
                self.runner.caller_idle()

    def _next_of(self, requests: Sequence[Request],
                 progress: bool) -> tuple[Request, TokenEvent | PromptProgress | None]:
        mutex = self._mutex
        me = threading.get_ident()
        for request in requests:
            if request.owner != me:
                request.owner = me
        with mutex:
            while True:
                if progress:
                    for request in requests:
                        if request.progress:
                            return request, request.progress.popleft()
                for request in requests:
                    if request.events:  # the common case, inline: a token is waiting
                        return self._take_event(request, requests)
                ready = self._take_finished(requests)
                if ready is not None:
                    return ready
                changed = False
                for request in requests:
                    if not request.wanted:
                        request.wanted = True
                        # only a read_ahead=0 sequence waits for its reader (Planner.select): a driver stalled
                        # on it must look again; for any other, waking every waiter would wake them for nothing
                        changed = changed or not request.read_ahead
                if changed and self._waiters:
                    self._bump()
                if self._closed:  # close() cut the request short, or it came as the engine closed
                    raise _cut_short()
                if self._driver is not None:  # another thread runs the ticks; it wakes us after each
                    self.runner.caller_waits()
                    self._wait()
                    continue
                self._driver = me
                epoch = self._epoch
                progressed = False
                try:
                    progressed = self._tick()
                finally:
                    self._driver = None
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
                # it finished with tokens its reader has not read: they leave its sequence's memory at the
                # next tick or state call, unless another request has taken the sequence since
                if request.events and any(slot.ended is request for slot in self.slots):
                    request.unread_at_cancel = len(request.events)
                    self._bump()
                return
            request.cancelled = True
            request.unread_at_cancel = len(request.events)
            if request.state == RequestState.WAITING:
                request.finish("abort")
            self._bump()

    def abort(self) -> None:
        """Abort every request admitted or waiting now (finish "abort"); later requests run normally."""
        with self._mutex:
            for request in self._live_requests():
                request.cancelled = True
                if request.state == RequestState.WAITING:
                    request.finish("abort")
            self._abort_pending = True
            self.ctx.request_abort()
            self._bump()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called: nothing runs on the context any more."""
        return self._closed

    def _live_requests(self) -> list[Request]:
        """The requests waiting or holding a sequence (mutex held)."""
        return [*self.waiting, *(s.request for s in self.slots if s.request is not None)]

    def close(self) -> None:
        """Stop serving, before the context is freed (idempotent): a tick running on another thread is
        aborted and waited for, and every request, running or waiting, ends with a RuntimeError that its
        reader raises.  Nothing runs on the context after this returns: a call that would run something raises."""
        with self._mutex:
            if self._closed:
                return
            me = threading.get_ident()
            if self._driver == me:
                raise RuntimeError("close() was called from inside a generation (a hook such as a logits "
                                   "processor or a stopping criterion): the generation is still using the context")
            self._closed = True  # no tick starts from now on
            for request in self._live_requests():
                request.cancelled = True  # the tick in flight delivers them nothing more
            if self._driver is not None:
                self.ctx.request_abort()  # a long prompt's decode returns early
                while self._driver is not None:
                    self._wait()
            self._driver = me  # for good
            self.planner.end_all(_cut_short)
            self._bump()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Own the context for a low-level call (eval, sample, state): no tick runs meanwhile, a decode
        started ahead has been applied and stopped readers' requests retired (:meth:`_tidy`: what memory
        holds is what the ledgers and the readers say)."""
        with self._mutex:
            while self._driver is not None or self._closed:
                if self._closed:
                    raise RuntimeError(CLOSED)
                self._wait()
            self._driver = threading.get_ident()
        try:
            with self._mutex:
                self._tidy()
            yield
        finally:
            with self._mutex:
                self._driver = None
                self._bump()

    def settle(self) -> None:
        """Apply a decode started ahead and retire stopped readers' requests (:meth:`_tidy`), unless a tick
        is running (which does both): for the facade's low-level accessors (``Llama.ctx``, the last
        logits), which must see the memory the ledgers describe.  It does not wait, so a user hook running
        inside a tick may call it."""
        with self._mutex:
            if self._driver is not None or (self._in_flight is None and not self._any_cancelled()):
                return
            self._driver = threading.get_ident()
            try:
                self._tidy()
            finally:
                self._driver = None
                self._bump()

    def _tidy(self) -> None:
        """Make memory what the ledgers and the readers say it is before someone outside the ticks reads it
        (the lock held, driving): apply a decode started ahead, and retire the requests whose readers
        stopped, which takes their unread tokens out of memory (:meth:`.Planner.retire`)."""
        if self._in_flight is not None:
            self.update.deliver(self._settle())
        if self._any_cancelled():
            self.planner.retire()

    def _any_cancelled(self) -> bool:
        """Whether a stopped reader's request waits for :meth:`.Planner.retire` (running, or finished with
        tokens unread)."""
        return any(slot.request.cancelled if slot.request is not None else
                   slot.ended is not None and slot.ended.unread_at_cancel > 0 for slot in self.slots)

    def busy(self, slot: Slot) -> bool:
        request = slot.request
        return request is not None and not request.cancelled

    def _wait(self) -> None:
        """Wait for a change (mutex held); the timeout only bounds the cost of a missed wake-up."""
        self._waiters += 1
        self._changed.wait(timeout=1.0)
        self._waiters -= 1

    def _poke(self) -> None:
        """Something outside the engine changed what admission decides (a choice group's call ended)."""
        with self._mutex:
            self._bump()

    def _bump(self) -> None:
        """Something changed that a stalled driver or a waiting caller may wait for (mutex held)."""
        self._epoch += 1
        self.planner.dirty = True
        if self._waiters:
            self._changed.notify_all()

    # -- the tick ---------------------------------------------------------------------------
    def _tick(self) -> bool:
        """One decode started (unless one is in flight), applied and delivered, for every sequence that can
        advance; False if nothing could.

        Called with the engine's lock held, and returns with it held: plans are made and delivered under
        it, packed, run and applied without it.  With ``overlap`` the next decode is started right after
        this one's events are delivered and before any reader is woken: on a GPU, ``llama_decode`` returns
        once the graph is queued, so the device computes while the readers take their tokens, and the next
        tick applies it (its logits are read then).  A sequence whose reader must see a token before the
        next one is decoded (``read_ahead=0``) is not started ahead (:meth:`.Planner.select`)."""
        try:
            if self._in_flight is None and not self._launch(ahead=False):
                return False
            self.update.deliver(self._settle())
            if self.overlap:
                self._launch(ahead=True)
            return True
        except BaseException as exc:
            self._abandon_running(exc)
            raise

    def _abandon_running(self, error: BaseException) -> None:
        """A tick raised (a plugin's step, or a KeyboardInterrupt that landed on the driver's thread between
        two native calls, as Ctrl-C in a notebook does) anywhere between admission and delivery: a decode may
        be in memory that no ledger has taken in, a ledger edit may be half done, and a sequence's next token
        may be lost with the tick.  So every running request ends, with an error naming ``error`` (the
        driver's own reader gets ``error`` itself), and every sequence starts empty: what an idle one held
        was only a prefix to reuse (the lock held)."""
        self._in_flight = None
        self.ctx.synchronize()
        self.planner.end_running(lambda: RuntimeError(f"the engine's tick failed on another thread: {error!r}"))
        for slot in self.slots:
            slot.ledger.clear(self.ctx)
            self.memory_changed(slot)
        self._bump()

    def _launch(self, ahead: bool) -> bool:
        """Plan a decode and start it (the lock held, and released while it is packed and run); False when
        no sequence can advance."""
        ctx, planner, mutex = self.ctx, self.planner, self._mutex
        if self._abort_pending:
            self._abort_pending = False
            ctx.clear_abort()
        planner.due(ctx.written_outside())
        selected = planner.select(ahead)
        if not selected:
            return False
        mutex.release()
        try:
            plan = planner.pack(selected, ahead)
            if not (plan.rows or plan.media or plan.refused):
                return False
            self._in_flight = (plan, self.runner.run(plan))
        finally:
            mutex.acquire()
        return True

    def _settle(self) -> list[tuple[Slot, Outcome]]:
        """Apply the decode in flight (the lock held, and released while it is applied): the outcomes to
        deliver."""
        in_flight, self._in_flight = self._in_flight, None
        assert in_flight is not None
        mutex = self._mutex
        mutex.release()
        try:
            # reading a row's logits would wait for the decode, but a decode whose rows are all dropped
            # (their readers stopped) reads none, and the next one must not start over it
            self.ctx.synchronize()
            return self.update.apply(*in_flight)
        finally:
            mutex.acquire()

    # -- the engine's memory, for the facade and the embedder (each under exclusive()) ------------
    def memory_changed(self, slot: Slot) -> None:
        """The slot's memory was replaced outside the ticks (a low-level state call): the step forgets it."""
        self.planner.memory_changed(slot)

    def clear_idle(self) -> None:
        """Empty the memory of every sequence no generation is using (``Llama.reset``)."""
        for slot in self.slots:
            if not self.busy(slot):
                self.clear_sequence(slot)

    def clear_sequence(self, slot: Slot) -> int:
        """Empty an idle slot's memory; how many tokens it held."""
        held = len(slot.ledger)
        slot.ledger.clear(self.ctx)
        self.memory_changed(slot)
        return held

    def load_state(self, data: bytes, tokens: Sequence[int], adapters: Any, checkpoints: Sequence[Any]) -> int:
        """Replace the whole context's state (``Llama.load_state``; no generation may run): every sequence
        is then of unknown content, except the current one, which holds ``tokens``.  Returns the bytes
        llama.cpp read (the current ledger is only set when it read them all)."""
        read = self.ctx.set_state(data)
        for slot in self.slots:  # what the other sequences hold now is unknown: never reused
            slot.ledger.tokens = []
            slot.ledger.checkpoints = []
            self.memory_changed(slot)
        if read == len(data):
            ledger = self.current.ledger
            ledger.tokens = [int(t) for t in tokens]
            ledger.adapters = adapters
            ledger.checkpoints = [c for c in checkpoints if c.n_tokens <= len(ledger.tokens)]
        return read

    def restore_sequence(self, slot: Slot, snapshot: SequenceSnapshot) -> None:
        """Put a snapshot into an idle slot's sequence, which becomes the current one."""
        self.memory_changed(slot)
        slot.ledger.restore(self.ctx, snapshot)
        self.planner.current = slot

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Scratch]:
        """The idle sequences, for decodes of the caller's own (embeddings), with no tick meanwhile."""
        with self.exclusive():
            idle = [slot for slot in self.slots if not self.busy(slot)]
            if not idle:
                raise RuntimeError(f"every sequence of this context (n_seq_max={len(self.slots)}) is in use by "
                                   "a running generation; finish or close it first, or create the Llama with a "
                                   "larger n_seq_max")
            current = self.current
            idle.sort(key=lambda slot: (len(slot.ledger) > 0, slot is current, slot.last_used))
            scratch = Scratch(self, idle)
            try:
                yield scratch
            finally:
                scratch.clear()


class Scratch:
    """Idle sequences lent for decodes outside the ticks (``Scheduler.scratch``): ``slots`` are those
    holding nothing first, then any but the current one (``eval`` continues it), least recently used
    first.  A sequence is emptied before its rows are decoded, and again when the loan ends."""

    def __init__(self, scheduler: Scheduler, slots: list[Slot]) -> None:
        self.scheduler = scheduler
        self.slots = slots
        self._used: list[Slot] = []

    def decode(self, rows: Sequence[BatchRow]) -> int:
        """Decode ``rows`` (each of one of ``slots``, from position 0) under the default adapters, through
        the engine's runner and counted: llama_decode's status."""
        scheduler = self.scheduler
        for row in rows:
            slot = row.slot
            slot.ledger.clear(scheduler.ctx)  # positions start at 0: nothing it held may be attended to
            scheduler.memory_changed(slot)
            slot.ledger.tokens.extend(row.fed)  # (in memory until the loan ends, whatever the decode does)
            self._used.append(slot)
        status = scheduler.runner.embed(rows)
        counters = scheduler.counters
        counters.n_decodes += 1
        counters.n_tokens_decoded += sum(len(row.fed) for row in rows)
        return status

    def clear(self) -> None:
        """Nothing the loan decoded stays in memory."""
        scheduler = self.scheduler
        for slot in self._used:
            slot.ledger.clear(scheduler.ctx)
            scheduler.memory_changed(slot)
        self._used = []
