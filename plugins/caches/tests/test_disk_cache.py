"""The disk cache: hits across Llamas and processes, its byte bound and order, files it must not trust,
and caches shared by Llamas of different models.

Nothing a cache must refuse may reach llama.cpp: the tests spy on
``Context.set_seq_state``, the one door into llama.cpp's state reader.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from llama_cpp import Llama, state_file
from llama_cpp.engine import SequenceSnapshot
from llama_cpp.engine.origin import StateOrigin
from llama_cpp.engine.prefix import common_prefix
from llama_cpp_caches import LlamaDiskCache, LlamaRAMCache

PROMPT = "Once upon a time, in a land far away, there lived"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
ORIGIN = StateOrigin("0" * 64, (("n_ctx_seq", 512),))


def _llama(path: Path, cache: Any = None, **kw: Any) -> Llama:
    return Llama(str(path), n_ctx=kw.pop("n_ctx", 512), n_threads=2, verbose=False, cache=cache, **kw)


def _disk(directory: Path, **options: Any) -> dict[str, Any]:
    return {"strategy": "disk", "path": str(directory), "capacity_bytes": 64 << 20, **options}


def _greedy(llm: Llama, prompt: str, n: int = 12) -> str:
    return llm.create_completion(prompt, max_tokens=n, temperature=0.0)["choices"][0]["text"]


def _snap(tokens: tuple[int, ...], size: int, origin: StateOrigin = ORIGIN) -> SequenceSnapshot:
    return SequenceSnapshot(tokens=tokens, state=b"\xd8\x3c\x14\xaf" + b"s" * (size - 4), origin=origin)


@pytest.fixture(scope="module")
def story(tiny_model_path: Path) -> tuple[str, str]:
    """PROMPT's greedy reply, and the greedy continuation of PROMPT + reply, from cold runs."""
    with _llama(tiny_model_path) as cold:
        first = _greedy(cold, PROMPT)
        return first, _greedy(cold, PROMPT + first)


def test_a_hit_continues_like_a_cold_run_and_a_new_llama_hits_the_files(
        tiny_model_path: Path, tmp_path: Path, story: tuple[str, str], restored_states: list[bytes]) -> None:
    first, expected = story
    with _llama(tiny_model_path, _disk(tmp_path)) as llm:
        assert _greedy(llm, PROMPT) == first
        assert len(list(tmp_path.glob("*.llseq"))) == 1 and not restored_states
    with _llama(tiny_model_path, _disk(tmp_path)) as again:  # a new Llama, a new cache object: only the files
        evaluated = again.scheduler.counters.n_prompt_tokens
        assert _greedy(again, PROMPT + first) == expected
        assert len(restored_states) == 1
        reply = len(again.tokenize((PROMPT + first).encode())) - len(again.tokenize(PROMPT.encode()))
        assert again.scheduler.counters.n_prompt_tokens - evaluated <= reply + 1
        assert again.cache.cache_size == sum(p.stat().st_size for p in tmp_path.glob("*.llseq"))


def test_the_second_turn_of_a_chat_hits_the_first(tiny_model_factory: Callable[..., Path], tmp_path: Path) -> None:
    model = tiny_model_factory(chat_template=CHATML)
    first = [{"role": "system", "content": "You are a helpful assistant."},
             {"role": "user", "content": "Name three colors."}]

    def turn(llm: Llama, messages: list[dict[str, str]]) -> dict[str, Any]:
        return llm.create_chat_completion(messages, max_tokens=16, temperature=0.0)

    with _llama(model) as cold:  # both turns in one Llama, the second reusing what the first left
        reply = turn(cold, first)["choices"][0]["message"]
        second = [*first, {"role": "assistant", "content": reply["content"]},
                  {"role": "user", "content": "And two more?"}]
        expected = turn(cold, second)["choices"][0]["message"]
    with _llama(model, _disk(tmp_path)) as llm:
        assert turn(llm, first)["choices"][0]["message"] == reply
    with _llama(model, _disk(tmp_path)) as llm:  # a new Llama: the first turn is only in the files
        out = turn(llm, second)
        assert out["choices"][0]["message"] == expected
        assert llm.scheduler.counters.n_prompt_tokens < out["usage"]["prompt_tokens"] // 2, out["usage"]


def test_capacity_holds_and_the_least_recently_used_files_go(tmp_path: Path) -> None:
    cache = LlamaDiskCache(tmp_path, capacity_bytes=3000)
    for i in range(4):
        cache[(i, 1, 2)] = _snap((i, 1, 2), 800)
    size = next(tmp_path.glob("*.llseq")).stat().st_size
    assert cache.cache_size == 3 * size <= 3000 and (0, 1, 2) not in cache  # the oldest went
    assert cache.lookup((1, 1, 2, 5))[0] == 3  # used: now the most recent, in its file's mtime
    reopened = LlamaDiskCache(tmp_path, capacity_bytes=3000)  # a restart keeps the order
    reopened[(9, 9, 9)] = _snap((9, 9, 9), 800)
    assert (1, 1, 2) in reopened and (2, 1, 2) not in reopened and (3, 1, 2) in reopened
    assert reopened.cache_size == 3 * size and len(reopened) == 3
    reopened[(9, 9, 9)] = _snap((9, 9, 9), 100)  # replacing gives the old bytes back
    assert reopened.cache_size == 3 * size - 700
    reopened[(8, 8, 8)] = _snap((8, 8, 8), 3001)  # larger than the capacity: not stored
    assert (8, 8, 8) not in reopened and reopened.cache_size == 3 * size - 700
    assert len(cache) == 3  # the first cache object sees what the other one did
    cache.clear()
    assert list(tmp_path.iterdir()) == []


