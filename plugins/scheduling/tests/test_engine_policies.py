"""The built-in policies driving a real engine: preemption resumes exactly, aging bounds the wait.

Proven by counting (decodes, prompt tokens, admissions), never by timing.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest

from llama_cpp import Llama
from llama_cpp.engine.policy import Ticket
from llama_cpp_scheduling import PriorityPolicy

LOW = ["The capital of France is", "Once upon a time"]
URGENT = ["def fibonacci(n):", "Q: What is 2+2? A:"]  # no first token shared with LOW


class RecordingPriority(PriorityPolicy):
    """The priority policy, noting each admission: (arrival, priority, passed_over, decodes so far)."""

    def __init__(self, llm_box: list[Llama], **options: Any) -> None:
        super().__init__(**options)
        self.box = llm_box
        self.admissions: list[tuple[int, int, int, int]] = []

    def admitted(self, ticket: Ticket) -> None:
        self.admissions.append((ticket.arrival, ticket.priority, ticket.passed_over,
                                self.box[0].scheduler.counters.n_decodes))


def _text(chunks: Iterator[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["text"] for c in chunks)


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 0.8, "seed": 1234}],
                         ids=["greedy", "seeded"])
def test_low_priority_requests_are_preempted_and_resume_unchanged(smollm2_model_path: Path,
                                                                  sampling: dict) -> None:
    model = str(smollm2_model_path)
    with Llama(model, n_ctx=1024, n_seq_max=1, n_threads=2, verbose=False) as solo_llm:
        solo = {p: solo_llm.create_completion(p, max_tokens=32, **sampling)["choices"][0]["text"]
                for p in LOW + URGENT}
    box: list[Llama] = []
    policy = RecordingPriority(box)
    with Llama(model, n_ctx=1024, n_seq_max=2, n_threads=2, verbose=False, scheduling=policy) as llm:
        box.append(llm)
        scheduler = llm.scheduler
        decodes_before: dict[int, int] = {}  # arrival -> decodes done before the request was submitted
        submit = scheduler.submit

        def noting_submit(request: Any) -> None:
            before = scheduler.counters.n_decodes
            submit(request)
            decodes_before[request.ticket.arrival] = before

        scheduler.submit = noting_submit  # type: ignore[method-assign]
        streams = [llm.create_completion(p, max_tokens=32, stream=True, priority=10, **sampling) for p in LOW]
        firsts = [next(s)["choices"][0]["text"] for s in streams]  # both low requests hold a sequence
        with ThreadPoolExecutor(len(URGENT)) as pool:
            # both urgent requests arrive while both low ones hold a sequence: no tick runs until both are
            # queued (otherwise a slow thread start lets the first finish and the second take its free slot)
            with scheduler.exclusive():
                calls = [pool.submit(llm.create_completion, p, max_tokens=32, priority=0, **sampling)
                         for p in URGENT]
                while len(decodes_before) < len(LOW) + len(URGENT) and not any(c.done() for c in calls):
                    threading.Event().wait(0.01)
            results = [call.result(timeout=600)["choices"][0]["text"] for call in calls]
        texts = [first + _text(s) for first, s in zip(firsts, streams)]
        assert texts == [solo[p] for p in LOW]
        assert results == [solo[p] for p in URGENT]
        assert scheduler.counters.n_preemptions == 2
        # every prompt evaluated once: the low requests resumed from their snapshots
        assert scheduler.counters.n_prompt_tokens == sum(len(llm.tokenize(p.encode())) for p in LOW + URGENT)
        urgent = [a for a in policy.admissions if a[1] == 0]
        assert len(urgent) == 2
        for arrival, _priority, _passed, decodes in urgent:
            assert decodes - decodes_before[arrival] <= 1  # admitted in the tick after it arrived
        resumed = [a for a in policy.admissions if a[1] == 10]
        assert len(resumed) == 4  # each low request: admitted, then resumed


@pytest.mark.parametrize("aging", [2, 0])
def test_aging_bounds_how_long_a_stream_of_urgent_requests_delays_a_patient_one(tiny_model_path: Path,
                                                                                aging: int) -> None:
    box: list[Llama] = []
    policy = RecordingPriority(box, aging=aging)
    total = 36
    with Llama(str(tiny_model_path), n_ctx=512, n_seq_max=1, n_threads=2, verbose=False,
               scheduling=policy) as llm:
        box.append(llm)
        # the one sequence is taken, and kept: a stream pauses once 8 tokens wait unread
        holder = llm.create_completion("hold", max_tokens=16, stream=True, priority=0)
        next(holder)
        patient_box: list[Any] = []
        patient = threading.Thread(target=lambda: patient_box.append(
            llm.create_completion("patient", max_tokens=2, priority=10)))
        patient.start()
        while not llm.scheduler.waiting:
            threading.Event().wait(0.01)
        # the stream of urgent requests, all queued behind the patient one before the sequence is free again:
        # the queue never runs out of urgent requests while one runs, however slowly threads wake
        urgent = [threading.Thread(target=lambda: llm.create_completion("urgent", max_tokens=6, priority=0))
                  for _ in range(total)]
        for t in urgent:
            t.start()
        while len(llm.scheduler.waiting) < 1 + total:
            threading.Event().wait(0.01)
        _text(holder)
        for t in [*urgent, patient]:
            t.join(timeout=600)
        assert patient_box and patient_box[0]["choices"][0]["finish_reason"] == "length"
    order = [priority for _arrival, priority, _passed, _decodes in policy.admissions]
    patient_at = order.index(10)
    passed = policy.admissions[patient_at][2]
    if aging:
        assert 1 <= passed <= 10 * aging  # passed over, but at most aging admissions per level
        assert 0 in order[patient_at + 1:]  # the stream was still flowing when it got in
    else:
        assert patient_at == len(order) - 1  # strict priorities: it waited for the whole stream
