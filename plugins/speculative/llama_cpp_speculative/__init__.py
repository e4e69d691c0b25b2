"""Speculative decoding engines for llama_cpp, as a plugin.

Registers one engine per llama.cpp speculative type, under llama.cpp's names
(``draft-simple``, ``draft-eagle3``, ``draft-mtp``, ``draft-dflash``,
``draft-dspark``, ``ngram-simple``, ``ngram-map-k``, ``ngram-map-k4v``,
``ngram-mod``, ``ngram-cache``), all drafting in llama.cpp itself, and
``prompt-lookup`` in pure Python.  Also exports the seed's classes for
``llama_cpp.llama_speculative``.
"""

from __future__ import annotations

from llama_cpp import hookimpl
from llama_cpp.llama_speculative import SpeculativeType
from llama_cpp.plugins import SpeculativeEngine

from .lookup_cache import check_lookup_cache
from .native import NativeSpeculativeEngine, native_factory
from .prompt_lookup import LlamaPromptLookupDecoding
from .seed_classes import LlamaMTPDecoding, LlamaNGramMapDecoding

__all__ = ["LlamaMTPDecoding", "LlamaNGramMapDecoding", "LlamaPromptLookupDecoding", "NativeSpeculativeEngine",
           "check_lookup_cache"]

__llama_speculative_exports__ = frozenset({
    "LlamaMTPDecoding", "LlamaNGramMapDecoding", "LlamaPromptLookupDecoding", "NativeSpeculativeEngine",
})

_DESCRIPTIONS = {
    SpeculativeType.DRAFT_SIMPLE: "a smaller model of the same vocabulary drafts (draft_model_path)",
    SpeculativeType.DRAFT_EAGLE3: "an EAGLE3 head reads three of the target's layers (draft_model_path)",
    SpeculativeType.DRAFT_MTP: "the target's own multi-token-prediction layers, or an MTP GGUF",
    SpeculativeType.DRAFT_DFLASH: "a DFlash block drafter over the target's hidden states (draft_model_path)",
    SpeculativeType.DRAFT_DSPARK: "DFlash with a Markov head (draft_model_path)",
    SpeculativeType.NGRAM_SIMPLE: "copies what followed the last n-gram earlier in the sequence",
    SpeculativeType.NGRAM_MAP_K: "an n-gram map of the sequence, latest continuation",
    SpeculativeType.NGRAM_MAP_K4V: "an n-gram map keeping 4 continuations, the dominant one",
    SpeculativeType.NGRAM_MOD: "a hashed n-gram pool shared by the sequences",
    SpeculativeType.NGRAM_CACHE: "llama-lookup's 3-level n-gram cache (lookup_cache_static/dynamic files)",
}


@hookimpl
def llama_cpp_speculative_engines() -> list[SpeculativeEngine]:
    engines = [SpeculativeEngine(name=t.to_str(), factory=native_factory(t), description=text)
               for t, text in _DESCRIPTIONS.items()]
    engines.append(SpeculativeEngine(name="prompt-lookup", factory=LlamaPromptLookupDecoding,
                                     description="prompt lookup decoding in pure Python (max_ngram_size, "
                                                 "num_pred_tokens)"))
    return engines
