"""The reasoning-budget state machine, driven with text tokens."""

from __future__ import annotations

from llama_cpp.sampling import SamplingParams
from llama_cpp_samplers.reasoning import ReasoningBudget, State

# a toy vocabulary: token id -> text
VOCAB = ["<think>", "</think>", "a", "b", "c", " [cut]", "<", "think", ">"]


def machine(**params) -> ReasoningBudget:
    return ReasoningBudget(SamplingParams(**params), VOCAB.__getitem__,
                           lambda text: [VOCAB.index(part) for part in _split(text)])


def _split(text: str) -> list[str]:
    out = []
    while text:
        match = max((t for t in VOCAB if text.startswith(t)), key=len)
        out.append(match)
        text = text[len(match):]
    return out


def feed(m: ReasoningBudget, tokens: list[int]) -> None:
    for token in tokens:
        m.accept(token)


def test_counts_then_forces_message_and_end_then_passes_through() -> None:
    m = machine(reasoning_budget=2, reasoning_budget_message=" [cut]")
    feed(m, [0])  # <think>
    assert m.state is State.COUNTING
    feed(m, [2, 3])  # two tokens of budget
    assert m.state is State.FORCING and m.forced_token() == VOCAB.index(" [cut]")
    feed(m, [5])
    assert m.forced_token() == 1  # </think>
    feed(m, [1])
    assert m.state is State.PASSTHROUGH and m.forced_token() is None
    feed(m, [0, 2, 3, 4, 2, 3])  # a second block is not touched
    assert m.state is State.PASSTHROUGH and m.forced_token() is None


def test_a_tag_spelled_with_several_tokens_is_found() -> None:
    m = machine(reasoning_budget=1)
    feed(m, [2, 6, 7, 8])  # "a" "<" "think" ">"
    assert m.state is State.COUNTING


def test_natural_end_inside_the_budget() -> None:
    m = machine(reasoning_budget=5, reasoning_start_in_prompt=True)
    feed(m, [2, 1])
    assert m.state is State.PASSTHROUGH


def test_gives_up_when_no_block_starts_in_time() -> None:
    m = machine(reasoning_budget=1, reasoning_start_max_tokens=3)
    feed(m, [2, 3, 4])
    assert m.state is State.PASSTHROUGH
    waiting = machine(reasoning_budget=1, reasoning_start_max_tokens=None)
    feed(waiting, [2] * 100)
    assert waiting.state is State.IDLE


def test_budget_zero_forces_as_soon_as_the_block_starts() -> None:
    assert machine(reasoning_budget=0, reasoning_start_in_prompt=True).forced_token() == 1
    m = machine(reasoning_budget=0)
    feed(m, [0])
    assert m.forced_token() == 1
