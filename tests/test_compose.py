"""Compose by configuration: plugin names in dicts, objects as given, from_config."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_cpp import Llama
from llama_cpp.plugins import CacheStrategy, get_host, hookimpl


class PrefixDictCache:
    """A minimal cache with the seed's protocol: longest stored prefix of the key."""

    def __init__(self, **options: object) -> None:
        self.options = options
        self.store: dict[tuple[int, ...], object] = {}
        self.hits = 0

    def _best(self, tokens: list[int]) -> tuple[int, ...] | None:
        keys = [k for k in self.store if tuple(tokens[: len(k)]) == k]
        return max(keys, key=len) if keys else None

    def __contains__(self, tokens: list[int]) -> bool:
        return self._best(tokens) is not None

    def __getitem__(self, tokens: list[int]) -> object:
        key = self._best(tokens)
        if key is None:
            raise KeyError("no cached prefix")
        self.hits += 1
        return self.store[key]

    def __setitem__(self, tokens: list[int], state: object) -> None:
        self.store[tuple(tokens)] = state


class CachePlugin:
    @hookimpl
    def llama_cpp_cache_strategies(self):
        return [CacheStrategy("test-dict", PrefixDictCache)]


@pytest.fixture
def cache_plugin():
    host = get_host()
    host.register(CachePlugin(), name="test-cache-plugin")
    yield
    host.unregister(name="test-cache-plugin")


def test_cache_chosen_by_name_with_options(tiny_model_path: Path, cache_plugin: None) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False,
               cache={"strategy": "test-dict", "capacity_bytes": 123}) as llm:
        assert isinstance(llm.cache, PrefixDictCache) and llm.cache.options == {"capacity_bytes": 123}


def test_unknown_plugin_name_lists_the_valid_ones(tiny_model_path: Path, cache_plugin: None) -> None:
    with pytest.raises(ValueError, match="unknown cache strategy 'nope'; valid names: disk, ram, test-dict, trie"):
        Llama(str(tiny_model_path), verbose=False, cache={"strategy": "nope"})
    with pytest.raises(ValueError, match="key 'strategy'"):
        Llama(str(tiny_model_path), verbose=False, cache={"capacity_bytes": 1})


def test_a_cache_object_restores_a_longer_prefix(tiny_model_path: Path) -> None:
    cache = PrefixDictCache()
    with Llama(str(tiny_model_path), n_ctx=256, n_threads=2, verbose=False) as llm:
        llm.set_cache(cache)
        first = llm.create_completion("Once upon a time", max_tokens=8, temperature=0.0)["choices"][0]["text"]
        assert len(cache.store) == 1
        llm.create_completion("Something else entirely", max_tokens=2, temperature=0.0)
        # a follow-up that continues the first exchange (as a chat does) starts from the cached state
        follow = "Once upon a time" + first + " and then"
        cached = llm.create_completion(follow, max_tokens=8, temperature=0.0)["choices"][0]["text"]
        assert cache.hits >= 1
        llm.set_cache(None)
        llm.reset()
        assert llm.create_completion(follow, max_tokens=8, temperature=0.0)["choices"][0]["text"] == cached


def test_from_config_dict_and_toml(tiny_model_path: Path, tmp_path: Path) -> None:
    with Llama.from_config({"model_path": str(tiny_model_path), "n_ctx": 256, "verbose": False}) as llm:
        assert llm.n_ctx() == 256
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.gguf").write_bytes(tiny_model_path.read_bytes())
    config = tmp_path / "llama.toml"
    config.write_text('model_path = "models/tiny.gguf"\nn_ctx = 512\nverbose = false\n')
    with Llama.from_config(config) as llm:  # relative to the file
        assert llm.n_ctx() == 512
    config.write_text('model_path = "models/tiny.gguf"\nn_ctxx = 512\n')
    with pytest.raises(TypeError, match="n_ctxx"):
        Llama.from_config(config)
    config.write_text("n_ctx = [broken")
    with pytest.raises(ValueError, match="not valid TOML"):
        Llama.from_config(config)


def test_speculative_engine_by_name_alias_and_config_file(tiny_model_path: Path, tmp_path: Path) -> None:
    with Llama(str(tiny_model_path), verbose=False, speculative={"engine": "ngram-k", "ngram_size_n": 3}) as llm:
        assert llm.speculative_engine.name == "ngram-map-k"  # the alias names llama.cpp's type
    with pytest.raises(ValueError, match="no-such-engine.*ngram-map-k"):
        Llama(str(tiny_model_path), verbose=False, speculative={"engine": "no-such-engine"})
    config = tmp_path / "llama.toml"
    config.write_text(f'model_path = "{tiny_model_path}"\nverbose = false\n[speculative]\nengine = "ngram-mod"\n'
                      'ngram_mod_n_max = 16\nngram_mod_n_min = 4\n')
    with Llama.from_config(config) as llm:
        assert llm.speculative_engine.max_draft_tokens() == 16
