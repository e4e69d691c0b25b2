"""The planner and the update driven with a runner that decodes nothing: no model is loaded.

A fake context holds each sequence's memory as a list of tokens by position (the memory calls the
ledgers make edit it), the fake runner writes a plan's rows into it, and a fake sampler "samples" a
token that is a function of the token decoded at its row.  So every test can check what the engine
promises besides the text: the ledgers mirror memory after every tick, prompts are evaluated once,
and the plan respects the batch's limits.
"""

from __future__ import annotations

import contextlib

import json
import threading
import time
from typing import Any, Sequence

import numpy as np
import pytest
from llama_cpp_native import ffi

from llama_cpp.engine import (BatchRow, ChoiceGroup, Decoded, PromptProgress, Request, RequestState, RowKind, RowMode,
                              Sampled, Scheduler, TickPlan)
from llama_cpp.engine.context import DECODE_ABORTED
from llama_cpp.engine.media import MediaChunk, media_entries
from llama_cpp.engine.policy import Policy, Ticket
from llama_cpp.sampling import SamplingParams

EOG = 0


def next_token(token: int) -> int:
    """The fake model: what follows ``token`` (never EOG, which tests put in by hand)."""
    return token % 97 + 1


class FakeContext:
    """Dimensions and memory calls of a context; memory is a token list per sequence."""

    causal = True
    recurrent = False
    origin = None
    window = 0

    def __init__(self, n_seq_max: int = 2, n_ctx_seq: int = 64, n_batch: int = 16) -> None:
        self.n_seq_max, self.n_ctx_seq, self.n_batch = n_seq_max, n_ctx_seq, n_batch
        self.n_ctx = n_ctx_seq * n_seq_max
        self.memory: dict[int, list[int]] = {seq: [] for seq in range(n_seq_max)}
        self.row_tokens: dict[int, int] = {}  # batch row: the token decoded there (the last decode)
        self.n_state_reads = 0
        self.n_aborts = 0  # request_abort() calls

    def written_outside(self) -> bool:
        return False

    def synchronize(self) -> None:
        pass

    def clear_abort(self) -> None:
        pass

    def request_abort(self) -> None:
        self.n_aborts += 1

    def seq_rm(self, seq_id: int, p0: int, p1: int = -1) -> bool:
        held = self.memory[seq_id]
        del held[p0:len(held) if p1 < 0 else p1]
        return True

    def seq_cp(self, src: int, dst: int) -> None:
        self.memory[dst] = list(self.memory[src])

    def seq_shift(self, seq_id: int, p0: int, delta: int, p1: int = -1) -> None:
        pass  # the list closes the gap seq_rm left

    def can_shift(self) -> bool:
        return True

    def window_holds(self, seq_id: int, n: int) -> bool:
        return True

    def seq_state(self, seq_id: int, flags: int = 0) -> bytes:
        self.n_state_reads += 1
        return json.dumps(self.memory[seq_id]).encode()

    def set_seq_state(self, seq_id: int, data: bytes, flags: int = 0) -> bool:
        self.memory[seq_id] = json.loads(data)
        return True

    def logits_row(self, row: int) -> np.ndarray:
        logits = np.zeros(100, dtype=np.float32)
        logits[next_token(self.row_tokens[row])] = 1.0
        return logits


class FakeRunner:
    """Runs plans on the fake context's memory; ``status`` makes the next decode fail."""

    def __init__(self, ctx: FakeContext) -> None:
        self.ctx = ctx
        self.plans: list[TickPlan] = []
        self.status = 0
        self.n_caller_idle = 0
        self.waited: list[int] = []  # the threads that waited while another drove
        self.hold: threading.Event | None = None  # set: the next run waits for it (a decode that takes long)
        self.chosen: list[list[int]] = []  # what each burst chose

    def caller_idle(self) -> None:
        self.n_caller_idle += 1

    def caller_waits(self) -> None:
        self.waited.append(threading.get_ident())

    def run(self, plan: TickPlan) -> Decoded:
        hold, self.hold = self.hold, None
        if hold is not None:
            assert hold.wait(10)
        self.plans.append(plan)
        for media in plan.media:
            held = self.ctx.memory[media.slot.seq_id]
            assert len(held) == media.position, "media evaluated where the sequence does not end"
            held.extend(media_entries(media.chunk.key, media.chunk.n_pos))
        status, self.status = self.status, 0
        if status:
            return Decoded(status, None, {})
        self.ctx.row_tokens = {}
        assert sum(len(row.fed) for row in plan.rows) <= self.ctx.n_batch
        for row in plan.rows:
            held = self.ctx.memory[row.slot.seq_id]
            assert len(held) == row.position, "rows decoded where the sequence does not end"
            held.extend(row.fed)
            for i, token in zip(row.rows, row.fed):
                self.ctx.row_tokens[i] = token
        if plan.burst is None:
            return Decoded(0, None, {})
        assert len(plan.rows) == 1 and plan.burst.choice == "a native choice"
        held, chosen = self.ctx.memory[plan.rows[0].slot.seq_id], [next_token(plan.rows[0].fed[-1])]
        while len(chosen) < plan.burst.n_max and not (chosen[-1] == EOG and plan.burst.stop_vocab == FakeModel.vocab):
            held.append(chosen[-1])  # decoded alone, and the next token chosen from it
            chosen.append(next_token(chosen[-1]))
        self.chosen.append(chosen)
        return Decoded(0, None, {}, chosen)

    def embed(self, rows: Sequence[BatchRow]) -> int:
        raise AssertionError("no embeddings here")