def test_lookup_takes_the_longest_prefix_of_the_right_origin(tmp_path: Path) -> None:
    cache = LlamaDiskCache(tmp_path)
    other = StateOrigin("1" * 64, ORIGIN.context)
    cache[(1, 2, 3, 4, 5)] = _snap((1, 2, 3, 4, 5), 100, origin=other)
    cache[(1, 2, 3)] = _snap((1, 2, 3), 100)
    depth, found = cache.lookup((1, 2, 3, 4, 9), None, ORIGIN)
    assert depth == 3 and found.origin == ORIGIN
    assert cache.lookup((1, 2, 3, 4, 9))[0] == 4  # None: any origin
    assert cache.lookup((7,), None, ORIGIN) is None
    with pytest.raises(TypeError, match="SequenceSnapshot"):
        cache[(1,)] = b"a seed LlamaState would be pickled: refused"  # type: ignore[assignment]
    with pytest.raises(ValueError, match="the snapshot's own tokens"):
        cache[(1,)] = _snap((2,), 100)


def _damage(directory: Path, change: Callable[[bytes], bytes]) -> None:
    (path,) = directory.glob("*.llseq")
    path.write_bytes(change(path.read_bytes()))


DAMAGE: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "a pickle": (lambda d: pickle.dumps({"llama_state": b"...", "n_tokens": 3}), "pickle"),
    "truncated": (lambda d: d[:len(d) // 2], "truncated"),
    "one flipped byte": (lambda d: d[:-50] + bytes([d[-50] ^ 0x10]) + d[-49:], "sha256"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_files_are_reported_deleted_and_never_restored(
        damage: str, tiny_model_path: Path, tmp_path: Path, story: tuple[str, str], restored_states: list[bytes]) -> None:
    first, expected = story
    with _llama(tiny_model_path, _disk(tmp_path)) as llm:
        _greedy(llm, PROMPT)
    change, words = DAMAGE[damage]
    _damage(tmp_path, change)
    (damaged,) = tmp_path.glob("*.llseq")
    with pytest.warns(RuntimeWarning, match=words), _llama(tiny_model_path, _disk(tmp_path)) as llm:
        assert _greedy(llm, PROMPT + first) == expected
    assert not restored_states
    assert not damaged.exists() or state_file.read_state_file(damaged).tokens  # replaced by a whole new file


@pytest.mark.parametrize("other", ["another model", "another n_ctx"])
def test_files_of_another_model_or_context_are_skipped(
        other: str, tiny_model_path: Path, tiny_model_factory: Callable[..., Path], tmp_path: Path,
        story: tuple[str, str], restored_states: list[bytes], capsys: pytest.CaptureFixture[str]) -> None:
    first, expected = story
    path, options = {"another model": (tiny_model_factory(seed=99), {}),
                     "another n_ctx": (tiny_model_path, {"n_ctx": 256})}[other]
    with _llama(path, _disk(tmp_path), **options) as llm:
        _greedy(llm, PROMPT)
    (theirs,) = tmp_path.glob("*.llseq")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _llama(tiny_model_path, _disk(tmp_path, verbose=True)) as llm:
            assert _greedy(llm, PROMPT + first) == expected
    assert not [w for w in caught if "disk cache" in str(w.message)]  # another Llama's entry is not damage
    assert not restored_states and theirs.exists()  # left for the Llama it belongs to
    assert "another model or context" in capsys.readouterr().err
    assert len(list(tmp_path.glob("*.llseq"))) == 2


class SeedProtocolCache:
    """A cache written against the seed's protocol only: no lookup, no idea of origins."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, ...], Any] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: Sequence[int]) -> bool:
        return any(common_prefix(k, key) for k in self.entries)

    def __getitem__(self, key: Sequence[int]) -> Any:
        return self.entries[max(self.entries, key=lambda k: common_prefix(k, key))]

    def __setitem__(self, key: Sequence[int], value: Any) -> None:
        self.entries[tuple(key)] = value


@pytest.mark.parametrize("strategy", ["ram", "disk", "seed protocol"])
def test_a_cache_shared_by_two_models_never_cross_restores(
        strategy: str, tiny_model_path: Path, tiny_model_factory: Callable[..., Path], tmp_path: Path,
        story: tuple[str, str], restored_states: list[bytes]) -> None:
    other_path = tiny_model_factory(seed=99)
    with _llama(other_path) as cold:
        other_expected = _greedy(cold, PROMPT)
    cache = {"ram": lambda: LlamaRAMCache(64 << 20), "disk": lambda: LlamaDiskCache(tmp_path),
             "seed protocol": SeedProtocolCache}[strategy]()
    with _llama(tiny_model_path, cache) as mine, _llama(other_path, cache) as theirs:
        assert _greedy(mine, PROMPT) == story[0]
        assert _greedy(theirs, PROMPT) == other_expected and not restored_states
        mine.reset()
        assert _greedy(mine, PROMPT + story[0]) == story[1] and len(restored_states) == 1  # its own entry
        assert len(cache) == 3  # mine twice (both generations), theirs once: nothing replaced across models


WRITER = textwrap.dedent("""
    import random, sys
    from llama_cpp.engine import SequenceSnapshot
    from llama_cpp.engine.origin import StateOrigin
    from llama_cpp_caches import LlamaDiskCache

    directory, seed = sys.argv[1], int(sys.argv[2])
    origin = StateOrigin("0" * 64, (("n_ctx_seq", 512),))
    cache = LlamaDiskCache(directory, capacity_bytes=200_000)
    rng = random.Random(seed)
    for i in range(60):
        tokens = tuple(rng.randrange(8) for _ in range(3))  # few keys: both processes write the same names
        state = b"\\xd8\\x3c\\x14\\xaf" + bytes([seed]) * rng.randrange(5_000, 40_000)
        cache[tokens] = SequenceSnapshot(tokens=tokens, state=state, origin=origin)
        query = tokens[:2] + (9,)
        found = cache.lookup(query, None, origin)
        # the entry just stored may already be gone (the other process evicts by capacity): what is found is
        # a whole entry, sharing the prefix the lookup reports
        if found is not None:
            shared = next((i for i, (a, b) in enumerate(zip(found[1].tokens, query)) if a != b), 3)
            assert len(found[1].tokens) == 3 and found[0] == shared > 0
""")


def test_two_processes_writing_one_directory_leave_only_whole_files(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    directory = tmp_path / "cache"
    directory.mkdir()
    writers = [subprocess.Popen([sys.executable, str(script), str(directory), str(seed)], stderr=subprocess.PIPE,
                                text=True) for seed in (1, 2)]
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
        assert "Warning" not in err, err
    files = list(directory.iterdir())
    assert files and all(f.suffix == ".llseq" for f in files)  # no temporary file left behind
    for path in files:
        snapshot = state_file.read_state_file(path, origin=ORIGIN)  # whole: checksum and all
        assert len(set(snapshot.state[4:])) == 1  # one writer's bytes, never a mix
    assert sum(f.stat().st_size for f in files) <= 200_000 + 41_000  # one concurrent store may overshoot


def test_the_strategy_takes_the_seed_names(tmp_path: Path) -> None:
    from llama_cpp._compose import resolve
    from llama_cpp.llama_cache import LlamaDiskCache as SeedName

    assert SeedName is LlamaDiskCache
    with pytest.raises(ValueError, match="two directories"):
        resolve("cache", {"strategy": "disk", "path": "a", "cache_dir": "b"})
    cache = resolve("cache", {"strategy": "disk", "cache_dir": str(tmp_path / "seed"), "capacity_bytes": 10})
    assert isinstance(cache, LlamaDiskCache) and cache.cache_dir == tmp_path / "seed" and cache.capacity_bytes == 10
    old = tmp_path / "seed" / ".x.llseq.123.tmp"  # a dead writer's temporary file
    old.write_bytes(b"half")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert len(cache) == 0 and not old.exists()


def test_a_pinned_file_is_evicted_after_the_others_in_every_process(tmp_path: Path) -> None:
    size = state_file.encode(_snap((1, 2, 3), 1000)).size
    cache = LlamaDiskCache(tmp_path, capacity_bytes=3 * size + 100)
    cache.pin([1, 2, 3], _snap((1, 2, 3), 1000), seconds=60.0)
    for k in range(4):
        cache[[7, k, 0]] = _snap((7, k, 0), 1000)
    # the pin is still there, also for another process's view of the directory, and a hit does not end it
    other = LlamaDiskCache(tmp_path, capacity_bytes=3 * size + 100)
    assert other.lookup([1, 2, 3, 4])[0] == 3
    other[[8, 0, 0]] = _snap((8, 0, 0), 1000)
    assert cache.lookup([1, 2, 3])[0] == 3
    assert cache.renew([1, 2], seconds=60.0) and not cache.renew([1, 5], seconds=60.0)
    expired = LlamaDiskCache(tmp_path / "expired", capacity_bytes=2 * size + 100)
    expired.pin([1, 2, 3], _snap((1, 2, 3), 1000), seconds=0.0)
    expired[[2, 0, 0]] = _snap((2, 0, 0), 1000)
    expired[[3, 0, 0]] = _snap((3, 0, 0), 1000)
    assert expired.lookup([1, 2, 3]) is None
