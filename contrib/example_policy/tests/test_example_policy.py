"""The example policy, installed as a package, chosen by name: short prompts go first, none starves."""

from __future__ import annotations

import threading
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from llama_cpp import Llama
from llama_cpp.engine.policy import Ticket


def test_installed_as_a_plugin_package() -> None:
    assert "example_policy" in {ep.name for ep in entry_points(group="llama_cpp")}


def test_chosen_by_name_it_serves_the_shortest_prompt_first(tiny_model_path: Path) -> None:
    long_prompt = " ".join(["word"] * 60)
    with Llama(str(tiny_model_path), n_ctx=512, n_seq_max=1, verbose=False,
               scheduling={"policy": "shortest-prompt-first"}) as llm:
        policy = llm.scheduler.planner.policy
        admitted: list[int] = []  # the prompt lengths, in the order the policy let the requests in
        noted = policy.admitted

        def noting(ticket: Ticket) -> None:
            admitted.append(ticket.n_prompt)
            noted(ticket)

        policy.admitted = noting  # type: ignore[method-assign]
        holder = llm.create_completion("hold", max_tokens=16, stream=True)
        next(holder)  # the one sequence is taken (a paused stream keeps it)
        prompts = {"long": long_prompt, "short": "hi"}
        threads = []
        for prompt in prompts.values():  # the long one arrives first
            threads.append(threading.Thread(target=llm.create_completion, args=(prompt,), kwargs={"max_tokens": 2}))
            threads[-1].start()
            while len(llm.scheduler.waiting) < len(threads):
                threading.Event().wait(0.01)
        for _chunk in holder:  # read to its end: the sequence is free again
            pass
        for t in threads:
            t.join(timeout=600)
        lengths = {name: len(llm.tokenize(prompt.encode())) for name, prompt in prompts.items()}
    # the holder, then the short one, then the long one (the order of admissions, not of the threads' returns)
    assert admitted[-2:] == [lengths["short"], lengths["long"]]


def test_max_wait_bounds_the_delay_of_a_long_prompt() -> None:
    from llama_cpp_example_policy import ShortestPromptFirst

    policy = ShortestPromptFirst(max_wait=3)
    long_one = Ticket(0, n_prompt=500)
    short_one = Ticket(5, n_prompt=3)
    assert policy.select([long_one, short_one], []) is short_one
    long_one.passed_over = 3
    assert policy.select([long_one, short_one], []) is long_one


@pytest.mark.parametrize("max_wait", [0, 2.5, True])
def test_options_are_checked(max_wait: Any) -> None:
    from llama_cpp_example_policy import ShortestPromptFirst

    with pytest.raises(ValueError, match="max_wait must be an integer >= 1"):
        ShortestPromptFirst(max_wait=max_wait)
