"""Which thread starts a context's graph computes: the caller's while one thread decodes, one thread of the
context's own while several take turns.

llama.cpp's CPU backend computes each graph with an OpenMP team, and libgomp keeps one team per thread that
starts a parallel region; after a region a team's workers spin for a while before they sleep.  The engine
has no thread of its own: the caller waiting for a token drives the ticks (:mod:`.scheduler`).  With many
callers the driver changes from tick to tick, so each decode starts from another thread, with another team,
while the teams of the last drivers still spin, and on a machine with few cores they take the cores from
the decode.  Eight streams on SmolLM2 (case (e) of ``benchmarks/bench.py``, two cores) ran at 118 to 130
tokens/s that way and at 151 to 172 tokens/s with every decode started from one thread.  Handing the whole
tick (its Python too) to that thread measured no better than not handing off at all, so only the compute
goes there: the rest of the tick, user hooks included, stays on the driver's thread.

So :meth:`ComputeThread.run` calls on the caller's own thread until another thread calls or waits for the
caller's ticks (:meth:`ComputeThread.caller_waits`; a single stream never pays a hand-off per token), then on
a thread it starts for that, until one thread has called :data:`SETTLED` times in a row again with no other
thread waiting.  The caller waits for the call either way, and what it raises is raised to the caller.

Waiting counts because a caller that drives many ticks in a row is the usual case with many streams: a
server's eight readers take turns driving every 20 ticks or so, and in between seven of them wait.  When
only callers counted, the driver's calls went back to its own thread after :data:`SETTLED` of them, with
a team of its own, and the last drivers' teams stayed until their threads called again.  Under (f)'s load on
SmolLM2 (``benchmarks/bench.py``) the decodes' CPU time was spread over the compute thread and several readers
(17, 11, 4, 3 ... CPU seconds of a 43 s load) and the two computing threads were on a core less than half the
time, where llama-server's two spin through the whole load; with waiting counted the compute thread and its
worker had 41 and 42 CPU seconds, and the load served 1.069x the tokens per second (five paired runs).

A team lives as long as its thread, idle or not, and one idle team beside the computing one is enough to
make libgomp's barriers sleep at every node (:mod:`.openmp_teams`).  So whichever thread stops computing
lets its team go: a caller whose calls go to the compute thread from now on, the compute thread when calls
run on their caller's thread again or when it has had nothing to do for :data:`IDLE_S`, a caller whose
request has ended (:meth:`ComputeThread.caller_idle`), and the thread that closes the context.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Callable, TypeVar, cast

from . import openmp_teams

T = TypeVar("T")

# calls in a row from one thread after which its calls run on its own thread again
SETTLED = 16
# seconds without a call after which the compute thread lets its OpenMP team go
IDLE_S = 0.5
THREAD_NAME = "llama_cpp-compute"


class _HandOff:
    """One call at a time from a caller to the compute thread, and its outcome back: two locks used as
    signals (``go``: a call is there, ``done``: its outcome is)."""

    __slots__ = ("go", "done", "call", "result", "error", "stopped")

    def __init__(self) -> None:
        self.go = threading.Lock()
        self.go.acquire()
        self.done = threading.Lock()
        self.done.acquire()
        self.call: Callable[[], object] | None = None
        self.result: object = None
        self.error: BaseException | None = None
        self.stopped = False

    def serve(self) -> None:
        """The compute thread's loop, until :meth:`stop`."""
        while True:
            if not self.go.acquire(timeout=IDLE_S):
                openmp_teams.let_go()
                self.go.acquire()
            call, self.call = self.call, None
            if call is None:
                return
            openmp_teams.computing()
            try:
                self.result = call()
            except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
                self.error = exc
            self.done.release()

    def stop(self) -> None:
        """Let the compute thread end (once; it runs nothing after this)."""
        if not self.stopped:
            self.stopped = True
            self.call = None
            self.go.release()


class ComputeThread:
    """Runs a context's graph computes (``run(call)``), each from the thread that suits its callers of the
    moment.  One call at a time: the engine's callers take turns (the scheduler's driver, or ``exclusive``)."""

    def __init__(self) -> None:
        self._hand_off = _HandOff()
        self._thread: threading.Thread | None = None
        self._caller: int | None = None  # the thread of the last call
        self._streak = 0  # calls in a row from that thread
        self._handing_off = False
        self._waited_on = False  # another thread has waited for the caller's ticks since the last call
        # a context dropped without close(): the thread ends with this object (the finalizer holds no self)
        self._stop = weakref.finalize(self, self._hand_off.stop)
        _instances.add(self)

    @property
    def handing_off(self) -> bool:
        """Whether calls run on the compute thread now (several threads have been taking turns)."""
        return self._handing_off

    def run(self, call: Callable[[], T]) -> T:
        """``call()``'s result, computed on the caller's thread or on the compute thread."""
        me = threading.get_ident()
        if me != self._caller:
            self._handing_off = self._caller is not None
            self._caller, self._streak = me, 0
        if self._waited_on:
            self._waited_on = False
            self._handing_off, self._streak = True, 0
        self._streak += 1
        if self._streak > SETTLED and self._handing_off:
            self._handing_off = False
            if self._thread is not None and not self._hand_off.stopped:
                self._on_compute_thread(openmp_teams.let_go)  # it idles from now on
        if not self._handing_off or self._hand_off.stopped:
            openmp_teams.computing()
            return call()
        openmp_teams.let_go()  # this thread's calls go to the compute thread from now on
        return self._on_compute_thread(call)

    def caller_waits(self) -> None:
        """Another thread waits while the caller computes (a reader of the same engine): the context is
        shared, so calls go to the compute thread, as when threads take turns calling.  Only a flag is set,
        without a lock: the caller's next :meth:`run` reads it."""
        self._waited_on = True

    def caller_idle(self) -> None:
        """The calling thread has no compute coming (its request ended): it lets its OpenMP team go, so
        that the next compute, from whichever thread, is the only team there is.  It costs the thread a
        new team (about 0.25 ms) if it computes again."""
        openmp_teams.let_go()

    def _on_compute_thread(self, call: Callable[[], T]) -> T:
        hand_off = self._hand_off
        if self._thread is None:
            self._thread = threading.Thread(target=hand_off.serve, name=THREAD_NAME, daemon=True)
            self._thread.start()
        hand_off.call = call
        hand_off.go.release()
        interrupted: BaseException | None = None
        while True:
            try:
                hand_off.done.acquire()
                break
            except BaseException as exc:  # noqa: BLE001 - a KeyboardInterrupt: the call still runs and the
                interrupted = exc  # context is its own until it returns; raised after that
        result, error = hand_off.result, hand_off.error
        hand_off.result = hand_off.error = None
        if interrupted is not None:
            raise interrupted
        if error is not None:
            raise error
        return cast(T, result)  # what call() returned

    def _forget_thread(self) -> None:
        """In a child process after ``fork``: the thread did not come along (nor did its locks' state)."""
        self._stop.detach()
        self._hand_off = _HandOff()
        self._stop = weakref.finalize(self, self._hand_off.stop)
        self._thread = None

    def close(self) -> None:
        """End the compute thread (idempotent; its team ends with it), and let the closing thread's team go;
        calls after this run on their caller's thread."""
        openmp_teams.let_go()
        self._stop()
        self._handing_off = False
        self._caller = None
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)


_instances: weakref.WeakSet[ComputeThread] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for compute in list(_instances):
        compute._forget_thread()


os.register_at_fork(after_in_child=_after_fork_in_child)
