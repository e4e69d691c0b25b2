"""The plugin's own parts: registration, the seed classes, prompt lookup, the lookup-cache check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llama_cpp.llama_speculative import SpecConfig, SpeculativeType, create_spec_engine
from llama_cpp.plugins import SpeculativeEngine, get_host
from llama_cpp_speculative import (LlamaMTPDecoding, LlamaNGramMapDecoding, LlamaPromptLookupDecoding,
                                   NativeSpeculativeEngine, check_lookup_cache)


def test_every_type_is_registered_by_llama_cpps_name() -> None:
    names = {t.to_str() for t in SpeculativeType if t not in (SpeculativeType.NONE, SpeculativeType.COUNT)}
    registered = set(get_host().records(SpeculativeEngine))
    assert names | {"prompt-lookup"} <= registered


def test_factories_build_engines_from_a_config_or_options() -> None:
    engine = create_spec_engine(SpecConfig(spec_type="ngram-mod", ngram_mod_n_max=16, ngram_mod_n_min=8))
    assert isinstance(engine, NativeSpeculativeEngine) and engine.max_draft_tokens() == 16
    record = get_host().choose(SpeculativeEngine, "ngram-map-k")
    assert record.factory(ngram_size_n=3).config.ngram_size_n == 3
    with pytest.raises(ValueError, match="SpecConfig for ngram-mod"):
        record.factory(config=SpecConfig(spec_type="ngram-mod"))
    with pytest.raises(ValueError, match="unknown speculative option"):
        record.factory(size=3)


def test_seed_classes() -> None:
    k = LlamaNGramMapDecoding()
    assert (k.config.ngram_size_n, k.config.ngram_size_m, k.config.ngram_min_hits) == (12, 48, 1)  # SpecConfig's
    k4v = LlamaNGramMapDecoding(4, 8, spec_type="ngram_map_k4v", min_hits=2)  # a string type works
    assert k4v.type is SpeculativeType.NGRAM_MAP_K4V and k4v.max_draft_tokens() == 8
    with pytest.raises(ValueError, match="ngram-map-k or ngram-map-k4v"):
        LlamaNGramMapDecoding(spec_type="ngram-mod")
    with pytest.raises(ValueError, match="sync_check_tokens"):
        LlamaNGramMapDecoding(sync_check_tokens=-1)
    mtp = LlamaMTPDecoding(draft_n_max=2)
    assert mtp.needs_target_mtp() and mtp.max_draft_tokens() == 2
    with pytest.raises(ValueError, match="draft-mtp"):
        LlamaMTPDecoding(SpecConfig(spec_type="ngram-mod"))
    with pytest.raises(RuntimeError, match="not attached"):
        k.draft(np.zeros(3, dtype=np.intc), n_past=3, id_last=1, n_max=4)


def test_prompt_lookup_prefers_the_longest_latest_match() -> None:
    lookup = LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=3)
    history = np.asarray([5, 6, 7, 8, 9, 5, 6, 1, 2, 5], dtype=np.intc)
    # id_last 6 after 5: the bigram (5, 6) occurs at 0 and 5; the latest one proposes what followed it
    assert lookup.draft(history, n_past=10, id_last=6, n_max=3).tolist() == [1, 2, 5]
    assert lookup.draft(history, n_past=6, id_last=6, n_max=3).tolist() == [7, 8, 9]  # n_past bounds the history
    assert lookup(np.asarray([1, 2, 3, 1, 2], dtype=np.intc)).tolist() == [3, 1, 2]
    assert lookup(np.asarray([1, 2, 3], dtype=np.intc)).tolist() == []
    with pytest.raises(ValueError, match="num_pred_tokens"):
        LlamaPromptLookupDecoding(num_pred_tokens=0)


def _cache_file(path: Path, entries: list[tuple[list[int], list[tuple[int, int]]]]) -> Path:
    words: list[int] = []
    for ngram, pairs in entries:
        words += ngram + [-1] * (4 - len(ngram)) + [len(pairs)]
        for token, count in pairs:
            words += [token, count]
    path.write_bytes(np.asarray(words, dtype="<i4").tobytes())
    return path


def test_lookup_cache_check(tmp_path: Path) -> None:
    good = _cache_file(tmp_path / "good.bin", [([1, 2], [(3, 4)]), ([5, 6, 7, 8], [(9, 1), (10, 2)])])
    assert check_lookup_cache(good, 100) == 2
    with pytest.raises(ValueError, match="outside this model's vocabulary"):
        check_lookup_cache(good, 8)
    (tmp_path / "odd.bin").write_bytes(b"\x01\x02\x03")
    with pytest.raises(ValueError, match="whole number"):
        check_lookup_cache(tmp_path / "odd.bin", 100)
    cut = tmp_path / "cut.bin"
    cut.write_bytes(good.read_bytes()[:-8])
    with pytest.raises(ValueError, match="truncated"):
        check_lookup_cache(cut, 100)
    zero = _cache_file(tmp_path / "zero.bin", [([1, 2], [(3, 0)])])
    with pytest.raises(ValueError, match="malformed"):
        check_lookup_cache(zero, 100)
    with pytest.raises(ValueError, match="cannot be read"):
        check_lookup_cache(tmp_path / "missing.bin", 100)


def test_create_native_spec_engine_on_raw_pointers(tiny_model_path: Path) -> None:
    """The seed's factory, bound to a model and context made with the low-level API."""
    from llama_cpp import llama_cpp as C
    from llama_cpp.llama_speculative import create_native_spec_engine

    C.llama_backend_init()
    model = C.llama_model_load_from_file(str(tiny_model_path).encode(), C.llama_model_default_params())
    ctx = C.llama_init_from_model(model, C.llama_context_default_params())
    try:
        engine = create_native_spec_engine(SpecConfig(spec_type="ngram-simple", ngram_size_n=2, ngram_size_m=3),
                                           target_model=model, target_context=ctx)
        history = np.asarray([1, 5, 6, 7, 8, 9, 10, 5], dtype=np.intc)  # llama.cpp skips a match at 0
        engine.begin(history, 0)
        assert engine.draft(history, n_past=len(history), id_last=6, n_max=3).tolist() == [7, 8, 9]
        engine.accept(3, 0)
        engine.close()
        engine.close()
    finally:
        C.llama_free(ctx)
        C.llama_model_free(model)
