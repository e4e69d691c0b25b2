"""The planner: which requests hold a sequence, and what each sequence feeds into the next decode.

It owns the slots' bookkeeping: the waiting queue, admission in the scheduling policy's order
(:mod:`.policy`), suspending a running request for a more urgent one and resuming it, the choice of a
free slot (the one holding the longest prefix of the prompt), prefix reuse from the slot, a fork's
leader or the prompt cache, and releasing a slot when its request is over.  Those decisions change
memory only through the ledgers (:mod:`.ledger`), which keep what each sequence holds.

Each tick it ``select``-s the slots that can advance (one adapter set per tick, the one that waited
longest) and ``pack``-s their rows into a :class:`.slot.TickPlan`: prompt chunks cut at media chunks and
checkpoint marks, each running sequence's step tokens (the pending token, any draft), within the batch's
size and the decode's logits rows.  A plan whose one row is a lone sequence's step may go on as a burst
(:class:`.slot.Burst`): while nothing else waits, the runner decodes token after token of that sequence,
as many as its reader lets run ahead, within :data:`BURST_BUDGET_S`.  The runner (:mod:`.runner`) executes
the plan; the update (:mod:`.update`) applies its results.
"""

from __future__ import annotations

import collections
import time
import warnings
from typing import Any, Callable

from llama_cpp_native import ffi

from .._adapters import NO_ADAPTERS
from .checkpoints import HybridCheckpointCache, reachable
from .context import Context, RowMode
from .ledger import SequenceSnapshot, lookup_by_protocol
from .media import next_chunk
from .policy import Policy, Ticket
from .prefix import common_prefix
from .request import PromptProgress, Request, RequestState, Suspended
from .slot import BatchRow, Burst, MediaRow, RowKind, Slot, TickPlan
from .stats import Counters
from .step import DraftWanted, Step

# the share of a prompt a sequence must already hold for its memory to decide where the prompt goes
MIN_PREFIX_SHARE = 0.1
# how long a burst may go on deciding tokens before the tick ends (seconds).  A tick's Python costs about
# 30 µs; a token of a tiny model decodes in 300 µs, one of a model of 100M parameters or more in several
# milliseconds.  Bursts of up to 5 ms take the tiny model's tokens several at a time and leave a bigger
# model at one token per tick (its first decode is over the budget already): a reader then sees no
# coarser stream, and a request that arrives waits no longer for the engine than it waits for one token.
BURST_BUDGET_S = 0.005


def pin_chunk_end(request: Request, end: int) -> int:
    """Where a prompt chunk ending at ``end`` stops instead: at the request's next pin, if that comes first (the
    sequence then holds the pinned prefix exactly, for its snapshot)."""
    if request.n_pins_taken < len(request.pins):
        return min(end, request.pins[request.n_pins_taken].n_tokens)
    return end


