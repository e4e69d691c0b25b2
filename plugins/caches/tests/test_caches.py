"""The cache strategies: the store's byte bound and order, the trie, and cache hits in a Llama."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_cpp import Llama
from llama_cpp.engine import SequenceSnapshot
from llama_cpp_caches import LlamaCache, LlamaRAMCache, LlamaTrieCache, TokenTrie


def _snap(tokens: list[int], size: int, adapters: object = ()) -> SequenceSnapshot:
    state = b"x" * (size - 4 * len(tokens))
    return SequenceSnapshot(tokens=tuple(tokens), state=state, adapters=adapters)  # type: ignore[arg-type]


def test_trie_shared_prefixes() -> None:
    trie = TokenTrie()
    trie.add([1, 2, 3], 0)
    trie.add([1, 2, 4, 5], 1)
    assert trie.shared([1, 2, 4, 9]) == [{0, 1}, {0, 1}, {1}]
    assert trie.shared([7]) == []
    trie.remove([1, 2, 4, 5], 1)
    assert trie.shared([1, 2, 4, 5]) == [{0}, {0}]


def test_capacity_holds_exactly_and_the_least_recently_used_go_first() -> None:
    cache = LlamaRAMCache(capacity_bytes=1000)
    for i in range(4):
        cache[[i, 1, 2]] = _snap([i, 1, 2], 300)
    assert cache.cache_size == 900 and len(cache) == 3  # [0, 1, 2] went to make room
    assert [0, 1, 2] not in cache
    cache[[1, 1, 2]]  # used: now the most recent
    cache[[9]] = _snap([9], 300)
    assert cache.cache_size <= 1000 and [1, 1, 2] in cache and [2, 1, 2] not in cache
    cache[[9]] = _snap([9], 100)  # replacing gives the old bytes back
    assert cache.cache_size == 700
    cache[[8]] = _snap([8], 1001)  # larger than the capacity: not stored
    assert [8] not in cache and cache.cache_size == 700
    cache.clear()
    assert cache.cache_size == 0 and len(cache) == 0


def test_longest_shared_prefix_and_adapters() -> None:
    cache = LlamaTrieCache(capacity_bytes=10_000)
    cache[[1, 2, 3, 4, 5]] = _snap([1, 2, 3, 4, 5], 100)
    cache[[1, 2, 9]] = _snap([1, 2, 9], 100, adapters=(("a", 1.0),))
    depth, value = cache.lookup([1, 2, 3, 7], ())
    assert depth == 3 and value.tokens == (1, 2, 3, 4, 5)  # a stored key longer than the prompt counts
    assert cache.lookup([1, 2, 9, 9], ())[0] == 2  # the deeper entry has other adapters
    assert cache.lookup([1, 2, 9, 9])[0] == 3  # None: any adapters
    assert cache.lookup([1, 2, 9, 9], (("a", 1.0),))[0] == 3
    assert cache.lookup([5], ()) is None
    assert cache[[1, 2, 9]].tokens == (1, 2, 9)  # the seed's protocol ignores adapters
    with pytest.raises(KeyError):
        cache[[7]]
    assert LlamaCache is LlamaTrieCache
    with pytest.raises(ValueError, match="capacity_bytes"):
        LlamaRAMCache(capacity_bytes=-1)


@pytest.mark.parametrize("n_seq_max", [1, 2])
def test_a_hit_continues_like_a_cold_run(n_seq_max: int, tiny_model_path: Path) -> None:
    prompt = "Once upon a time, in a land far away, there lived"
    with Llama(str(tiny_model_path), n_ctx=512, n_threads=2, verbose=False) as cold:
        first = cold.create_completion(prompt, max_tokens=12, temperature=0.0)["choices"][0]["text"]
        expected = cold.create_completion(prompt + first, max_tokens=12, temperature=0.0)["choices"][0]["text"]
    with Llama(str(tiny_model_path), n_ctx=512, n_seq_max=n_seq_max, n_threads=2, verbose=False,
               cache={"strategy": "ram", "capacity_bytes": 64 << 20}) as llm:
        assert llm.create_completion(prompt, max_tokens=12, temperature=0.0)["choices"][0]["text"] == first
        llm.reset()  # nothing left in the sequences: only the cache holds the prefix
        evaluated = llm.scheduler.counters.n_prompt_tokens
        again = llm.create_completion(prompt + first, max_tokens=12, temperature=0.0)["choices"][0]["text"]
        assert again == expected
        # the prompt's tokens came from the cache; the retokenized reply is evaluated
        reply_tokens = len(llm.tokenize((prompt + first).encode())) - len(llm.tokenize(prompt.encode()))
        assert llm.scheduler.counters.n_prompt_tokens - evaluated <= reply_tokens + 1
        assert llm.cache.cache_size > 0


def test_the_second_turn_of_a_chat_hits_the_first(smollm2_model_path: Path) -> None:
    from llama_cpp.llama_cache import LlamaRAMCache as SeedName

    with Llama(str(smollm2_model_path), n_ctx=1024, n_threads=2, verbose=False, cache=SeedName()) as llm:
        messages = [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "Name three colors."}]
        reply = llm.create_chat_completion(messages, max_tokens=24, temperature=0.0)["choices"][0]["message"]
        llm.create_completion("Something else entirely, to overwrite the sequence.", max_tokens=4)
        evaluated = llm.scheduler.counters.n_prompt_tokens
        messages += [{"role": "assistant", "content": reply["content"]}, {"role": "user", "content": "And two more?"}]
        out = llm.create_chat_completion(messages, max_tokens=8, temperature=0.0)
        new = llm.scheduler.counters.n_prompt_tokens - evaluated
        assert new < out["usage"]["prompt_tokens"] // 2, (new, out["usage"])
