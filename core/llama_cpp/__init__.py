"""Python bindings for llama.cpp.

``import llama_cpp`` gives, as llama-cpp-python always has, the C API under
its C names (:mod:`llama_cpp.llama_cpp`).
"""

from .llama_cpp import *  # noqa: F401,F403  (the seed's top-level C API)
# the seed's top-level names (re-exported on purpose)
from .llama import Llama, LlamaState, LlamaTokenizer  # noqa: F401
from .llama_grammar import LlamaGrammar  # noqa: F401
from .plugins import hookimpl  # noqa: F401
from .processors import LogitsProcessorList, MinTokensLogitsProcessor, StoppingCriteriaList  # noqa: F401
from .sampling import SamplingParams  # noqa: F401
from .llama_types import *  # noqa: F401,F403  (the seed re-exports its TypedDicts)

__version__ = "0.4.0.dev0"

