"""Test helpers for llama_cpp and for plugin authors.

Installed as a pytest plugin (entry point ``pytest11``: ``llama_cpp``), it
gives the fixtures of :mod:`llama_cpp.testing.plugin`; the functions below can
also be used directly.
"""

from .registration import registered_plugin
from .assets import llama_cpp_source_dir, smollm2_path, vocab_file, vocab_test_vectors
from .tiny_models import TinyLlamaSpec, write_control_vector, write_tiny_llama, write_tiny_lora

__all__ = [
    "TinyLlamaSpec",
    "llama_cpp_source_dir",
    "registered_plugin",
    "smollm2_path",
    "vocab_file",
    "vocab_test_vectors",
    "write_control_vector",
    "write_tiny_llama",
    "write_tiny_lora",
]
