"""Ctrl-C in the middle of a generation (a notebook's "interrupt kernel"): the KeyboardInterrupt reaches the
caller, whatever it landed in, and the instance goes on as if the interrupted call had not been made."""

from __future__ import annotations

import _thread
import random
import threading
import time
from pathlib import Path

import pytest

from llama_cpp import Llama

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def llm(tiny_model_path: Path):
    with Llama(str(tiny_model_path), n_ctx=2048, n_batch=2048, verbose=False) as model:
        yield model


def greedy(llm: Llama) -> str:
    return llm.create_completion(PROMPT, max_tokens=48, temperature=0.0)["choices"][0]["text"]


def test_ctrl_c_during_a_long_prompt_stops_it_and_leaves_the_instance_as_it_was(
        llm: Llama, capfd: pytest.CaptureFixture[str]) -> None:
    # The prompt's decode runs the abort callback between graph nodes: the interrupt lands there, where cffi
    # used to print it as ignored and let the decode go on; now it aborts the decode and is raised after it.
    before = greedy(llm)
    long_prompt = "word " * 1500
    for _ in range(3):
        started = threading.Event()

        def interrupt_once_decoding(started: threading.Event = started) -> None:
            started.wait(10)
            deadline = time.monotonic() + 10
            while llm._scheduler._driver is None and time.monotonic() < deadline:
                time.sleep(0.0005)
            _thread.interrupt_main()

        timer = threading.Thread(target=interrupt_once_decoding)
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            started.set()
            llm.create_completion(long_prompt, max_tokens=4)
            time.sleep(10)  # (the call ended first: the interrupt lands here)
        timer.join()
    assert "Exception ignored" not in capfd.readouterr().err
    assert greedy(llm) == before


def test_ctrl_c_anywhere_in_a_call_leaves_the_instance_consistent(llm: Llama) -> None:
    # Wherever the interrupt lands (between two native calls of a tick, in the update, in the reader), the
    # next call gets the same text as before: no decode that a ledger does not know of stays in memory.
    before = greedy(llm)
    rng = random.Random(7)
    calls = [lambda: list(llm.create_completion(PROMPT, max_tokens=120, stream=True)),
             lambda: llm.create_completion("Hello", max_tokens=80),
             lambda: llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=80),
             lambda: llm.create_completion("word " * 600, max_tokens=2)]
    interrupted = 0
    for _ in range(40):
        timer = threading.Timer(rng.uniform(0.0, 0.03), _thread.interrupt_main)
        try:
            timer.start()
            rng.choice(calls)()
            timer.join()
            time.sleep(0.5)  # (the call ended first: the interrupt lands here)
        except KeyboardInterrupt:
            interrupted += 1
        timer.join()
        assert greedy(llm) == before
    assert interrupted == 40
