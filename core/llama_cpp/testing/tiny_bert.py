"""Tiny random BERT models written with the ``gguf`` package: embedding models and rerankers.

A reranker is a BERT whose pooled [CLS] row goes through a classification
head (``cls`` dense + tanh, then ``cls.output``) under rank pooling, as
llama.cpp runs a converted ``BertForSequenceClassification``; ``n_cls_out``
is its number of outputs (1: a relevance score; 2: labelled ``yes``/``no``,
as llama.cpp's converted two-way rerankers are read through their first
output).  The vocabulary is BERT's real WordPiece one (llama.cpp's
``ggml-vocab-bert-bge.gguf``), so tokenization, [CLS]/[SEP] and the rerank
prompt layout behave as in a real model; the weights are seeded noise.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..default_model import cache_dir
from .assets import vocab_file
from .tiny_models import _copy_tokenizer, _finish

POOLING_TYPES = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
TWO_WAY_LABELS = ("yes", "no")


@dataclass(frozen=True)
class TinyBertSpec:
    """Shape of a tiny BERT; every field changes the file."""

    pooling: str = "rank"  # the model's pooling type: none, mean, cls, last or rank
    n_cls_out: int = 1  # outputs of the classification head (rank pooling only)
    n_embd: int = 32
    n_layer: int = 2
    n_head: int = 2
    n_ff: int = 64
    n_ctx_train: int = 512
    seed: int = 4321
    rerank_template: str | None = None  # a ``rerank`` chat template, with {query} and {document}

    def file_name(self) -> str:
        key = hashlib.sha256(repr(self).encode()).hexdigest()[:12]
        return f"tiny-bert-{self.pooling}-{self.n_cls_out}-{self.n_embd}x{self.n_layer}-{key}.gguf"


def write_tiny_bert(path: Path, spec: TinyBertSpec = TinyBertSpec()) -> Path:
    """Write a random BERT GGUF (F32 weights) to ``path``: with a classification head under rank pooling."""
    import gguf

    if spec.pooling not in POOLING_TYPES:
        raise ValueError(f"pooling must be one of {sorted(POOLING_TYPES)}, got {spec.pooling!r}")
    if spec.pooling == "rank" and spec.n_cls_out < 1:
        raise ValueError(f"a reranker needs at least one classifier output, got n_cls_out={spec.n_cls_out}")
    if spec.n_embd % spec.n_head:
        raise ValueError("n_embd must divide by n_head")
    rng = np.random.default_rng(spec.seed)
    n = spec.n_embd

    def weight(rows: int, cols: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def vector(size: int, center: float = 0.0, scale: float = 0.1) -> np.ndarray:
        return (center + scale * rng.standard_normal(size)).astype(np.float32)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    writer = gguf.GGUFWriter(str(tmp), arch="bert")
    writer.add_name("tiny-bert")
    writer.add_block_count(spec.n_layer)
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(n)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_layer_norm_eps(1e-12)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType(POOLING_TYPES[spec.pooling]))
    rank = spec.pooling == "rank"
    if rank and spec.n_cls_out == 2:
        writer.add_classifier_output_labels(list(TWO_WAY_LABELS))
    elif rank and spec.n_cls_out > 2:
        writer.add_classifier_output_labels([f"label{i}" for i in range(spec.n_cls_out)])
    n_vocab = _copy_tokenizer(writer, vocab_file("bert-bge"))
    if spec.rerank_template is not None:
        writer.add_chat_template([{"name": "rerank", "template": spec.rerank_template}])

    writer.add_tensor("token_embd.weight", weight(n_vocab, n, 1.0))
    writer.add_tensor("token_types.weight", weight(2, n, 0.1))
    writer.add_tensor("position_embd.weight", weight(spec.n_ctx_train, n, 0.3))
    writer.add_tensor("token_embd_norm.weight", vector(n, 1.0))
    writer.add_tensor("token_embd_norm.bias", vector(n))
    for i in range(spec.n_layer):
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(n, n))
            writer.add_tensor(f"blk.{i}.{name}.bias", vector(n))
        writer.add_tensor(f"blk.{i}.attn_output_norm.weight", vector(n, 1.0))
        writer.add_tensor(f"blk.{i}.attn_output_norm.bias", vector(n))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(spec.n_ff, n))
        writer.add_tensor(f"blk.{i}.ffn_up.bias", vector(spec.n_ff))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(n, spec.n_ff))
        writer.add_tensor(f"blk.{i}.ffn_down.bias", vector(n))
        writer.add_tensor(f"blk.{i}.layer_output_norm.weight", vector(n, 1.0))
        writer.add_tensor(f"blk.{i}.layer_output_norm.bias", vector(n))
    if rank:
        writer.add_tensor("cls.weight", weight(n, n, 0.5))
        writer.add_tensor("cls.bias", vector(n))
        writer.add_tensor("cls.output.weight", weight(spec.n_cls_out, n, 1.0))
        writer.add_tensor("cls.output.bias", vector(spec.n_cls_out))
    return _finish(writer, tmp, path)


def tiny_bert_path(spec: TinyBertSpec = TinyBertSpec()) -> Path:
    """The tiny BERT of ``spec`` in the cache (``LLAMA_CPP_CACHE``), written on first use."""
    path = cache_dir() / "tiny-models" / spec.file_name()
    return path if path.exists() else write_tiny_bert(path, spec)