class Planner:
    """Admission, slot bookkeeping and each tick's plan (see the module's docstring).

    Everything but ``pack`` runs under the engine's lock; ``pack`` runs on the tick's driver alone.
    """

    def __init__(self, ctx: Context, step: Step, slots: list[Slot], counters: Counters, *, n_keep: int,
                 logits_all: bool, max_outputs: int, policy: Policy,
                 checkpoints: HybridCheckpointCache | None, burst_vocab: Any = None) -> None:
        """``burst_vocab``: the model's vocabulary (whose end-of-generation tokens end a burst) where lone
        sequences may burst, None where they may not."""
        self.ctx = ctx
        self.step = step
        self.slots = slots
        self.counters = counters
        self.n_keep = n_keep
        self.logits_all = logits_all
        self.max_outputs = max_outputs  # logits rows one decode may ask for (n_outputs_max)
        self.policy = policy
        self.checkpoints = checkpoints
        # (a burst decodes ahead of its reader: what the reader does not read must be able to leave memory)
        self.burst_vocab = burst_vocab if step.bursts and not step.observes_batches and not logits_all and \
            not ctx.recurrent else None
        self.waiting: collections.deque[Request] = collections.deque()
        self.current = slots[0]  # the sequence that eval/sample/save_state and input_ids refer to
        # a prompt cache (llama_cpp.llama_cache): consulted when a request takes a sequence, given the
        # sequence's snapshot when a generation ends
        self.cache: Any = None
        self.dirty = False  # a submit, cancel, abort or finish happened: retire and admit at the next tick
        self.ticks = 0  # the clock of least-recently-used slot choice
        self.arrivals = 0  # tickets given out

    # -- requests in and out ------------------------------------------------------------------
    def enqueue(self, request: Request) -> None:
        """A new request waits for a sequence."""
        request.ticket = Ticket(self.arrivals, request.priority, request.tenant, len(request.prompt))
        self.arrivals += 1
        self.waiting.append(request)
        self.dirty = True

    def candidate_slots(self, request: Request) -> list[Slot]:
        """The slots ``request`` may take: its own sequence's when it continues one, the one it is pinned to,
        else any."""
        if request.continues:
            return [self.slots[request.seq_hint if request.seq_hint is not None else self.current.seq_id]]
        if request.sequence is not None:
            return [self.slots[request.sequence]]
        return self.slots

    def due(self, written_outside: bool) -> None:
        """Retire cancelled requests and admit waiting ones, when something happened since the last tick
        (``written_outside``: the low-level API changed the context's memory)."""
        if self.dirty or written_outside:
            self.dirty = False
            self.retire()
            if written_outside:  # after retire: an abandoned generator's sequence is idle now
                self.forget_idle_memory()
            self.admit()

    def retire(self) -> None:
        """Free the slots of cancelled and aborted requests, and take out of memory what stopped readers
        left unread, of running and of finished requests alike."""
        for slot in self.slots:
            request = slot.request
            if request is not None and request.cancelled:
                if request.state == RequestState.RUNNING:
                    self._forget_unread(slot, request)
                request.finish("abort")
                self.release(slot)
            elif request is None and slot.ended is not None and slot.ended.unread_at_cancel:
                self._forget_unread(slot, slot.ended)
                slot.ended = None

    def _forget_unread(self, slot: Slot, request: Request) -> None:
        """A reader that stopped (a stop string in the text) with tokens handed out and not read: the
        decoded ones leave memory, so that the sequence holds what it held when the last token read was
        sampled, as when the reader drives every token itself; a burst, or other readers' ticks, may have
        decoded further, up to the request's end.  Never a token the reader read, nor one of the prompt; a
        memory that cannot drop a suffix keeps them."""
        unread = min(request.unread_at_cancel, request.n_generated - 1)
        if unread > 0 and not self.ctx.recurrent:
            slot.ledger.truncate(self.ctx, len(slot.ledger) - unread)
            self.step.rollback(slot.step_state, slot.seq_id, len(slot.ledger))

    def end_running(self, error: Callable[[], BaseException]) -> None:
        """End every request that holds a sequence, each with an ``error()`` of its own, which its reader
        raises, and free the sequences.  All end before any is released: releasing a leader ends the forks
        it still holds, which must end with their error too, not as aborted."""
        for slot in self.slots:
            if slot.request is not None:
                slot.request.finish("error", error())
        for slot in self.slots:
            if slot.request is not None:  # (a fork's slot may have gone with its leader's)
                self.release(slot)

    def end_all(self, error: Callable[[], BaseException]) -> None:
        """End every request, running or waiting, as :meth:`end_running` does (the engine is closing:
        nothing will run them)."""
        self.end_running(error)
        for request in self.waiting:
            request.finish("error", error())
            request.close_sampler()
            self._policy_finished(request)
        self.waiting.clear()

    def forget_idle_memory(self) -> None:
        """Someone decoded on the context or edited its memory through the low-level API (guidance does,
        on ``Llama.ctx``): what the idle sequences' ledgers say their memory holds is no longer known, so
        they start empty and the next request evaluates its prompt.  A sequence whose request is running
        keeps going: decoding on the context while a call runs on it is the caller's race, as with
        llama-cpp-python."""
        for slot in self.slots:
            if slot.request is None:
                slot.ledger.clear(self.ctx)
                slot.ended = None

    def memory_changed(self, slot: Slot) -> None:
        """The slot's memory was replaced outside the ticks (state restored, reset): the step forgets it."""
        slot.ended = None
        self.step.rollback(slot.step_state, slot.seq_id, 0)

    def release(self, slot: Slot) -> None:
        """The slot's request is over: free its sampler and the slot (its ledger stays for prefix reuse)."""
        self.dirty = True  # a waiting request may take it
        request = slot.request
        if request is not None and request.started:
            end = time.perf_counter()
            first = request.first_token or end
            self.counters.seconds_prompt += first - request.started
            self.counters.seconds_generating += end - first
        if request is not None:
            self.step.end(slot.step_state, slot.seq_id, request.n_generated)
            self._policy_finished(request)
        slot.step_state = None
        if self.cache is not None and request is not None and request.max_tokens > 0 and \
                request.finish_reason != "error":  # (a stop string cancels: "abort", memory still consistent)
            self._store(slot)
        if slot.sampler is not None:
            slot.sampler.close()
        slot.sampler = None
        slot.request = None
        slot.ended = request if request is not None and request.state == RequestState.DONE and \
            not request.cancelled else None
        slot.pending = []
        forks, slot.forks = slot.forks, []
        for fork in forks:  # choices that were to share a prompt that will not be evaluated now
            if fork.request is not None:
                fork.request.finish("abort")
            self.release(fork)

    # -- admission --------------------------------------------------------------------------
    def admit(self) -> None:
        """Give waiting requests free slots in the policy's order, and suspend running ones where the
        policy makes room for more urgent ones."""
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
        answer; nor is the policy asked while every waiting request is held for its choice group).  A policy
        that fails, or answers with a ticket it was not offered, ends the waiting requests it was deciding
        about."""
        waiting = {r.ticket: r for r in self.waiting if r.ticket is not None and not self._held(r)
                   and (question != "select" or any(s.request is None for s in self.candidate_slots(r)))}
        if not waiting:  # (a request whose only sequence is busy is not offered: the others go first)
            return None
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

    @staticmethod
    def _held(request: Request) -> bool:
        """Whether ``request`` waits for the other calls of its choice group (once they have all submitted,
        the group's forks are set and none is held)."""
        group = request.group
        if group is None or group.paired:
            return False
        if not group.complete:
            return True
        group.pair()
        return False

    def _policy_admitted(self, slot: Slot) -> None:
        """Tell the policy a request took ``slot``; if the policy fails, that request ends with the error."""
        request = slot.request
        if request is None or request.ticket is None:
            return
        try:
            self.policy.admitted(request.ticket)
        except Exception as exc:  # noqa: BLE001
            request.finish("error", RuntimeError(f"the scheduling policy failed in admitted(): {exc}"))
            self.release(slot)

    def _policy_finished(self, request: Request) -> None:
        ticket, request.ticket = request.ticket, None  # told once, whichever way the request ends
        if ticket is None:
            return
        try:
            self.policy.finished(ticket)
        except Exception as exc:  # noqa: BLE001 - the request is over already: nothing else to end
            warnings.warn(f"the scheduling policy failed in finished(): {exc}", RuntimeWarning, stacklevel=2)

    def _preemptible(self, slot: Slot, fresh: set[int]) -> bool:
        """Whether ``slot``'s request can be suspended now (see :class:`.policy.Ticket`): not under a step
        that drafts (its drafter mirrors the sequence), nor with logits_all (the scores), nor a request
        that shares its sequence with others (continues, forks), nor one admitted in this round."""
        request = slot.request
        return (request is not None and not self.step.drafts and not self.logits_all and not request.continues
                and not slot.forks and request.max_tokens > 0 and request.fork_of is None
                and request.state in (RequestState.PREFILL, RequestState.RUNNING)
                and request.ticket is not None and request.ticket.arrival not in fresh)

    def _suspend(self, slot: Slot) -> None:
        """Preempt ``slot``'s request: snapshot its sequence, free the slot, queue the request to resume
        where it stopped (its sampler, pending tokens and prompt position kept)."""
        request = slot.request
        assert request is not None and request.ticket is not None
        request.suspended = Suspended(slot.ledger.snapshot(self.ctx), request.state, slot.pending,
                                      slot.prefill_at, slot.step_state)
        slot.step_state = None
        request.sampler, slot.sampler = slot.sampler, None
        request.state = RequestState.WAITING
        request.ticket.preemptions += 1
        slot.request = None
        slot.pending = []
        self.counters.n_preemptions += 1
        self.waiting.append(request)
        self.dirty = True

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
        slot.step_state = suspended.step_state

    def _choose_slot(self, request: Request) -> Slot | None:
        """A free slot: the one that holds the longest prefix of the prompt, else the least recently used.  A
        prefix shorter than :data:`MIN_PREFIX_SHARE` of the prompt (a chat template's opening tokens) counts as
        none, so that a new conversation does not take the sequence of another that shares only those, while a
        sequence that holds nothing worth keeping is free (llama-server's slot similarity, the same rule)."""
        free = [s for s in self.candidate_slots(request) if s.request is None]
        if not free:
            return None
        if request.continues:
            return free[0]
        if request.suspended is not None:  # the slot that still holds its memory, if one does
            held = request.suspended.snapshot
            return max(free, key=lambda s: (s.ledger.reusable_prefix(held.tokens, held.adapters or NO_ADAPTERS),
                                            -s.last_used))
        worth = MIN_PREFIX_SHARE * len(request.prompt)

        def reuse(slot: Slot) -> int:
            prefix = slot.ledger.reusable_prefix(request.prompt, request.adapter_key)
            return prefix if prefix >= worth else 0

        return max(free, key=lambda s: (reuse(s), -s.last_used))

    def _start(self, slot: Slot, request: Request) -> None:
        """Put ``request`` into ``slot``: reuse what the sequence holds, take over its sampler."""
        request.seq_id = slot.seq_id
        slot.request = request
        slot.ended = None
        slot.pending = []
        self.current = slot
        leader = self.leader_of(request)
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
            slot.prefill_at = request.n_prompt_reused = self._reuse_prefix(slot, request, leader)
            if request.pins:
                self._take_pins(slot, request)
            self.counters.n_prompt_cached += slot.prefill_at
        if not request.started:
            request.started = time.perf_counter()
            if request.report_progress and request.state == RequestState.PREFILL:
                request.progress.append(PromptProgress(len(request.prompt), slot.prefill_at, slot.prefill_at, 0.0))
        slot.sampler, request.sampler = request.sampler, None  # the slot owns it from now on

    def _abandon_start(self, slot: Slot, request: Request, error: Exception) -> None:
        """``_start`` failed part way (its memory calls, a cache's snapshot): the request ends with the error,
        and the slot is left free with a ledger that says what its memory holds."""
        if request.state == RequestState.FORKED:
            leader = self.leader_of(request)
            if leader is not None and slot in leader.forks:
                leader.forks.remove(slot)
        slot.ledger.clear(self.ctx)
        self.memory_changed(slot)
        request.finish("error", error)
        request.close_sampler()
        self._policy_finished(request)
        slot.request = None
        slot.pending = []
        self.dirty = True

    def _store(self, slot: Slot) -> None:
        """Give the cache the sequence's snapshot (tokens evaluated under one adapter set only)."""
        ledger = slot.ledger
        if ledger.tokens and ledger.adapters is not None:
            self.cache[list(ledger.tokens)] = ledger.snapshot(self.ctx)

    def _take_pins(self, slot: Slot, request: Request) -> None:
        """The pins the sequence has reached (it holds the first ``n_tokens`` of the prompt): each is kept in the
        prompt cache, by the entry that already holds its prefix (the cache's ``renew``) or by a new snapshot of
        the sequence (the cache's ``pin``).  A cache that cannot pin (the seed's protocol) stores the snapshot
        as any other entry.  Without a cache, or on a sequence evaluated under mixed adapters, a pin does
        nothing."""
        ledger, pins = slot.ledger, request.pins
        while request.n_pins_taken < len(pins) and pins[request.n_pins_taken].n_tokens <= len(ledger.tokens):
            pin = pins[request.n_pins_taken]
            request.n_pins_taken += 1
            if self.cache is None or ledger.adapters is None:
                continue
            prefix, origin = ledger.tokens[:pin.n_tokens], self.ctx.origin
            renew = getattr(self.cache, "renew", None)
            if renew is not None:
                held = renew(prefix, ledger.adapters, origin, pin.seconds)
            else:
                found = lookup_by_protocol(self.cache, prefix, ledger.adapters, origin)
                held = found is not None and found[0] >= pin.n_tokens
            if held:
                continue
            store = getattr(self.cache, "pin", None)
            if store is not None:
                store(list(ledger.tokens), ledger.snapshot(self.ctx), pin.seconds)
            else:
                self.cache[list(ledger.tokens)] = ledger.snapshot(self.ctx)
            request.n_prompt_pinned = max(request.n_prompt_pinned, pin.n_tokens - request.n_prompt_reused)

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

    def leader_of(self, request: Request) -> Slot | None:
        """The slot of the first choice of ``request``'s prompt (None: it is no fork, or that one ended)."""
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
        if request.cache_reuse > 0 and ledger.adapters == request.adapter_key and \
                ledger.can_reuse_chunks(ctx, prompt):
            prefix = min(ledger.reuse_chunks(ctx, prompt, prefix, request.cache_reuse), len(prompt) - 1)
        kept = ledger.truncate(ctx, prefix) if prefix > 0 else 0
        if kept == 0:
            ledger.clear(ctx)
        ledger.adapters = request.adapter_key
        self.step.rollback(None, slot.seq_id, 0 if copied else kept)  # a mirroring step keeps what it evaluated
        return kept

    # -- the tick's plan --------------------------------------------------------------------
    def select(self, ahead: bool = False) -> list[Slot]:
        """The slots to serve this tick: those that can advance, of one adapter set; decode steps first
        (one token each), then prompt chunks.  ``ahead``: the decode starts before the readers have seen
        the last tokens, so a request whose reader must see each token before the next is decoded
        (``read_ahead=0``) waits for the next tick."""
        ready: list[Slot] = []
        for slot in self.slots:
            request = slot.request
            if request is None or request.cancelled or (ahead and not request.read_ahead):
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
            ready.sort(key=lambda s: s.serving.state == RequestState.PREFILL)
        return ready

    def pack(self, selected: list[Slot], ahead: bool = False) -> TickPlan:
        """The rows of ``selected`` that fit one decode (a slot whose prompt is at a media chunk gets that
        chunk instead, evaluated before the batch).  A slot whose tokens cannot fit its sequence even after
        a context shift is ``refused`` with the reason (the update ends its request).  ``ahead``: the plan
        is started before its readers have read the last tokens (:meth:`select`)."""
        capacity, n_ctx_seq, max_outputs = self.ctx.n_batch, self.ctx.n_ctx_seq, self.max_outputs
        logits_all, checkpoints = self.logits_all, self.checkpoints
        if self.step.drafts:
            self._ask_drafts(selected)
        lead = selected[0].serving
        plan = TickPlan([], [], [], lead.adapter_key, lead.adapters, ahead)
        rows = plan.rows
        used = outputs = 0
        key = plan.adapter_key
        for slot in selected:
            request, ledger = slot.serving, slot.ledger
            if request.state == RequestState.PREFILL:
                prompt, media = request.prompt, request.media
                if media and slot.prefill_at in media:
                    self._plan_media(slot, plan)
                    continue
                end = slot.prefill_at + capacity - used
                if media:
                    end = min(end, next_chunk(media, slot.prefill_at, end))
                if checkpoints is not None:  # memory holds exactly the ledger's tokens here
                    checkpoints.due(ledger, len(prompt))
                    end = checkpoints.chunk_end(ledger, len(prompt), end)
                if request.n_pins_taken < len(request.pins):  # memory holds exactly the ledger's tokens here
                    self._take_pins(slot, request)
                    end = pin_chunk_end(request, end)
                fed = prompt[slot.prefill_at:end]
                if logits_all:
                    fed = fed[:max_outputs - outputs]
                last = slot.prefill_at + len(fed) == len(prompt)
                mode = RowMode.ALL if logits_all else (RowMode.LAST if last else RowMode.NONE)
                kind = RowKind.PROMPT
            else:
                pending = [*slot.pending, *request.sent] if request.sent else slot.pending
                room = min(capacity - used, max_outputs - outputs, request.max_tokens - request.n_generated,
                           n_ctx_seq - len(ledger)) - len(pending)
                fed, mode = self.step.feed(slot.step_state, slot.seq_id, pending, room)
                if logits_all:
                    mode = RowMode.ALL
                kind = RowKind.STEP
            n_fed = len(fed)
            wanted = n_fed if mode is RowMode.ALL else int(mode is RowMode.LAST)  # logits rows asked for
            if not n_fed or n_fed > capacity - used or outputs + wanted > max_outputs:
                continue
            outputs += wanted
            if len(ledger.tokens) + n_fed > n_ctx_seq:
                try:
                    self._make_room(slot, n_fed)
                except (RuntimeError, ValueError) as exc:
                    plan.refused.append((slot, exc))
                    continue
            if ledger.adapters is not key:
                ledger.note_adapters(key)
            if kind is RowKind.STEP:
                slot.pending = []
                if request.sent:
                    slot.chain.accepted(request.sent)
                    request.sent.clear()
            rows.append(BatchRow(slot, fed, len(ledger.tokens), used, mode, kind))
            used += n_fed
        if len(rows) == 1 and rows[0].kind is RowKind.STEP and self.burst_vocab is not None and not ahead \
                and not plan.media and not self.waiting:
            return plan._replace(burst=self._burst(rows[0]))
        return plan

    def _burst(self, row: BatchRow) -> Burst | None:
        """How far a lone sequence's step may go on after its decode, if its sampling is all native and its
        reader lets it take two tokens or more: no further than its reader may fall behind, its
        ``max_tokens`` and its context (its memory holds its tokens but the last)."""
        slot, request = row.slot, row.slot.serving
        sampler = slot.chain
        if request.logprobs is not None or not sampler.chooses_alone:
            return None
        n_max = min(request.read_ahead - len(request.events), request.max_tokens - request.n_generated,
                    self.ctx.n_ctx_seq - len(slot.ledger) - len(row.fed) + 1)
        if n_max < 2:
            return None
        stop_vocab = ffi.NULL if request.params.ignore_eos else self.burst_vocab
        return Burst(sampler.choice, n_max, BURST_BUDGET_S, stop_vocab)

    def _plan_media(self, slot: Slot, plan: TickPlan) -> None:
        """The media chunk at the slot's prefill point goes into the plan (room made for it first)."""
        chunk = slot.serving.media[slot.prefill_at]
        try:
            if len(slot.ledger) + chunk.n_pos > self.ctx.n_ctx_seq:
                self._make_room(slot, chunk.n_pos)
        except (RuntimeError, ValueError) as exc:
            plan.refused.append((slot, exc))
            return
        plan.media.append(MediaRow(slot, chunk, len(slot.ledger)))

    def _ask_drafts(self, selected: list[Slot]) -> None:
        """A step that drafts is asked for every running sequence's draft at once, each sized to a fair
        share of the batch and of the decode's outputs (``pack`` cuts them to what is left)."""
        running = [s for s in selected if s.serving.state == RequestState.RUNNING]
        if not running:
            return
        pendings = [[*s.pending, *s.serving.sent] for s in running]
        fed = sum(len(p) for p in pendings)
        share = (min(self.ctx.n_batch, self.max_outputs) - fed) // len(running)
        wanted = []
        for slot, pending in zip(running, pendings):
            request = slot.serving
            room = min(share, request.max_tokens - request.n_generated - len(pending),
                       self.ctx.n_ctx_seq - len(slot.ledger) - len(pending))
            wanted.append(DraftWanted(slot.step_state, slot.seq_id, pending, slot.ledger.tokens, room))
        self.step.prepare(wanted)

    def _make_room(self, slot: Slot, incoming: int) -> None:
        """Shift the sequence's context so that ``incoming`` more tokens fit."""
        limit = self.ctx.n_ctx_seq
        if incoming > limit:
            raise ValueError(f"{incoming} tokens do not fit in the context window of {limit} tokens per sequence")
        slot.ledger.shift(self.ctx, self.n_keep, incoming)
        self.step.rollback(slot.step_state, slot.seq_id, 0)  # positions moved: a mirroring step starts over