class FakeSampler:
    history = None
    chooses_alone = False  # a Python sampler: its sequence never bursts
    choice = None

    def __init__(self) -> None:
        self.accepted_tokens: list[int] = []
        self.closed = False

    def sample(self, ctx: FakeContext, row: int) -> tuple[int, None]:
        return next_token(ctx.row_tokens[row]), None

    def stops(self, token: int, logits: Any) -> bool:
        return False

    def accepted(self, tokens: Sequence[int]) -> None:
        self.accepted_tokens.extend(tokens)

    def close(self) -> None:
        self.closed = True


class FakeModel:
    n_vocab = 100
    vocab = "the vocabulary"  # what a burst's plan names as the one whose end-of-generation tokens end it
    calling = contextlib.nullcontext()

    @staticmethod
    def eog_tokens() -> list[int]:
        return [EOG]


class LowestPriority(Policy):
    name = "lowest-priority"

    def select(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        return min(waiting, key=lambda t: (t.priority, t.arrival))

    def preempt(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
        best = min(t.priority for t in waiting)
        victims = [t for t in running if t.preemptible and t.priority > best]
        return max(victims, key=lambda t: t.priority) if victims else None


def engine(n_seq_max: int = 2, n_batch: int = 16, n_ctx_seq: int = 64, **options: Any) -> tuple[Scheduler,
                                                                                                 FakeContext,
                                                                                                 FakeRunner]:
    ctx = FakeContext(n_seq_max, n_ctx_seq, n_batch)
    runner = FakeRunner(ctx)
    scheduler = Scheduler(FakeModel(), ctx, None, n_keep=0, logits_all=False, runner=runner,  # type: ignore[arg-type]
                          **options)
    return scheduler, ctx, runner


class NativeChoiceSampler(FakeSampler):
    """A sampler whose choice is all native (as a greedy or plain sampled request's): its sequence may burst."""

    chooses_alone = True
    choice = "a native choice"


def request(prompt: Sequence[int], max_tokens: int = 4, sampler: FakeSampler | None = None,
            params: SamplingParams | None = None, **fields: Any) -> Request:
    return Request(list(prompt), params or SamplingParams(), max_tokens, sampler=sampler or FakeSampler(),  # type: ignore[arg-type]
                   **fields)


def run(scheduler: Scheduler, req: Request) -> list[int]:
    tokens = []
    while (event := scheduler.next_event(req)) is not None:
        tokens.append(event.token)
    return tokens


def solo(prompt: Sequence[int], max_tokens: int) -> list[int]:
    """What the fake model generates after ``prompt``."""
    out, last = [], prompt[-1]
    for _ in range(max_tokens):
        last = next_token(last)
        out.append(last)
    return out


def assert_mirrors(scheduler: Scheduler, ctx: FakeContext) -> None:
    """Every ledger says exactly what its sequence's memory holds."""
    for slot in scheduler.slots:
        assert slot.ledger.tokens == ctx.memory[slot.seq_id], f"sequence {slot.seq_id}"


def test_one_request_runs_through_plan_run_update():
    scheduler, ctx, runner = engine()
    req = request([5, 6, 7], max_tokens=4)
    scheduler.submit(req)
    assert run(scheduler, req) == solo([5, 6, 7], 4)
    assert req.finish_reason == "length" and req.n_prompt_evaluated == 3
    assert runner.n_caller_idle == 1  # told once, when its reader saw it end
    first = runner.plans[0].rows[0]
    assert (first.fed, first.position, first.first, first.mode, first.kind) == \
        ([5, 6, 7], 0, 0, RowMode.LAST, RowKind.PROMPT)
    steps = [plan.rows[0] for plan in runner.plans[1:]]
    assert all(row.kind is RowKind.STEP and row.mode is RowMode.LAST and len(row.fed) == 1 for row in steps)
    # the last sampled token is never decoded: 3 prompt tokens and 3 of the 4 generated
    assert ctx.memory[0] == [5, 6, 7, *solo([5, 6, 7], 3)]
    assert_mirrors(scheduler, ctx)
    stats = scheduler.stats()
    assert (stats.n_decodes, stats.n_prompt_tokens, stats.n_generated_tokens, stats.busy_sequences) == (4, 3, 4, 0)
    assert scheduler.slots[0].sampler is None and req.sampler is None  # the sampler was closed with the slot


def test_packing_respects_the_batch_and_puts_steps_first():
    scheduler, ctx, runner = engine(n_seq_max=2, n_batch=8)
    a, b = request(range(1, 7), max_tokens=3), request(range(11, 17), max_tokens=3)
    scheduler.submit(a)
    scheduler.submit(b)
    scheduler.planner.due(False)
    plan = scheduler.planner.pack(scheduler.planner.select())
    assert [(r.slot.seq_id, r.fed, r.first, r.mode) for r in plan.rows] == \
        [(0, [1, 2, 3, 4, 5, 6], 0, RowMode.LAST), (1, [11, 12], 6, RowMode.NONE)]
    outcomes = scheduler.update.apply(plan, runner.run(plan))
    assert [len(o.events) for _slot, o in outcomes] == [1]  # a's first token; b is part way through its prompt
    scheduler.update.deliver(outcomes)
    plan = scheduler.planner.pack(scheduler.planner.select())
    # a's decode step first (one token), then the rest of b's prompt
    assert [(r.slot.seq_id, r.kind, len(r.fed)) for r in plan.rows] == [(0, RowKind.STEP, 1), (1, RowKind.PROMPT, 4)]
    assert plan.rows[1].first == 1 and plan.rows[1].position == 2
    scheduler.update.deliver(scheduler.update.apply(plan, runner.run(plan)))
    assert_mirrors(scheduler, ctx)
    assert run(scheduler, a) == solo(range(1, 7), 3) and run(scheduler, b) == solo(range(11, 17), 3)
    assert scheduler.counters.n_prompt_tokens == 12
    assert_mirrors(scheduler, ctx)


def test_a_prompt_reuses_the_longest_prefix_a_free_sequence_holds():
    scheduler, ctx, runner = engine(n_seq_max=2)
    first = request([1, 2, 3, 4], max_tokens=1)
    scheduler.submit(first)
    run(scheduler, first)
    again = request([1, 2, 3, 4, 9], max_tokens=1)
    scheduler.submit(again)
    run(scheduler, again)
    assert again.seq_id == first.seq_id and again.n_prompt_evaluated == 1
    assert scheduler.counters.n_prompt_tokens == 5
    assert_mirrors(scheduler, ctx)


def test_rejected_drafts_leave_memory_and_the_step_is_told():
    class Drafting:
        observes_batches = False
        drafts = False
        bursts = False

        def __init__(self) -> None:
            self.rollbacks: list[tuple[int, int]] = []
            self.rejected = 0
            self.states: list[list[int]] = []
            self.ended: list[int] = []

        def begin(self, seq_id: int, tokens: Sequence[int], started: float) -> list[int]:
            self.states.append([seq_id])
            return self.states[-1]

        def prepare(self, wanted: Any) -> None:
            raise AssertionError("a step that does not draft is not asked to prepare")

        def feed(self, state: Any, seq_id: int, pending: Sequence[int], n_max: int) -> tuple[list[int], RowMode]:
            assert state is self.states[-1]  # the slot keeps what begin returned
            # a draft of two tokens after the pending one: the first right, the second wrong
            right = next_token(pending[-1])
            return [*pending, right, EOG + 50][:len(pending) + max(0, n_max)], RowMode.ALL

        def take(self, state: Any, seq_id: int, ctx: Any, sampler: Any, rows: Sequence[int], fed: Sequence[int],
                 eog: Any = None) -> tuple[list[Sampled], int, list[int]]:
            # the row of the pending token, and of the right draft token when it was fed
            verified = rows[len(fed) - 3:len(fed) - 1] if len(fed) >= 3 else rows[-1:]
            samples = [Sampled(sampler.sample(ctx, row)[0], row) for row in verified]
            if len(fed) < 3:
                return samples, len(fed), []
            self.rejected += 1
            return samples, len(fed) - 1, []  # the wrong draft token is not kept

        def decoded(self, batch: Any, states: Any, seconds: float) -> None:
            raise AssertionError("not observing")

        def rollback(self, state: Any, seq_id: int, n_tokens: int) -> None:
            self.rollbacks.append((seq_id, n_tokens))

        def end(self, state: Any, seq_id: int, n_generated: int) -> None:
            assert state is self.states[-1]
            self.ended.append(n_generated)

        def close(self) -> None:
            pass

    step = Drafting()
    scheduler, ctx, runner = engine(n_seq_max=1, step=step)
    req = request([3, 4], max_tokens=6)
    scheduler.submit(req)
    assert run(scheduler, req) == solo([3, 4], 6)
    assert any(len(row.fed) == 3 for plan in runner.plans for row in plan.rows)  # drafts were decoded
    assert_mirrors(scheduler, ctx)
    assert step.rejected > 0 and sum(n > 0 for _seq, n in step.rollbacks) == step.rejected
    assert step.ended == [6] and scheduler.slots[0].step_state is None


def test_forks_copy_the_evaluated_prompt():
    scheduler, ctx, runner = engine(n_seq_max=3)
    leader = request([7, 8, 9], max_tokens=2)
    forks = [request([7, 8, 9], max_tokens=2, fork_of=leader) for _ in range(2)]
    for r in (leader, *forks):
        scheduler.submit(r)
    scheduler.planner.due(False)
    assert [r.state for r in forks] == [RequestState.FORKED, RequestState.FORKED]
    outputs = [run(scheduler, r) for r in (leader, *forks)]
    assert outputs == [solo([7, 8, 9], 2)] * 3
    assert scheduler.counters.n_prompt_tokens == 3  # evaluated once, for three choices
    assert len(runner.plans[0].rows) == 1
    assert_mirrors(scheduler, ctx)


def test_priority_admission_order():
    scheduler, ctx, _runner = engine(n_seq_max=1, policy=LowestPriority())
    low, mid, high = (request([i], max_tokens=1, priority=p) for i, p in ((1, 9), (2, 5), (3, 0)))
    for r in (low, mid, high):
        scheduler.submit(r)
    order = []
    for _ in range(3):
        scheduler.planner.due(False)
        slot = scheduler.slots[0]
        order.append(slot.serving)
        run(scheduler, slot.serving)
    assert order == [high, mid, low]


def test_fcfs_admission_order_is_arrival():
    scheduler, _ctx, _runner = engine(n_seq_max=1)
    requests = [request([i], max_tokens=1, priority=-i) for i in range(1, 4)]
    for r in requests:
        scheduler.submit(r)
    order = []
    for _ in requests:
        scheduler.planner.due(False)
        order.append(scheduler.slots[0].serving)
        run(scheduler, scheduler.slots[0].serving)
    assert order == requests


def test_preemption_snapshots_and_resumes_without_evaluating_again():
    scheduler, ctx, runner = engine(n_seq_max=1, policy=LowestPriority())
    low = request([1, 2, 3], max_tokens=6, priority=9)
    scheduler.submit(low)
    got = [scheduler.next_event(low).token for _ in range(2)]  # type: ignore[union-attr]
    urgent = request([40, 41], max_tokens=2, priority=0)
    submitter = threading.Thread(target=scheduler.submit, args=(urgent,))  # another caller's request
    submitter.start()
    submitter.join()
    urgent.owner = threading.get_ident()  # read here
    scheduler.planner.due(False)
    assert low.state is RequestState.WAITING and low.suspended is not None
    assert scheduler.slots[0].serving is urgent and scheduler.counters.n_preemptions == 1
    assert low.sampler is not None  # the suspended request keeps its sampler
    assert run(scheduler, urgent) == solo([40, 41], 2)
    got += run(scheduler, low)
    assert got == solo([1, 2, 3], 6)
    assert low.n_prompt_evaluated == 3  # its prompt was evaluated once
    assert scheduler.counters.n_prompt_tokens == 5
    assert low.ticket is None and urgent.ticket is None  # the policy was told both finished
    assert_mirrors(scheduler, ctx)


def test_a_failed_decode_leaves_nothing_in_memory_and_ends_its_requests():
    scheduler, ctx, runner = engine(n_seq_max=2)
    a, b = request([1, 2], max_tokens=3), request([5, 6], max_tokens=3)
    scheduler.submit(a)
    scheduler.submit(b)
    scheduler.next_event(a)
    ctx_before = {seq: list(held) for seq, held in ctx.memory.items()}
    runner.status = 1
    # the fake runner's failed decode wrote nothing; the update cuts memory back to the ledgers
    with pytest.raises(RuntimeError, match="no room left in the KV cache"):
        run(scheduler, a)
    assert b.finish_reason == "error"
    assert ctx.memory == ctx_before
    assert_mirrors(scheduler, ctx)
    assert all(slot.request is None for slot in scheduler.slots)


def test_an_aborted_decode_ends_its_requests_with_abort():
    scheduler, ctx, runner = engine(n_seq_max=1)
    req = request([1, 2], max_tokens=3)
    scheduler.submit(req)
    runner.status = DECODE_ABORTED
    assert run(scheduler, req) == []
    assert req.finish_reason == "abort"


def test_a_full_sequence_shifts_its_context_and_stays_mirrored():
    scheduler, ctx, runner = engine(n_seq_max=1, n_ctx_seq=8, n_batch=8)
    req = request([1, 2, 3, 4, 5, 6, 7], max_tokens=20)
    scheduler.submit(req)
    tokens = run(scheduler, req)
    # the context shift makes room while generating (n_keep 0: half the sequence goes each time)
    assert tokens == solo([1, 2, 3, 4, 5, 6, 7], 20)
    assert all(len(held) <= 8 for held in ctx.memory.values())
    assert_mirrors(scheduler, ctx)


def test_a_sequence_that_cannot_shift_is_refused_in_the_plan():
    scheduler, ctx, runner = engine(n_seq_max=1, n_ctx_seq=8, n_batch=8)
    ctx.can_shift = lambda: False  # type: ignore[method-assign]
    req = request([1, 2, 3, 4, 5, 6, 7], max_tokens=20)
    scheduler.submit(req)
    with pytest.raises(RuntimeError, match="the context is full"):
        run(scheduler, req)
    assert any(plan.refused for plan in runner.plans)
    assert req.n_generated == 2 and scheduler.slots[0].request is None  # from the prompt, then from position 7, the last
    assert_mirrors(scheduler, ctx)


class FakeChunk(MediaChunk):
    def __init__(self, key: int, n_pos: int) -> None:
        self.key, self.n_pos, self.n_tokens = key, n_pos, n_pos

    def evaluate(self, ctx: Any, n_past: int, seq_id: int) -> None:
        raise AssertionError("the runner evaluates media")


def test_media_is_planned_before_the_batch_and_its_entries_enter_the_ledger():
    scheduler, ctx, runner = engine(n_seq_max=1)
    chunk = FakeChunk(12, 3)
    prompt = [1, 2, *media_entries(12, 3), 4]
    req = request(prompt, max_tokens=1, media={2: chunk})
    scheduler.submit(req)
    assert run(scheduler, req) == [next_token(4)]
    kinds = [([r.fed for r in plan.rows], [m.position for m in plan.media]) for plan in runner.plans]
    assert kinds == [([[1, 2]], []), ([], [2]), ([[4]], [])]
    assert scheduler.counters.n_media_evaluated == 1 and scheduler.counters.n_prompt_tokens == 6
    assert_mirrors(scheduler, ctx)


def test_a_policy_that_fails_ends_only_the_waiting_requests():
    class Broken(Policy):
        name = "broken"

        def select(self, waiting: Sequence[Ticket], running: Sequence[Ticket]) -> Ticket | None:
            if running:
                raise ValueError("no")
            return super().select(waiting, running)

    scheduler, ctx, _runner = engine(n_seq_max=2, policy=Broken())
    first = request([1], max_tokens=3)
    scheduler.submit(first)
    scheduler.next_event(first)
    second = request([2], max_tokens=3)
    scheduler.submit(second)
    assert run(scheduler, first) == solo([1], 3)[1:]
    with pytest.raises(RuntimeError, match="'broken' failed in select"):
        run(scheduler, second)
    assert_mirrors(scheduler, ctx)


def run_in_group(scheduler: Scheduler, group: ChoiceGroup, prompts: Sequence[Sequence[int] | None],
                 max_tokens: int = 3) -> list[list[int] | None]:
    """One call per prompt, each on its own thread inside ``group`` (None: a call that ends without a
    request); what each generated."""
    out: list[list[int] | None] = [None] * len(prompts)

    def call(j: int) -> None:
        with group.member():
            prompt = prompts[j]
            if prompt is None:
                return
            req = request(prompt, max_tokens=max_tokens)
            scheduler.submit(req)
            out[j] = run(scheduler, req)

    threads = [threading.Thread(target=call, args=(j,)) for j in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive(), "a call of the group never finished"
    return out


def test_a_choice_group_evaluates_a_shared_prompt_once():
    scheduler, ctx, runner = engine(n_seq_max=3)
    group = ChoiceGroup(3)
    assert run_in_group(scheduler, group, [[4, 5, 6]] * 3) == [solo([4, 5, 6], 3)] * 3
    assert scheduler.counters.n_prompt_tokens == 3
    leader = group.requests[0]
    assert [r.fork_of for r in group.requests] == [None, leader, leader]
    assert_mirrors(scheduler, ctx)


def test_a_choice_group_call_without_a_request_does_not_hold_the_others():
    scheduler, ctx, _runner = engine(n_seq_max=3)
    group = ChoiceGroup(3)
    assert run_in_group(scheduler, group, [[4, 5, 6], None, [4, 5, 6]]) == [solo([4, 5, 6], 3), None,
                                                                            solo([4, 5, 6], 3)]
    assert scheduler.counters.n_prompt_tokens == 3


def test_a_choice_group_call_with_another_prompt_runs_on_its_own():
    scheduler, ctx, _runner = engine(n_seq_max=3)
    group = ChoiceGroup(2)
    assert run_in_group(scheduler, group, [[4, 5, 6], [9, 9]]) == [solo([4, 5, 6], 3), solo([9, 9], 3)]
    assert all(r.fork_of is None for r in group.requests)
    assert scheduler.counters.n_prompt_tokens == 5
    assert_mirrors(scheduler, ctx)


def test_a_choice_group_needs_a_call():
    with pytest.raises(ValueError, match="at least one call"):
        ChoiceGroup(0)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_request_that_asks_hears_of_each_prompt_chunk_before_its_first_token(overlap: bool):
    scheduler, ctx, _ = engine(n_seq_max=1, n_batch=4, overlap=overlap)
    first = request([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], max_tokens=2, report_progress=True)
    scheduler.submit(first)
    seen = []
    while (item := scheduler.next_of([first], progress=True)[1]) is not None:
        seen.append(item if isinstance(item, PromptProgress) else ("token", item.token))
    assert [(p.total, p.cached, p.processed) for p in seen[:-2]] == [(10, 0, 0), (10, 0, 4), (10, 0, 8), (10, 0, 10)]
    assert [p.ms for p in seen[:-2]] == sorted(p.ms for p in seen[:-2])
    assert seen[-2:] == [("token", t) for t in solo(range(1, 11), 2)]
    # a prompt that shares a prefix: reported as cached; a request that does not ask hears nothing
    again = request([1, 2, 3, 4, 5, 6, 7, 8, 42], max_tokens=1, report_progress=True)
    quiet = request([1, 2, 3, 4, 5, 6, 7, 8, 43], max_tokens=1)
    scheduler.submit(again)
    progress = []
    while (item := scheduler.next_of([again], progress=True)[1]) is not None:
        progress += [(item.cached, item.processed)] if isinstance(item, PromptProgress) else []
    assert progress == [(8, 8), (8, 9)]
    scheduler.submit(quiet)
    assert run(scheduler, quiet) == solo([1, 2, 3, 4, 5, 6, 7, 8, 43], 1) and not quiet.progress
    with scheduler.exclusive():
        assert_mirrors(scheduler, ctx)


def test_a_reader_waiting_while_another_drives_tells_the_runner() -> None:
    """The runner learns that plans run on behalf of several threads (its compute goes to one thread of its own:
    engine/compute_thread.py) from a reader that waits, not only from a second driver."""
    scheduler, _, runner = engine()
    mine, theirs = request([1, 2], max_tokens=3), request([5, 6], max_tokens=3)
    scheduler.submit(mine)
    scheduler.submit(theirs)
    decode_ends = runner.hold = threading.Event()
    driving = threading.Thread(target=run, args=(scheduler, mine))
    driving.start()
    deadline = time.monotonic() + 10
    while scheduler._driver is None and time.monotonic() < deadline:  # the driver is inside its first decode
        time.sleep(0.001)
    waiter = threading.Thread(target=run, args=(scheduler, theirs))
    waiter.start()
    while not runner.waited and time.monotonic() < deadline:
        time.sleep(0.001)
    decode_ends.set()
    driving.join(10)
    waiter.join(10)
    assert runner.waited[0] == waiter.ident  # it waited during the driver's decode, and said so


def test_a_reader_that_starts_waiting_wakes_nobody() -> None:
    """Readers wait for the driver's tick.  One more reader starting to wait changes nothing the others wait
    for, so it wakes none of them: with eight streams, each reader used to wake the seven others for every
    token.  (Only a ``read_ahead=0`` sequence waits for its reader, and its reader's wait does wake.)"""
    scheduler, _, runner = engine(n_seq_max=3)
    mine, first, second = request([1, 2], max_tokens=3), request([5, 6], max_tokens=3), request([7, 8], max_tokens=3)
    for r in (mine, first, second):
        scheduler.submit(r)
    wakes: list[int] = []
    notify_all = scheduler._changed.notify_all

    def counted_notify_all() -> None:
        wakes.append(threading.get_ident())
        notify_all()

    scheduler._changed.notify_all = counted_notify_all  # type: ignore[method-assign]
    decode_ends = runner.hold = threading.Event()
    outputs: dict[int, list[int]] = {}

    def read(req: Request) -> None:
        outputs[id(req)] = run(scheduler, req)

    threads = [threading.Thread(target=read, args=(r,)) for r in (mine, first, second)]
    threads[0].start()
    deadline = time.monotonic() + 10
    while scheduler._driver is None and time.monotonic() < deadline:  # the driver is inside its first decode
        time.sleep(0.001)
    for thread in threads[1:]:
        thread.start()
        while thread.ident not in runner.waited and time.monotonic() < deadline:
            time.sleep(0.001)
    assert set(runner.waited) == {threads[1].ident, threads[2].ident}
    assert wakes == []  # the second reader's wait woke neither the first nor anyone else
    decode_ends.set()
    for thread in threads:
        thread.join(10)
    for r in (mine, first, second):
        assert outputs[id(r)] == solo(r.prompt, 3)


def test_close_waits_for_the_tick_in_flight_and_ends_every_request() -> None:
    """``close()`` from another thread while a decode runs: it aborts the decode and waits for the tick, then
    ends the running and the waiting request with an error their readers raise; nothing runs after it."""
    scheduler, ctx, runner = engine(n_seq_max=1)
    running, waiting = request([1, 2], max_tokens=30), request([5, 6], max_tokens=3)
    samplers = [running.sampler, waiting.sampler]
    scheduler.submit(running)
    scheduler.submit(waiting)
    assert scheduler.next_event(running) is not None
    raised: dict[str, BaseException] = {}

    def read(name: str, req: Request) -> None:
        try:
            run(scheduler, req)
        except RuntimeError as exc:
            raised[name] = exc

    decode_ends = runner.hold = threading.Event()
    readers = [threading.Thread(target=read, args=("running", running)),
               threading.Thread(target=read, args=("waiting", waiting))]
    readers[0].start()
    deadline = time.monotonic() + 10
    while scheduler._driver is None and time.monotonic() < deadline:  # the driver is inside its decode
        time.sleep(0.001)
    readers[1].start()
    closing = threading.Thread(target=scheduler.close)
    closing.start()
    while not ctx.n_aborts and time.monotonic() < deadline:
        time.sleep(0.001)
    closing.join(0.1)
    assert closing.is_alive()  # it waits for the decode in flight
    decode_ends.set()
    for thread in [closing, *readers]:
        thread.join(10)
        assert not thread.is_alive()
    assert set(raised) == {"running", "waiting"}
    assert all("close() was called while this request was running or waiting" in str(e) for e in raised.values())
    assert running.finish_reason == waiting.finish_reason == "error"
    assert all(slot.request is None for slot in scheduler.slots) and not scheduler.waiting
    assert all(sampler is not None and sampler.closed for sampler in samplers)
    assert_mirrors(scheduler, ctx)
    n_plans = len(runner.plans)
    late = request([7, 8])
    late_sampler = late.sampler
    with pytest.raises(RuntimeError, match="this Llama instance is closed"):  # refused, its sampler freed
        scheduler.submit(late)
    assert late_sampler is not None and late_sampler.closed and late.sampler is None
    with pytest.raises(RuntimeError, match="this Llama instance is closed"):
        with scheduler.exclusive():
            pass
    assert len(runner.plans) == n_plans  # no tick ran after close()
    scheduler.close()  # idempotent


def test_a_tick_that_raises_after_its_decode_leaves_every_sequence_consistent() -> None:
    """A KeyboardInterrupt that lands on the driver's thread right after ``llama_decode`` returned (Ctrl-C in a
    notebook) left memory holding a decode no ledger had taken in, and the next prompt on that sequence failed
    to decode.  Now the reader gets the interrupt, every running request ends (another thread's with an error
    naming it, instead of waiting forever for a token lost with the tick), and every sequence starts empty."""
    scheduler, ctx, runner = engine(n_seq_max=2)
    mine, theirs = request([1, 2], max_tokens=10), request([5, 6], max_tokens=10)
    scheduler.submit(mine)
    scheduler.submit(theirs)
    assert scheduler.next_event(mine) is not None
    run_plan = runner.run

    def interrupted_after_decoding(plan: TickPlan) -> Decoded:
        run_plan(plan)  # memory now holds the plan's rows
        raise KeyboardInterrupt

    runner.run = interrupted_after_decoding  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        while scheduler.next_event(mine) is not None:
            pass
    runner.run = run_plan  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="the engine's tick failed on another thread: KeyboardInterrupt"):
        run(scheduler, theirs)
    assert all(slot.request is None and not slot.ledger.tokens for slot in scheduler.slots)
    assert_mirrors(scheduler, ctx)
    again = request([1, 2], max_tokens=4)
    scheduler.submit(again)
    assert run(scheduler, again) == solo([1, 2], 4)
    assert_mirrors(scheduler, ctx)


def test_a_lone_sequence_bursts_as_far_as_its_reader_may_fall_behind():
    """A lone sequence whose sampling is all native takes several tokens per tick: each burst's tokens are
    in the ledger as in memory, it never goes further than the reader's read-ahead or max_tokens, and the
    counters count every decode as if each token had had its own tick."""
    scheduler, ctx, runner = engine(n_ctx_seq=128)
    req = request([5, 6, 7], max_tokens=30, sampler=NativeChoiceSampler())
    scheduler.submit(req)
    assert run(scheduler, req) == solo([5, 6, 7], 30)
    assert req.finish_reason == "length"
    assert ctx.memory[0] == [5, 6, 7, *solo([5, 6, 7], 29)]
    assert_mirrors(scheduler, ctx)
    bursts = [plan.burst for plan in runner.plans if plan.burst is not None]
    assert bursts and len(runner.plans) < 30
    assert all(2 <= b.n_max <= req.read_ahead for b in bursts) and bursts[-1].n_max <= 30 - 1
    assert all(b.stop_vocab == FakeModel.vocab and b.budget_s > 0 for b in bursts)
    stats = scheduler.stats()
    assert (stats.n_decodes, stats.n_prompt_tokens, stats.n_generated_tokens) == (30, 3, 30)
    assert stats.n_burst_decodes == sum(len(chosen) - 1 for chosen in runner.chosen) > 0


def run_two(n_seq_max: int, second_max_tokens: int) -> FakeRunner:
    """Two requests whose samplers choose alone, submitted together; the runner that ran them."""
    scheduler, ctx, runner = engine(n_seq_max=n_seq_max)
    a = request([1, 2], max_tokens=6, sampler=NativeChoiceSampler())
    b = request([3, 4], max_tokens=second_max_tokens, sampler=NativeChoiceSampler())
    scheduler.submit(a)
    scheduler.submit(b)
    assert run(scheduler, a) == solo([1, 2], 6) and run(scheduler, b) == solo([3, 4], second_max_tokens)
    assert_mirrors(scheduler, ctx)
    return runner


def test_no_burst_beside_another_sequence_a_waiting_request_or_a_python_sampler():
    beside = run_two(n_seq_max=2, second_max_tokens=6)
    assert all(plan.burst is None for plan in beside.plans if len(plan.rows) > 1)
    # one sequence: the second waits while the first runs (and its own max_tokens allows no burst)
    assert all(plan.burst is None for plan in run_two(n_seq_max=1, second_max_tokens=2).plans)

    for python, fields in ((True, {}), (False, {"logprobs": 1}), (False, {"read_ahead": 0})):
        scheduler, ctx, runner = engine()
        req = request([5, 6], max_tokens=12, sampler=FakeSampler() if python else NativeChoiceSampler(), **fields)
        scheduler.submit(req)
        assert run(scheduler, req) == solo([5, 6], 12)
        assert all(plan.burst is None for plan in runner.plans), fields


def test_ignore_eos_bursts_through_end_of_generation_tokens():
    scheduler, ctx, runner = engine()
    req = request([5, 6], max_tokens=12, sampler=NativeChoiceSampler(), params=SamplingParams(ignore_eos=True))
    scheduler.submit(req)
    assert run(scheduler, req) == solo([5, 6], 12)
    bursts = [plan.burst for plan in runner.plans if plan.burst is not None]
    assert bursts and all(b.stop_vocab == ffi.NULL for b in bursts)


@pytest.mark.parametrize("sampler", [FakeSampler, NativeChoiceSampler], ids=["per-token", "bursts"])
def test_a_reader_that_stops_leaves_memory_as_it_was_when_its_last_token_was_sampled(sampler: type) -> None:
    """A stop string found in the third token's text: whatever was decoded after it (a burst's tokens) leaves
    memory when the request is retired, and the sequence holds the prompt and the two tokens before it."""
    scheduler, ctx, runner = engine(n_ctx_seq=128)
    req = request([5, 6, 7], max_tokens=30, sampler=sampler())
    scheduler.submit(req)
    tokens = [scheduler.next_event(req).token for _ in range(3)]  # type: ignore[union-attr]
    assert (len(ctx.memory[0]) > 3 + 2) is (sampler is NativeChoiceSampler)  # a burst decoded further
    scheduler.cancel(req)
    with scheduler.exclusive():  # a state call: the cancelled request is retired first, as by the next tick
        assert ctx.memory[0] == [5, 6, 7, *tokens[:2]]
        assert_mirrors(scheduler, ctx)
    assert req.finish_reason == "abort"


def test_a_reader_that_stops_after_its_request_finished_inside_a_burst_leaves_memory_the_same() -> None:
    """The burst reached ``max_tokens``: the request finished, its sequence idle, before its reader found the
    stop string in the third token.  The next state call (or tick) takes the unread tokens out all the same,
    unless another request has taken the sequence since."""
    scheduler, ctx, runner = engine(n_ctx_seq=128)
    req = request([5, 6, 7], max_tokens=6, sampler=NativeChoiceSampler())
    scheduler.submit(req)
    tokens = [scheduler.next_event(req).token for _ in range(3)]  # type: ignore[union-attr]
    assert req.state == RequestState.DONE and len(ctx.memory[0]) == 3 + 5  # all but the last token decoded
    scheduler.cancel(req)
    with scheduler.exclusive():
        assert ctx.memory[0] == [5, 6, 7, *tokens[:2]]
        assert_mirrors(scheduler, ctx)
    assert req.finish_reason == "length"

    scheduler, ctx, runner = engine(n_ctx_seq=128, n_seq_max=1)
    first, second = request([5, 6, 7], max_tokens=6, sampler=NativeChoiceSampler()), request([1, 2], max_tokens=2)
    scheduler.submit(first)
    for _ in range(2):  # the prompt's tick, then the burst to the end
        scheduler.next_event(first)
    assert first.state == RequestState.DONE
    scheduler.submit(second)
    assert run(scheduler, second) == solo([1, 2], 2)
    held = list(ctx.memory[0])
    scheduler.cancel(first)  # too late: the sequence holds the second request's tokens now
    with scheduler.exclusive():
        assert ctx.memory[0] == held
        assert_mirrors(scheduler, ctx)
