"""The ``Llama`` class: a facade over the model, context and sampler handles.

:class:`~llama_cpp._llama_base.LlamaBase` holds the model, its context and engine; the completion, chat and
embedding methods are subclasses of it, each in its own module, and ``Llama`` joins them.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import llama_types as _llama_types
from ._chat import ChatAPI
from ._completion import CompletionAPI
from ._embedding import EmbeddingAPI
from ._llama_base import LlamaDecodeAbort, LlamaState
# the seed's llama.py imports these, so `from llama_cpp.llama import X` and `llama_cpp.X` find them
from ._logger import (add_log_filters, clear_log_filters, configure_logging, get_log_filters,  # noqa: F401
                      get_verbosity, reset_log_filters, set_log_filters, set_verbosity)
from ._utils import suppress_stdout_stderr  # noqa: F401
from .llama_grammar import LlamaGrammar  # noqa: F401
from .llama_tokenizer import BaseLlamaTokenizer, LlamaTokenizer  # noqa: F401
from .llama_types import *  # noqa: F401,F403
from .processors import (AbortCriteria, LogitsProcessor, LogitsProcessorList,  # noqa: F401
                         MinTokensLogitsProcessor, StoppingCriteria, StoppingCriteriaList)
from .sampling_context import (CommonSamplerType, CustomSampler, LlamaSamplingContext,  # noqa: F401
                               LlamaSamplingParams)

__all__ = [
    "Llama", "LlamaState", "LlamaDecodeAbort",
    "LogitsProcessor", "LogitsProcessorList", "StoppingCriteria", "StoppingCriteriaList",
    "MinTokensLogitsProcessor", "AbortCriteria", "LlamaGrammar", "BaseLlamaTokenizer", "LlamaTokenizer",
    "LlamaSamplingContext", "LlamaSamplingParams", "CommonSamplerType", "CustomSampler",
    "configure_logging", "get_verbosity", "set_verbosity", "get_log_filters", "set_log_filters",
    "add_log_filters", "clear_log_filters", "reset_log_filters", "suppress_stdout_stderr",
    *_llama_types.__all__,
]

#: Seed names the seed's llama.py imports from modules whose implementations come from plugins (the
#: cache strategies) or that need more than the core at import: resolved when first used, so importing
#: llama_cpp starts no plugin host.  Not in __all__ for that reason; ``llama_cpp`` forwards them.
SEED_REEXPORTS = {
    **dict.fromkeys(("BaseLlamaCache", "LlamaCache", "LlamaDiskCache", "LlamaRAMCache", "LlamaTrieCache",
                     "HybridCheckpointCache"), "llama_cache"),
    **dict.fromkeys(("LlamaDraftModel", "LlamaSpecEngine", "SpecConfig", "SpeculativeType", "create_spec_engine",
                     "create_native_spec_engine", "speculative_output_limits"), "llama_speculative"),
}


def __getattr__(name: str) -> Any:
    module = SEED_REEXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"llama_cpp.{module}"), name)


class Llama(ChatAPI, CompletionAPI, EmbeddingAPI):
    """A llama.cpp model and context, with llama-cpp-python's high-level API.

    ``close()`` (or leaving a ``with`` block) frees everything the instance
    created; any call afterwards raises ``RuntimeError``.
    """
