"""Checkpoints of memories that cannot drop a suffix: a hybrid recurrent model and Gemma 3's sliding window.

Each case compares a warm continuation (a prompt that shares part of what a
sequence, a cache entry or a saved state holds) with a cold run of the same
prompt in a fresh Llama: the greedy text must be the same, and the warm run
must evaluate only what follows the checkpoint it restored.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Callable

import pytest

from llama_cpp import Llama
from llama_cpp.engine.checkpoints import PROMPT_TAIL
from llama_cpp.llama_cache import HybridCheckpointCache, LlamaRAMCache

PROMPT = "The quick brown fox jumps over the lazy dog. " * 6


def _greedy(llm: Llama, prompt: Any, n: int = 12) -> tuple[str, int]:
    """(greedy text, prompt tokens the engine evaluated for it)."""
    before = llm.scheduler.counters.n_prompt_tokens
    text = llm.create_completion(prompt, max_tokens=n, temperature=0)["choices"][0]["text"]
    return text, llm.scheduler.counters.n_prompt_tokens - before


@pytest.fixture(scope="module")
def hybrid_path(tiny_spec_model: Callable[[str], Path]) -> str:
    return str(tiny_spec_model("qwen35"))


def _hybrid(path: str, **kwargs: Any) -> Llama:
    return Llama(path, n_ctx=512, verbose=False, **kwargs)


@pytest.fixture(scope="module")
def diverging(hybrid_path: str) -> tuple[list[int], list[int], str]:
    """A prompt, one that leaves it after 30 tokens, and the cold greedy text of the second."""
    llm = _hybrid(hybrid_path)
    first = llm.tokenize(PROMPT.encode())
    second = first[:30] + llm.tokenize(b" a sleepy cat naps", add_bos=False)
    return first, second, _greedy(_hybrid(hybrid_path), second)[0]


def test_hybrid_models_get_checkpoints_without_asking(hybrid_path: str) -> None:
    llm = _hybrid(hybrid_path)
    assert llm.is_hybrid
    manager = llm._hybrid_cache_mgr
    assert isinstance(manager, HybridCheckpointCache)
    assert (manager.max_checkpoints, manager.interval, manager.on_device) == (16, 4096, False)
    assert _hybrid(hybrid_path, ctx_checkpoints=0)._hybrid_cache_mgr.max_checkpoints == 0


def test_the_same_prompt_again_continues_from_the_prompt_tail(hybrid_path: str) -> None:
    llm = _hybrid(hybrid_path)
    cold, evaluated = _greedy(llm, PROMPT)
    n_prompt = len(llm.tokenize(PROMPT.encode()))
    assert evaluated == n_prompt
    assert [c.n_tokens for c in llm.scheduler.slots[0].ledger.checkpoints] == [n_prompt - PROMPT_TAIL]
    assert _greedy(llm, PROMPT) == (cold, PROMPT_TAIL)


def test_without_checkpoints_the_recurrent_state_is_evaluated_again(hybrid_path: str) -> None:
    llm = _hybrid(hybrid_path, ctx_checkpoints=0)
    cold, evaluated = _greedy(llm, PROMPT)
    assert _greedy(llm, PROMPT) == (cold, evaluated)


def test_a_diverging_prompt_restores_the_last_checkpoint_before_the_difference(
        hybrid_path: str, diverging: tuple[list[int], list[int], str]) -> None:
    first, second, cold = diverging
    llm = _hybrid(hybrid_path, checkpoint_interval=8)
    _greedy(llm, first, 4)
    assert [c.n_tokens for c in llm.scheduler.slots[0].ledger.checkpoints] == \
        [*range(8, len(first) - PROMPT_TAIL, 8), len(first) - PROMPT_TAIL]
    assert _greedy(llm, second) == (cold, len(second) - 24)  # 24: the last multiple of 8 up to 30
    # the checkpoints after the difference went with the tokens they covered
    assert all(c.n_tokens <= len(second) for c in llm.scheduler.slots[0].ledger.checkpoints)


def test_ctx_checkpoints_bounds_each_sequence(hybrid_path: str) -> None:
    llm = _hybrid(hybrid_path, checkpoint_interval=4, ctx_checkpoints=3)
    _greedy(llm, PROMPT, 2)
    kept = [c.n_tokens for c in llm.scheduler.slots[0].ledger.checkpoints]
    n_prompt = len(llm.tokenize(PROMPT.encode()))
    taken = [*range(4, n_prompt - PROMPT_TAIL, 4), n_prompt - PROMPT_TAIL]
    assert kept == taken[-3:]  # the oldest went first
    assert llm._hybrid_cache_mgr.cache_size == sum(c.nbytes for c in llm.scheduler.slots[0].ledger.checkpoints)


def test_on_device_checkpoints_keep_one_per_sequence(hybrid_path: str) -> None:
    llm = _hybrid(hybrid_path, checkpoint_on_device=True, checkpoint_interval=8)
    cold, evaluated = _greedy(llm, PROMPT)
    (checkpoint,) = llm.scheduler.slots[0].ledger.checkpoints
    assert checkpoint.on_device and checkpoint.n_tokens == evaluated - PROMPT_TAIL
    assert llm._hybrid_cache_mgr.cache_size == 0  # nothing held in host memory
    assert _greedy(llm, PROMPT) == (cold, PROMPT_TAIL)
    assert llm.snapshot_sequence().checkpoints == ()  # device buffers never travel in a snapshot


def test_a_ram_cache_entry_carries_its_checkpoints(hybrid_path: str,
                                                   diverging: tuple[list[int], list[int], str]) -> None:
    first, second, cold = diverging
    llm = _hybrid(hybrid_path, checkpoint_interval=8, cache=LlamaRAMCache())
    _greedy(llm, first, 4)
    llm.reset()  # the sequence forgets; only the cache knows the first prompt now
    assert _greedy(llm, second) == (cold, len(second) - 24)


def test_save_and_load_state_carry_the_checkpoints(hybrid_path: str) -> None:
    llm = _hybrid(hybrid_path)
    cold, _ = _greedy(llm, PROMPT)
    state = pickle.loads(pickle.dumps(llm.save_state()))
    assert [c.n_tokens for c in state.checkpoints] == [len(llm.tokenize(PROMPT.encode())) - PROMPT_TAIL]
    _greedy(llm, "Something else entirely, to overwrite the sequence.")
    llm.load_state(state)
    assert _greedy(llm, PROMPT) == (cold, PROMPT_TAIL)
    other = _hybrid(hybrid_path)
    other.load_state(state)
    assert _greedy(other, PROMPT) == (cold, PROMPT_TAIL)


def test_a_session_file_carries_the_checkpoints(hybrid_path: str, tmp_path: Path) -> None:
    llm = _hybrid(hybrid_path)
    cold, _ = _greedy(llm, PROMPT)
    llm.save_session(tmp_path / "session.bin")
    other = _hybrid(hybrid_path)
    other.load_session(tmp_path / "session.bin")
    assert [c.n_tokens for c in other.scheduler.current.ledger.checkpoints] == \
        [c.n_tokens for c in llm.scheduler.current.ledger.checkpoints]
    assert _greedy(other, PROMPT) == (cold, PROMPT_TAIL)


def test_seed_methods_of_the_checkpoint_cache(hybrid_path: str) -> None:
    llm = _hybrid(hybrid_path)
    manager = llm._hybrid_cache_mgr
    cold, _ = _greedy(llm, PROMPT, 4)
    held = list(llm.scheduler.slots[0].ledger.tokens)
    assert not manager.save_checkpoint(len(held) - 1, held, 0)  # only what the sequence holds now
    assert manager.save_checkpoint(len(held), held, 0)
    best = manager.find_best_checkpoint(held[:20] + [5, 6, 7], 0)
    assert best is None  # the first checkpoint is 4 tokens before the prompt's end
    best = manager.find_best_checkpoint(held, 0)
    assert best is not None and best.n_tokens == len(held)
    earlier = manager.find_best_checkpoint(held[:-1], 0)
    assert manager.restore_checkpoint(earlier, 0)
    assert len(llm.scheduler.slots[0].ledger) == earlier.n_tokens
    assert not manager.restore_checkpoint(best, 0)  # dropped with the tokens it covered
    with pytest.raises(ValueError, match="seq_id must be one of"):
        manager.find_best_checkpoint(held, 3)
    manager.clear()
    assert manager.cache_size == 0


# -- Gemma 3 270M: sliding-window attention; without swa_full its window cache prunes old cells ------------

GEMMA_TEXT = " ".join(f"item{i} is {i * 7 % 13}." for i in range(400))


@pytest.fixture(scope="module")
def gemma(gemma3_model_path: Path) -> dict[str, Any]:
    """A 1400-token prompt, one that leaves it at 700 (out of the pruned window), and the second's cold text."""
    path = str(gemma3_model_path)
    cold_llm = Llama(path, n_ctx=2048, verbose=False, swa_full=False)
    tokens = cold_llm.tokenize(GEMMA_TEXT.encode())
    first = tokens[:1400]
    second = tokens[:700] + cold_llm.tokenize(b" And now something else entirely.", add_bos=False)
    return {"path": path, "first": first, "second": second, "cold": _greedy(cold_llm, second)[0]}


