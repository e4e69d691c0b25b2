"""Which thread starts a context's graph computes (llama_cpp.engine.compute_thread).

One caller: on its own thread, and no thread is started.  Callers taking turns, or one caller while other
threads wait for its ticks: every call on one thread of the context's, until one caller has made SETTLED
calls in a row with nobody waiting.  End to end: eight streams on one Llama
decode from one thread, and their texts are still their solo runs.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llama_cpp import Llama
from llama_cpp.engine import compute_thread, openmp_teams
from llama_cpp.engine.compute_thread import IDLE_S, SETTLED, THREAD_NAME, ComputeThread


def compute_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def where(compute: ComputeThread) -> int:
    return compute.run(threading.get_ident)


def on_thread(fn: object) -> None:
    thread = threading.Thread(target=fn)  # type: ignore[arg-type]  # a zero-argument callable
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_one_caller_computes_on_its_own_thread_and_starts_none() -> None:
    before = len(compute_threads())
    compute = ComputeThread()
    me = threading.get_ident()
    assert [where(compute) for _ in range(3 * SETTLED)] == [me] * (3 * SETTLED)
    assert not compute.handing_off and len(compute_threads()) == before
    compute.close()


def test_callers_taking_turns_compute_on_one_thread_until_one_settles() -> None:
    compute = ComputeThread()
    me = threading.get_ident()
    seen: list[tuple[int, int]] = []  # (caller, computing thread)

    def other() -> None:
        seen.append((threading.get_ident(), where(compute)))

    assert where(compute) == me  # the first caller: its own thread
    for _ in range(4):
        on_thread(other)
        seen.append((me, where(compute)))
    computing = {thread for _, thread in seen}
    assert len(computing) == 1 and not computing & {caller for caller, _ in seen}, seen
    assert compute.handing_off
    # one caller again: SETTLED more calls on the compute thread, then on its own
    settled = [where(compute) for _ in range(SETTLED + 3)]
    assert settled[:SETTLED - 1] == [computing.pop()] * (SETTLED - 1) and settled[-3:] == [me] * 3
    assert not compute.handing_off
    compute.close()


def test_a_caller_that_others_wait_for_computes_on_the_compute_thread() -> None:
    """A server's readers: one drives many ticks in a row while the others wait for it.  Its calls stay on
    the compute thread however many it makes, and come back to it once nobody has waited for SETTLED calls."""
    compute = ComputeThread()
    me = threading.get_ident()
    assert where(compute) == me
    computing = set()
    for _ in range(3 * SETTLED):
        on_thread(compute.caller_waits)  # a reader waiting for my ticks
        computing.add(where(compute))
    assert len(computing) == 1 and me not in computing and compute.handing_off
    alone = [where(compute) for _ in range(SETTLED + 3)]
    assert alone[:SETTLED - 1] == [computing.pop()] * (SETTLED - 1) and alone[-3:] == [me] * 3
    assert not compute.handing_off
    compute.close()


def test_what_a_call_raises_reaches_its_caller_and_the_thread_goes_on() -> None:
    compute = ComputeThread()
    on_thread(lambda: compute.run(int))

    def fail() -> int:
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        compute.run(fail)
    assert compute.handing_off and compute.run(lambda: 7) == 7
    compute.close()


def test_close_ends_the_thread_and_later_calls_run_on_their_caller() -> None:
    before = len(compute_threads())
    compute = ComputeThread()
    on_thread(lambda: compute.run(int))
    assert where(compute) != threading.get_ident()
    assert len(compute_threads()) == before + 1
    compute.close()
    compute.close()  # idempotent
    assert len(compute_threads()) == before
    on_thread(lambda: compute.run(int))
    assert where(compute) == threading.get_ident()


def test_a_dropped_compute_thread_ends_with_its_object() -> None:
    before = len(compute_threads())
    compute = ComputeThread()
    on_thread(functools.partial(compute.run, int))
    compute.run(int)
    assert len(compute_threads()) == before + 1
    del compute
    gc.collect()
    deadline = time.monotonic() + 10
    while len(compute_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(compute_threads()) == before


def test_eight_streams_decode_from_one_thread_with_their_solo_texts(tiny_model_path: Path) -> None:
    prompts = [f"Stream {i} says" for i in range(8)]
    with Llama(str(tiny_model_path), n_ctx=8 * 128, n_seq_max=8, n_threads=2, verbose=False) as llm:
        solo = [llm.create_completion(p, max_tokens=24, temperature=0.0)["choices"][0]["text"] for p in prompts]
        compute = llm._ctx.compute  # the engine's context
        decoding: list[int] = []
        original = compute.run

        def recording(call):  # type: ignore[no-untyped-def]
            return original(lambda: (decoding.append(threading.get_ident()), call())[1])

        compute.run = recording  # type: ignore[method-assign]
        texts: list[str | None] = [None] * 8
        barrier = threading.Barrier(8)

        def stream(i: int) -> None:
            barrier.wait()
            texts[i] = "".join(c["choices"][0]["text"] for c in llm.create_completion(
                prompts[i], max_tokens=24, temperature=0.0, stream=True))

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert texts == solo
        [computing] = [t.ident for t in compute_threads() if t.ident in decoding]
        assert decoding.count(computing) >= len(decoding) // 2, decoding
        assert computing not in {t.ident for t in threads}
    assert not any(t.is_alive() for t in threads)


def test_a_forked_child_computes_without_the_parents_thread() -> None:
    compute = ComputeThread()
    compute.run(int)
    on_thread(lambda: compute.run(int))
    assert compute.handing_off and len(compute_threads()) >= 1
    pid = os.fork()
    if pid == 0:  # the child: callers taking turns again, on a thread of its own
        try:
            on_thread(lambda: compute.run(int))
            os._exit(0 if where(compute) != threading.get_ident() and compute.run(lambda: 5) == 5 else 1)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + 30  # a child waiting for the parent's thread would wait forever
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if waited[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the child hung handing a call to a compute thread it does not have")
    assert os.waitstatus_to_exitcode(waited[1]) == 0
    compute.close()


@pytest.fixture
def let_go_by(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The threads that ended their OpenMP team, in order (libgomp's pause recorded, not called)."""
    threads: list[int] = []
    monkeypatch.setattr(openmp_teams, "_pause", lambda: lambda kind: threads.append(threading.get_ident()) or 0)
    return threads


