"""Letting go of a thread's OpenMP team once the thread stops computing.

llama.cpp's CPU backend, built with OpenMP (its default with GCC), computes a graph with ``#pragma omp
parallel`` and ggml synchronizes the team with an OpenMP barrier at every node of the graph.  libgomp keeps a
team of worker threads for each thread that has started a parallel region, for as long as that thread lives.
Threads waiting at a barrier spin a long while before they sleep, unless the process holds more OpenMP
threads than it has CPUs (every team counts, idle or not): then libgomp spins 100 rounds only, and every
barrier ends in futex sleeps and wake-ups.  On two cores with ``n_threads=2`` a second team is enough: eight
streams on SmolLM2 decoded at 126 tokens/s after the main thread had generated once, and at 175 tokens/s
(llama-batched-bench: 177) once the main thread had let its team go.

``omp_pause_resource_all`` (OpenMP 5.0, libgomp since GCC 10) ends the calling thread's team; the thread's
next parallel region makes a new one, about 0.25 ms later.  So a thread lets its team go when it stops
computing for a while (:class:`.compute_thread.ComputeThread` says when).  With another OpenMP runtime (LLVM's
pauses the whole process, not one thread), or none, nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from typing import Callable

_OMP_PAUSE_SOFT = 1
_state = threading.local()  # has_team: this thread has started a graph compute since it last let go


@functools.cache
def _pause() -> Callable[[int], int] | None:
    """libgomp's ``omp_pause_resource_all`` when libgomp is loaded in this process (by ggml), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:  # RTLD_NOLOAD: only a libgomp that is there already, never a second runtime of our own
        libgomp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        pause = libgomp.omp_pause_resource_all
    except (OSError, AttributeError):  # no libgomp in the process, or one older than GCC 10
        return None
    pause.argtypes = [ctypes.c_int]
    pause.restype = ctypes.c_int
    return pause


def computing() -> None:
    """The calling thread is about to start a graph compute (and so holds a team after it)."""
    _state.has_team = True


def let_go() -> None:
    """End the calling thread's team, if it started a compute since it last let go (it must not be inside
    a parallel region, which no Python code is)."""
    if getattr(_state, "has_team", False):
        _state.has_team = False
        pause = _pause()
        if pause is not None:
            pause(_OMP_PAUSE_SOFT)
