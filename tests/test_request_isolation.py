"""Nothing one request does can end or stall another.

Found by fuzzing the server: a request's sampler was built while the engine's lock was held (1000 DRY
breakers: 22 s in which every other request waited), and an exception while a request was being started
(an out-of-range seed) surfaced in whichever thread drove the engine, ending unrelated streams and
leaving a half-started slot.  Now a request's sampler is built on its own caller's thread before it is
queued, and a failure while it takes its sequence ends that request alone and frees the sequence.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from llama_cpp import Llama, hookimpl
from llama_cpp.plugins import SamplerStage
from llama_cpp.testing import registered_plugin

PROMPTS = ["The cat", "Once upon a time", "In a village"]


@pytest.fixture(scope="module")
def llm(tiny_model_path: Path) -> Llama:
    with Llama(str(tiny_model_path), n_ctx=4096, n_seq_max=4, n_threads=2, verbose=False) as model:
        yield model


def greedy(llm: Llama, prompt: str, n: int = 48) -> str:
    return llm.create_completion(prompt, max_tokens=n, temperature=0.0, ignore_eos=True)["choices"][0]["text"]


class SlowStage:
    """A sampler stage whose construction takes ``seconds`` (a stand-in for DRY's breakers or a big
    grammar) and contributes nothing; ``building`` is set when it starts, ``built`` when it is done."""

    def __init__(self) -> None:
        self.building = threading.Event()
        self.release = threading.Event()
        self.built = threading.Event()

    def build(self, ctx: Any) -> list[Any]:
        self.building.set()
        self.release.wait(60)  # as long as the test wants it to take
        self.built.set()
        return []

    @hookimpl
    def llama_cpp_sampler_stages(self) -> list[SamplerStage]:
        return [SamplerStage("slow_build", self.build, order=6, default=False, description="slow to build")]


def test_a_slow_sampler_build_does_not_hold_up_other_requests(llm: Llama) -> None:
    expected = greedy(llm, PROMPTS[0], 256)
    stage = SlowStage()
    with registered_plugin(stage, name="slow-stage-test"):
        slow = threading.Thread(target=lambda: llm.create_completion("slow", max_tokens=4,
                                                                     extra_samplers=["slow_build"]))
        slow.start()
        assert stage.building.wait(30), "the slow request never started building its sampler"
        text = greedy(llm, PROMPTS[0], 256)  # 256 tokens while the other request's sampler is being built
        finished_first = not stage.built.is_set()
        stage.release.set()
        slow.join(60)
    assert finished_first, "a request waited for another request's sampler to be built"
    assert text == expected


def test_a_failing_sampler_stage_is_its_callers_error(llm: Llama) -> None:
    """The example plugin's stage refuses a token id outside the vocabulary: raised to the caller when the
    request is submitted, before it takes a sequence; streams already running are untouched."""
    expected = [greedy(llm, p) for p in PROMPTS]
    streams = [llm.create_completion(p, max_tokens=48, temperature=0.0, ignore_eos=True, stream=True)
               for p in PROMPTS]
    texts = ["" for _ in PROMPTS]
    firsts = [next(s) for s in streams]
    for i, chunk in enumerate(firsts):
        texts[i] += chunk["choices"][0]["text"]
    with pytest.raises(ValueError, match="banned_tokens: 1000000000 is not a token id"):
        llm.create_completion("x", max_tokens=4, extra_samplers=["banned_tokens"],
                              extra={"banned_tokens": [10**9]})
    for i, stream in enumerate(streams):
        texts[i] += "".join(c["choices"][0]["text"] for c in stream)
    assert texts == expected
    assert all(slot.request is None for slot in llm.scheduler.slots)


class BrokenCache:
    """A prompt cache that fails for prompts holding ``poison`` (a cache backend's own bug or I/O error)."""

    def __init__(self, poison: int) -> None:
        self.poison = poison
        self.stored = 0

    def lookup(self, tokens: list[int], adapters: Any, origin: Any) -> None:
        if self.poison in tokens:
            raise RuntimeError("the cache's disk is gone")
        return None

    def __setitem__(self, tokens: Any, snapshot: Any) -> None:
        self.stored += 1


def test_a_failure_while_starting_ends_that_request_alone(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=2048, n_seq_max=4, n_threads=2, verbose=False) as llm:
        expected = [greedy(llm, p) for p in PROMPTS]
        poison = llm.tokenize(b"A zebra")[-1]
        assert not any(poison in llm.tokenize(p.encode()) for p in PROMPTS)
        llm.set_cache(BrokenCache(poison))
        results: dict[int, Any] = {}

        def run(i: int, prompt: str) -> None:
            try:
                results[i] = greedy(llm, prompt)
            except Exception as exc:  # noqa: BLE001 - the test looks at which request got what
                results[i] = exc

        threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate([*PROMPTS, "A zebra"])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert [results[i] for i in range(3)] == expected
        assert isinstance(results[3], RuntimeError) and "the cache's disk is gone" in str(results[3])
        assert all(slot.request is None for slot in llm.scheduler.slots)
        llm.set_cache(None)
        for _ in range(2):  # every sequence serves again, the one the failed request had among them
            assert [greedy(llm, p) for p in PROMPTS] == expected