def test_a_thread_that_stops_computing_lets_its_team_go(let_go_by: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    # the compute thread never idles long enough to let its team go on its own, however slow the machine
    monkeypatch.setattr(compute_thread, "IDLE_S", 3600.0)
    compute = ComputeThread()
    me = threading.get_ident()
    compute.run(int)
    assert let_go_by == []  # one caller: it keeps its team from call to call
    on_thread(lambda: compute.run(int))  # another caller: the calls go to the compute thread
    computing = compute.run(threading.get_ident)
    assert computing != me and let_go_by == [me]  # my next call went there too, so my team went first
    for _ in range(SETTLED + 1):
        compute.run(int)
    assert let_go_by == [me, computing]  # my calls are my own again: the compute thread idles, without one
    compute.caller_idle()  # my request ended
    compute.caller_idle()  # nothing to let go twice
    assert let_go_by == [me, computing, me]
    compute.close()


def test_the_compute_thread_lets_its_team_go_when_idle(let_go_by: list[int]) -> None:
    compute = ComputeThread()
    compute.run(int)
    on_thread(lambda: compute.run(int))
    computing = compute.run(threading.get_ident)
    deadline = time.monotonic() + IDLE_S + 10
    while computing not in let_go_by and time.monotonic() < deadline:
        time.sleep(0.05)
    assert computing in let_go_by
    compute.close()


# run in a process of its own: the suite's OMP_THREAD_LIMIT=1 (docs/testing.md) leaves teams without workers
TEAMS_SCRIPT = """
import json, os, sys, threading
from llama_cpp import Llama

def process_threads():
    return len(os.listdir("/proc/self/task"))

with Llama(sys.argv[1], n_ctx=512, n_seq_max=2, n_threads=2, verbose=False) as llm:
    before = process_threads()
    llm.create_completion("Hello", max_tokens=4, temperature=0.0)
    after_one = process_threads()
    during = []
    finished = []

    def stream():
        for _ in llm.create_completion("Hello there", max_tokens=48, temperature=0.0, stream=True):
            during.append((process_threads(), not finished))
        finished.append(True)

    threads = [threading.Thread(target=stream) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
print(json.dumps({"before": before, "after_one": after_one, "during": during}))
"""


@pytest.mark.skipif(openmp_teams._pause() is None, reason="llama.cpp's CPU backend here is not built with libgomp")
def test_one_openmp_team_at_a_time_in_the_process(tiny_model_path: Path) -> None:
    """libgomp's own threads, counted: a finished request leaves none behind on its thread, and while
    two threads take turns only the compute thread's team is there (an idle team would make every
    barrier of the decode sleep: openmp_teams)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_THREAD_LIMIT"}
    proc = subprocess.run([sys.executable, "-c", TEAMS_SCRIPT, str(tiny_model_path)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    before = counts["before"]
    assert counts["after_one"] == before  # my team (one worker beside me) ended with my request
    # While both streams run: the two callers, the compute thread and its one worker.  A team that lingered
    # idle would be there in most samples; a team on its way in or out (a caller's, while the calls move
    # between its thread and the compute thread: after 16 calls in a row from one caller they go back to it)
    # shows in a few, in bursts of a few samples where tokens come fast: at most a quarter of the later
    # samples may be over the bound.  (After one stream ends, the other's calls move back to its own thread.)
    together = [n for n, both_running in counts["during"] if both_running]
    later = together[len(together) // 2:]
    assert sum(n > before + 4 for n in later) <= len(later) // 4, together
    assert max(together) >= before + 3  # the streams did run with a team of two threads
