"""The seed's engine classes, on llama.cpp's drafters.

``LlamaNGramMapDecoding`` and ``LlamaMTPDecoding`` keep the seed's
constructors; both are :class:`NativeSpeculativeEngine` with a fixed type.
"""

from __future__ import annotations

from typing import Any

from llama_cpp.llama_speculative import SpecConfig, SpeculativeType

from .native import NativeSpeculativeEngine

_MAP_TYPES = (SpeculativeType.NGRAM_MAP_K, SpeculativeType.NGRAM_MAP_K4V)


class LlamaNGramMapDecoding(NativeSpeculativeEngine):
    """llama.cpp's n-gram map drafters (``ngram-map-k``, ``ngram-map-k4v``).

    The defaults are SpecConfig's (llama.cpp's): the reference's engine had
    its own (3 / 10 / 2), which made the same type draft differently by how
    it was created.  ``sync_check_tokens`` is accepted for compatibility: the
    map follows the target's memory exactly, so there is nothing to re-check.
    """

    def __init__(self, ngram_size: int = 12, num_pred_tokens: int = 48,
                 spec_type: SpeculativeType | str | int = SpeculativeType.NGRAM_MAP_K, min_hits: int = 1,
                 max_entries_per_key: int | None = None, sync_check_tokens: int = 16) -> None:
        config = SpecConfig(spec_type=spec_type, ngram_size_n=ngram_size, ngram_size_m=num_pred_tokens,
                            ngram_min_hits=min_hits, ngram_max_entries_per_key=max_entries_per_key)
        if config.spec_type not in _MAP_TYPES:
            raise ValueError(f"LlamaNGramMapDecoding: spec_type must be ngram-map-k or ngram-map-k4v, got "
                             f"{config.speculative_type.to_str()!r}")
        if isinstance(sync_check_tokens, bool) or not isinstance(sync_check_tokens, int) or sync_check_tokens < 0:
            raise ValueError(f"LlamaNGramMapDecoding: sync_check_tokens must be an integer >= 0, "
                             f"got {sync_check_tokens!r}")
        self.sync_check_tokens = sync_check_tokens
        super().__init__(config)


class LlamaMTPDecoding(NativeSpeculativeEngine):
    """Multi-token prediction: the target's own NextN layers (or an external MTP GGUF) draft.

    ``LlamaMTPDecoding()`` drafts with the target's layers (the Llama loads
    them with ``load_mtp``); ``draft_model_path=`` names an external MTP GGUF.
    Other keywords are SpecConfig fields (``draft_n_max``, ``draft_p_min``...).
    """

    def __init__(self, config: SpecConfig | None = None, **options: Any) -> None:
        if config is None:
            config = SpecConfig.from_dict({**options, "spec_type": SpeculativeType.DRAFT_MTP})
        elif options:
            raise ValueError(f"pass either a SpecConfig or options, not both (got {sorted(options)})")
        if not config.speculative_type.is_mtp():
            raise ValueError(f"LlamaMTPDecoding needs spec_type draft-mtp, got "
                             f"{config.speculative_type.to_str()!r}")
        super().__init__(config)
