"""Test helpers for llama_cpp and for plugin authors.

Installed as a pytest plugin (entry point ``pytest11``: ``llama_cpp``), it
gives the fixtures of :mod:`llama_cpp.testing.plugin`; the functions below can
also be used directly.
"""

from .registration import registered_plugin
from .assets import gemma3_path, llama_cpp_source_dir, smollm2_path, vocab_file, vocab_test_vectors
from .tiny_models import TinyLlamaSpec, write_control_vector, write_tiny_llama, write_tiny_lora
from .minilm import convert_bert, minilm_path, read_safetensors
from .tiny_bert import TinyBertSpec, tiny_bert_path, write_tiny_bert
from .tiny_mtmd_models import TinyTextSpec, mtmd_model_paths, write_png, write_tiny_text_model, write_wav

__all__ = [
    "TinyBertSpec",
    "TinyLlamaSpec",
    "TinyTextSpec",
    "convert_bert",
    "gemma3_path",
    "llama_cpp_source_dir",
    "minilm_path",
    "mtmd_model_paths",
    "read_safetensors",
    "registered_plugin",
    "smollm2_path",
    "tiny_bert_path",
    "vocab_file",
    "vocab_test_vectors",
    "write_control_vector",
    "write_png",
    "write_tiny_bert",
    "write_tiny_llama",
    "write_tiny_lora",
    "write_tiny_text_model",
    "write_wav",
]
