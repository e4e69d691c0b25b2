"""The seed's speculative names in the core: types, configuration, validation, output sizing."""

from __future__ import annotations

import pytest

from llama_cpp.engine.speculative import STATS_KEYS
from llama_cpp.llama_speculative import (LlamaSpecEngine, SpecConfig, SpeculativeType, create_spec_engine,
                                         speculative_output_limits)


def test_type_names_round_trip_and_aliases() -> None:
    for member in SpeculativeType:
        if member in (SpeculativeType.COUNT,):
            continue
        assert SpeculativeType.from_str(member.to_str()) is member
        assert str(member) == member.to_str()
    assert SpeculativeType.DRAFT_MTP.to_str() == "draft-mtp"
    assert SpeculativeType.NGRAM_MAP_K4V.to_str() == "ngram-map-k4v"
    aliases = {"simple": "DRAFT_SIMPLE", "eagle3": "DRAFT_EAGLE3", "mtp": "DRAFT_MTP", "dflash": "DRAFT_DFLASH",
               "dspark": "DRAFT_DSPARK", "ngram-k": "NGRAM_MAP_K", "ngram-k4v": "NGRAM_MAP_K4V"}
    for alias, member in aliases.items():
        assert SpeculativeType.from_str(alias) is SpeculativeType[member]
    assert SpeculativeType.from_str("NGRAM_MAP_K") is SpeculativeType.NGRAM_MAP_K  # case and _ -> -
    with pytest.raises(ValueError, match="unknown speculative type 'ngram-frob'.*ngram-map-k"):
        SpeculativeType.from_str("ngram-frob")


def test_type_predicates() -> None:
    assert SpeculativeType.DRAFT_EAGLE3.is_draft() and SpeculativeType.DRAFT_EAGLE3.is_eagle3()
    assert SpeculativeType.NGRAM_CACHE.is_ngram() and not SpeculativeType.NGRAM_CACHE.is_draft()
    assert SpeculativeType.DRAFT_MTP.is_mtp() and SpeculativeType.DRAFT_DFLASH.is_dflash()
    assert SpeculativeType.DRAFT_DSPARK.is_dspark() and SpeculativeType.NONE.is_none()
    assert [int(t) for t in SpeculativeType] == list(range(12))


def test_defaults_are_the_seeds() -> None:
    c = SpecConfig()
    assert c.spec_type is SpeculativeType.NONE and not c.enabled()
    assert (c.draft_n_max, c.draft_n_min, c.draft_p_split, c.draft_p_min) == (3, 0, 0.1, 0.0)
    assert (c.ngram_size_n, c.ngram_size_m, c.ngram_min_hits) == (12, 48, 1)
    assert (c.ngram_mod_n_match, c.ngram_mod_n_max, c.ngram_mod_n_min) == (24, 64, 48)
    assert c.draft_n_gpu_layers == "auto" and c.resolved_draft_n_gpu_layers() == -1
    assert SpecConfig(draft_n_gpu_layers="all").resolved_draft_n_gpu_layers() == -2
    assert c.draft_backend_sampling is True and c.draft_devices == [] and c.draft_model_kwargs == {}


def test_max_draft_tokens_per_type() -> None:
    assert SpecConfig(spec_type="draft-mtp", draft_n_max=5).max_draft_tokens() == 5
    for name in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
        assert SpecConfig(spec_type=name, ngram_size_m=20).max_draft_tokens() == 20
    assert SpecConfig(spec_type="ngram-mod").max_draft_tokens() == 64
    assert SpecConfig(spec_type="ngram-cache").max_draft_tokens() == 8


