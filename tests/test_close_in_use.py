"""``close()`` while other threads still call the model: tokenizing, embedding and a multimodal chat's media
tokenizing run on the callers' threads, outside the engine, so ``close()`` waits for them
(``SharedHandle``) instead of freeing the model or the mtmd context under them.  Before, a tokenize of a
long text on another thread aborted the process ("terminate called ... unordered_map::at") and a
multimodal chat's media tokenizing was a segmentation fault."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from llama_cpp_native import ffi

from llama_cpp.native import SharedHandle


def _handle() -> tuple[SharedHandle, list[object]]:
    freed: list[object] = []
    return SharedHandle(ffi.new("int *"), freed.append, "test pointer"), freed


def test_close_waits_for_a_call_in_progress_on_another_thread() -> None:
    handle, freed = _handle()
    inside, leave = threading.Event(), threading.Event()

    def call() -> None:
        with handle.calling as ptr:
            assert ptr is not None
            inside.set()
            leave.wait(10)

    caller = threading.Thread(target=call)
    caller.start()
    assert inside.wait(10)
    closer = threading.Thread(target=handle.close)
    closer.start()
    deadline = time.monotonic() + 10
    while not handle._closing and time.monotonic() < deadline:  # close() has begun (however slow its thread)
        time.sleep(0.001)
    closer.join(0.1)
    assert closer.is_alive() and freed == []  # still in use: not freed
    with pytest.raises(RuntimeError, match="the test pointer is closed"):  # no call starts once close() began
        with handle.calling:
            pass
    leave.set()
    caller.join(10)
    closer.join(10)
    assert len(freed) == 1 and handle.closed
    handle.close()  # idempotent
    assert len(freed) == 1


def test_nested_calls_count_and_close_from_inside_a_call_raises() -> None:
    handle, freed = _handle()
    with handle.calling:
        with handle.calling:
            pass
        with pytest.raises(RuntimeError, match="cannot be closed from inside a call on it"):
            handle.close()
    handle.close()  # the calls are over: it frees now, once
    assert len(freed) == 1


RACE = r"""
import random, sys, threading, time
from llama_cpp import Llama

mode, model, *extra = sys.argv[1:]
long_text = ("Once upon a time there was a little llama. " * 20000).encode()
for trial in range(5):
    if mode == "multimodal":
        llm = Llama(model, mmproj_path=extra[0], n_ctx=2048, verbose=False)
        messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": extra[1]}},
                                                  {"type": "text", "text": "What is this?"}]}]
    else:
        llm = Llama(model, n_ctx=256, verbose=False, embedding=mode == "embed")
    errors, started = [], threading.Event()

    def work():
        started.set()
        try:
            while True:
                if mode == "tokenize":
                    llm.tokenize(long_text)
                    llm.token_eos(), llm.n_ctx_train(), llm.metadata
                elif mode == "embed":
                    llm.embed("hello " * 100)
                else:
                    llm.create_chat_completion(messages, max_tokens=2)
        except Exception as exc:
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    started.wait()
    time.sleep(random.Random(trial).uniform(0.001, 0.3 if mode == "tokenize" else 0.05))
    llm.close()
    worker.join(60)
    print(type(errors[0]).__name__, errors[0], flush=True)
"""


@pytest.mark.parametrize("mode", ["tokenize", "embed", "multimodal"])
def test_close_while_another_thread_uses_the_model(mode: str, tiny_model_path: Path,
                                                   tiny_mtmd_model: Callable[[str], tuple[Path, Path]],
                                                   tiny_png: Callable[..., Path]) -> None:
    """In a subprocess, so that a regression fails this test and not the whole run."""
    args = [str(tiny_model_path)]
    if mode == "multimodal":
        text, mmproj = tiny_mtmd_model("gemma3")
        args = [str(text), str(mmproj), str(tiny_png(64, 64))]
    proc = subprocess.run([sys.executable, "-c", RACE, mode, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 5, proc.stdout
    for line in lines:  # the worker's next call (or the one cut short) says the instance is closed
        assert line.startswith("RuntimeError ") and "closed" in line, line
    if mode == "embed":  # an embedding cut short by close() says so, not "aborted (Llama.abort())"
        assert not any("abort()" in line for line in lines), lines
