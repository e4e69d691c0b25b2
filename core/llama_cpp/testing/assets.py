"""Test assets that come from the package index: llama.cpp's vocab files and SmolLM2."""

from __future__ import annotations

from pathlib import Path

from ..default_model import smollm2_path

__all__ = ["llama_cpp_source_dir", "smollm2_path", "vocab_file", "vocab_test_vectors"]


def llama_cpp_source_dir() -> Path:
    """The llama.cpp tree the native layer was built from (fetched again if the cache was cleaned)."""
    from llama_cpp_native import BUILD_INFO
    from llama_cpp_native._source import pinned_source

    recorded = Path(BUILD_INFO["source_dir"])
    if (recorded / "include" / "llama.h").exists():
        return recorded
    if BUILD_INFO["pinned_source"]:
        return pinned_source().path
    raise FileNotFoundError(f"the llama.cpp source this package was built from ({recorded}) is gone")


def vocab_file(name: str) -> Path:
    """``models/ggml-vocab-<name>.gguf`` of the pinned source."""
    path = llama_cpp_source_dir() / "models" / f"ggml-vocab-{name}.gguf"
    if not path.exists():
        known = sorted(p.name[len("ggml-vocab-"):-len(".gguf")] for p in path.parent.glob("ggml-vocab-*.gguf"))
        raise FileNotFoundError(f"no vocab {name!r} in {path.parent}; known: {', '.join(known)}")
    return path


def vocab_test_vectors() -> list[Path]:
    """Every vocab GGUF that has llama.cpp's ``.inp``/``.out`` tokenizer test vectors."""
    models = llama_cpp_source_dir() / "models"
    return sorted(
        p for p in models.glob("ggml-vocab-*.gguf")
        if p.with_name(p.name + ".inp").exists() and p.with_name(p.name + ".out").exists()
    )
