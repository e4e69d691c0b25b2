"""Python bindings for llama.cpp.

``import llama_cpp`` gives, as llama-cpp-python always has, the C API under
its C names (:mod:`llama_cpp.llama_cpp`).
"""

import importlib as _importlib

from .llama_cpp import *  # noqa: F401,F403  (the seed's top-level C API)
# the seed's top-level names (re-exported on purpose)
from .llama import Llama, LlamaState  # noqa: F401
from .llama_tokenizer import BaseLlamaTokenizer, LlamaTokenizer  # noqa: F401
from .llama_grammar import LlamaGrammar  # noqa: F401
from .plugins import hookimpl  # noqa: F401
from .processors import AbortCriteria, LogitsProcessorList, MinTokensLogitsProcessor, StoppingCriteriaList  # noqa: F401
from .sampling import SamplingParams  # noqa: F401
from .llama_types import *  # noqa: F401,F403  (the seed re-exports its TypedDicts)

__version__ = "0.3.48"

# seed names the reference re-exported from its llama.py, resolved when first used: the cache
# strategies live in plugins, found through the plugin host, which ``import llama_cpp`` does not start
_SEED_REEXPORTS = {
    **dict.fromkeys(("BaseLlamaCache", "LlamaCache", "LlamaDiskCache", "LlamaRAMCache", "LlamaTrieCache",
                     "HybridCheckpointCache"), "llama_cache"),
    **dict.fromkeys(("LlamaDraftModel", "LlamaSpecEngine", "SpecConfig", "SpeculativeType", "create_spec_engine",
                     "create_native_spec_engine", "speculative_output_limits"), "llama_speculative"),
}


def __getattr__(name: str) -> object:
    module = _SEED_REEXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(f"{__name__}.{module}"), name)