@pytest.mark.parametrize(("fields", "message"), [
    ({"draft_n_max": 0}, "draft_n_max"),
    ({"draft_n_min": 4}, "draft_n_min"),
    ({"draft_p_min": 1.5}, "draft_p_min"),
    ({"draft_p_split": -0.1}, "draft_p_split"),
    ({"draft_n_gpu_layers": "some"}, "draft_n_gpu_layers"),
    ({"draft_n_threads": 0}, "draft_n_threads"),
    ({"draft_n_cpu_moe": -1}, "draft_n_cpu_moe"),
    ({"ngram_size_n": 0}, "ngram_size_n"),
    ({"ngram_size_m": 2000}, "ngram_size_m"),
    ({"ngram_min_hits": 0}, "ngram_min_hits"),
    ({"ngram_max_entries_per_key": 7}, "ngram_max_entries_per_key"),
    ({"ngram_mod_n_min": 100}, "ngram_mod_n_min"),
    ({"ngram_mod_n_match": 0}, "ngram_mod_n_match"),
    ({"draft_model_kwargs": {"frobnicate": 1}}, "draft_model_kwargs.*frobnicate"),
    ({"draft_devices": ["CUDA0"]}, "draft_devices"),
    ({"lookup_cache_static": "/nonexistent/cache.bin"}, "lookup_cache_static"),
    ({"spec_type": "draft-simple"}, "draft_model_path is required"),
    ({"spec_type": "draft-eagle3"}, "draft_model_path is required"),
    ({"spec_type": "draft-dflash"}, "draft_model_path is required"),
    ({"spec_type": "draft-dspark"}, "draft_model_path is required"),
    ({"spec_type": "draft-simple", "draft_model_path": "/nonexistent.gguf"}, "draft_model_path.*not a file"),
    ({"spec_type": "ngram-map-k", "draft_model_path": __file__}, "draft_model_path is only used by draft"),
    ({"draft_n_max": True}, "draft_n_max must be an integer"),
])
def test_validation_names_the_field(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpecConfig(**{"spec_type": "ngram-map-k", **fields}).validate()


def test_mtp_needs_no_draft_path_and_asks_for_the_targets_layers() -> None:
    config = SpecConfig(spec_type="mtp").validate()
    assert config.needs_target_mtp()
    assert not SpecConfig(spec_type="ngram-mod").validate().needs_target_mtp()


def test_unknown_fields_and_types_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown speculative option\(s\) 'ngram_sise_n'.*ngram_size_n"):
        SpecConfig.from_dict({"spec_type": "ngram-map-k", "ngram_sise_n": 3})
    with pytest.raises(ValueError, match="unknown speculative type"):
        SpecConfig(spec_type="turbo")
    with pytest.raises(ValueError, match="not a speculative type"):
        SpecConfig(spec_type=42)
    with pytest.raises(ValueError, match="COUNT"):
        SpecConfig(spec_type=SpeculativeType.COUNT).validate()
    with pytest.raises(ValueError, match="NONE"):
        create_spec_engine(SpecConfig())


def test_output_limits() -> None:
    assert speculative_output_limits(2048, 1, 3) == (4, 4)
    assert speculative_output_limits(2048, 4, 48) == (196, 49)
    assert speculative_output_limits(16, 4, 48) == (16, 16)  # never more than the batch
    assert speculative_output_limits(512, 2, 0) == (2, 1)


def test_engine_contract_defaults() -> None:
    class Minimal(LlamaSpecEngine):
        def draft(self, input_ids, /, *, n_past, id_last, n_max, seq_id=0):
            return input_ids[:0]

    engine = Minimal()
    engine.begin([1, 2, 3], 0)
    engine.accept(0, 0)
    engine.rollback(2, 0)
    engine.truncate(1, 0)
    engine.clear()
    engine.close()
    assert engine.max_draft_tokens() == 16 and not engine.needs_target_mtp()
    # the seed's checkpoint API: the generation engine rolls the target back, nothing to checkpoint
    assert engine.supports_native_target_rollback
    cp = engine.take_verification_checkpoint(0)
    assert cp is None and engine.checkpoint(0) is None
    engine.restore(cp, 0)
    engine.rollback_verified(cp, 2, 0)
    engine.reset_checkpoint_stats()
    assert set(engine.checkpoint_stats()) == {k for k in STATS_KEYS if k.startswith("checkpoint_")} - {
        "checkpoint_rollbacks"}
    with pytest.raises(ValueError, match="nothing to restore"):
        engine.restore(b"state", 0)
    with pytest.raises(TypeError):
        LlamaSpecEngine()  # type: ignore[abstract]
