"""pytest fixtures: the tiny random models, SmolLM2 and llama.cpp's vocab files.

Every fixture is lazy: nothing is generated or downloaded unless a test asks
for it.  Generated models are kept in the cache (``LLAMA_CPP_CACHE``), so a
second test run reuses them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import pytest

from ..default_model import cache_dir
from ..engine.context import Context
from .assets import gemma3_path, smollm2_path, vocab_file
from . import tiny_mtmd_models as mtmd_models
from . import tiny_spec_models as spec_models
from .tiny_models import TinyLlamaSpec, write_tiny_llama, write_tiny_lora
from .minilm import minilm_path
from .tiny_bert import TinyBertSpec, tiny_bert_path

TinyModelFactory = Callable[..., Path]


@pytest.fixture(scope="session")
def tiny_model_factory() -> TinyModelFactory:
    """Returns ``make(spec=None, **fields) -> Path`` writing (once) a tiny llama GGUF.

    ``fields`` override :class:`TinyLlamaSpec` fields, e.g. ``make(n_layer=4)``
    or ``make(chat_template="{{ messages }}")``.
    """

    def make(spec: TinyLlamaSpec | None = None, **fields: Any) -> Path:
        spec = dataclasses.replace(spec or TinyLlamaSpec(), **fields)
        path = cache_dir() / "tiny-models" / spec.file_name()
        return path if path.exists() else write_tiny_llama(path, spec)

    return make


@pytest.fixture(scope="session")
def tiny_model_path(tiny_model_factory: TinyModelFactory) -> Path:
    """The default tiny llama model (llama SPM vocabulary, 2 layers, n_embd 64)."""
    return tiny_model_factory()


@pytest.fixture(scope="session")
def tiny_lora_path(tiny_model_path: Path) -> Path:
    """A random LoRA adapter (rank 4, on attn_q and attn_v) for ``tiny_model_path``."""
    path = cache_dir() / "tiny-models" / ("lora-" + TinyLlamaSpec().file_name())
    return path if path.exists() else write_tiny_lora(path)


@pytest.fixture(scope="session")
def smollm2_model_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1, fetched from the package index once and verified."""
    return smollm2_path(quiet=True)


@pytest.fixture
def restored_states(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every sequence state handed to llama.cpp during the test (``Context.set_seq_state``), in order: a cache
    or state-file test asserts with it that a refused entry never reached llama.cpp."""
    seen: list[bytes] = []
    original = Context.set_seq_state

    def spy(self: Context, seq_id: int, data: bytes, flags: int = 0) -> bool:
        seen.append(data)
        return original(self, seq_id, data, flags)

    monkeypatch.setattr(Context, "set_seq_state", spy)
    return seen


@pytest.fixture(scope="session")
def gemma3_model_path() -> Path:
    """Gemma 3 270M Q4_K_M (sliding-window attention), assembled from the package index once and verified."""
    return gemma3_path(quiet=True)


@pytest.fixture(scope="session")
def llama_vocab_file() -> Callable[[str], Path]:
    """Returns ``vocab(name) -> Path`` of ``models/ggml-vocab-<name>.gguf``."""
    return vocab_file


@pytest.fixture(scope="session")
def tiny_spec_model() -> Callable[[str], Path]:
    """Returns ``model(name) -> Path`` of a tiny speculative-decoding model (written once):
    ``target`` (4-layer llama), its drafts ``eagle3``, ``dflash``, ``dspark``, ``dflash2``, the MTP
    targets ``glm4moe`` (and ``glm4moe-trunk`` + ``glm4moe-nextn``, its NextN block as its own file)
    and the hybrid ``qwen35``."""
    return spec_models.spec_model_path


@pytest.fixture(scope="session")
def minilm_model_path() -> Path:
    """all-MiniLM-L6-v2 (a real BERT, mean pooling) as an F32 GGUF, converted from the package index once."""
    return minilm_path(quiet=True)


@pytest.fixture(scope="session")
def tiny_bert_factory() -> Callable[..., Path]:
    """Returns ``make(**fields) -> Path`` of a tiny random BERT (written once): :class:`TinyBertSpec` fields,
    e.g. ``make(n_cls_out=2)`` (a two-output reranker) or ``make(pooling="mean")`` (an embedding model)."""

    def make(**fields: Any) -> Path:
        return tiny_bert_path(TinyBertSpec(**fields))

    return make


@pytest.fixture(scope="session")
def tiny_reranker_path(tiny_bert_factory: Callable[..., Path]) -> Path:
    """A tiny random BERT reranker: rank pooling, a one-output classification head."""
    return tiny_bert_factory()


@pytest.fixture(scope="session")
def tiny_mtmd_model() -> Callable[[str], tuple[Path, Path]]:
    """Returns ``model(name) -> (text_model, mmproj)`` of a tiny random multimodal pair (written once):
    ``gemma3``, ``mlp`` (LLaVA-1.5), ``idefics3`` (SmolVLM), ``qwen2vl_merger`` (with an M-RoPE text model)
    ``qwen2a`` and ``ultravox-stack4`` (audio), and ``ultravox``, whose encoding aborts the pinned
    llama.cpp; see :mod:`llama_cpp.testing.tiny_mtmd_models`."""
    return mtmd_models.mtmd_model_paths


@pytest.fixture(scope="session")
def tiny_png(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Returns ``make(width, height, seed=0) -> Path`` of an RGB PNG (seeded noise over a gradient)."""
    folder = tmp_path_factory.mktemp("tiny-png")

    def make(width: int, height: int, seed: int = 0) -> Path:
        path = folder / f"{width}x{height}-{seed}.png"
        return path if path.exists() else mtmd_models.write_png(path, width, height, seed=seed)

    return make


@pytest.fixture(scope="session")
def tiny_wav(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Returns ``make(seconds, sample_rate=16000) -> Path`` of a mono 16-bit WAV (a 440 Hz tone)."""
    folder = tmp_path_factory.mktemp("tiny-wav")

    def make(seconds: float, sample_rate: int = 16000) -> Path:
        path = folder / f"{seconds}s-{sample_rate}.wav"
        return path if path.exists() else mtmd_models.write_wav(path, seconds, sample_rate=sample_rate)

    return make
