"""Python bindings for llama.cpp.

``import llama_cpp`` gives, as llama-cpp-python always has, the C API under
its C names (:mod:`llama_cpp.llama_cpp`).
"""

from .llama_cpp import *  # noqa: F401,F403  (the seed's top-level C API)
from .llama import Llama, LlamaState, LlamaTokenizer
from .llama_grammar import LlamaGrammar
from .processors import LogitsProcessorList, MinTokensLogitsProcessor, StoppingCriteriaList
from .plugins import hookimpl
from .sampling import SamplingParams

__version__ = "0.4.0.dev0"

