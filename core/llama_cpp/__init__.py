"""Python bindings for llama.cpp.

``import llama_cpp`` gives, as llama-cpp-python always has, the C API under
its C names (:mod:`llama_cpp.llama_cpp`).
"""

from . import llama as _llama
from .llama_cpp import *  # noqa: F401,F403  (the seed's top-level C API)
from .llama import *  # noqa: F401,F403  (the seed's top-level names: llama_cpp.llama's __all__)
from .plugins import hookimpl as hookimpl  # noqa: F401  (re-exported: plugins write llama_cpp.hookimpl)
from .sampling import SamplingParams  # noqa: F401

__version__ = "0.3.48"


def __getattr__(name: str) -> object:
    """The seed names llama_cpp.llama resolves when first used (llama_cpp.llama.SEED_REEXPORTS)."""
    if name not in _llama.SEED_REEXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_llama, name)