def _gemma(gemma: dict[str, Any], **kwargs: Any) -> Llama:
    return Llama(gemma["path"], n_ctx=2048, verbose=False, swa_full=False, checkpoint_interval=256, **kwargs)


def test_gemma_with_a_pruned_window_continues_from_a_checkpoint(gemma: dict[str, Any]) -> None:
    llm = _gemma(gemma)
    assert llm.is_hybrid and llm.n_swa() == 512
    _greedy(llm, gemma["first"], 4)
    # the window cache no longer holds what position 700 attends to: plain truncation would be wrong
    assert llm.scheduler.ctx.window_holds(0, len(gemma["first"]) - 1)
    assert not llm.scheduler.ctx.window_holds(0, 700)
    assert _greedy(llm, gemma["second"]) == (gemma["cold"], len(gemma["second"]) - 512)


def test_gemma_cache_hit_equals_a_cold_run(gemma: dict[str, Any]) -> None:
    llm = _gemma(gemma, cache=LlamaRAMCache())
    _greedy(llm, gemma["first"], 4)
    llm.reset()
    assert _greedy(llm, gemma["second"]) == (gemma["cold"], len(gemma["second"]) - 512)


def test_gemma_with_a_full_window_is_not_hybrid(gemma: dict[str, Any]) -> None:
    llm = Llama(gemma["path"], n_ctx=2048, verbose=False)  # swa_full: llama.cpp's default, true
    assert not llm.is_hybrid and llm._hybrid_cache_mgr is None
    _greedy(llm, gemma["first"], 4)
    assert _greedy(llm, gemma["second"]) == (gemma["cold"], len(gemma["second"]) - 700)
