"""``LlamaEmbedding``: a Llama made for embeddings and reranking (llama-cpp-python's class).

It loads the model with ``embeddings=True`` and a unified KV cache, packs up
to ``n_seq_max`` inputs per decode (default 256 as llama-embedding, or the
largest number up to that which divides the micro-batch),
normalizes to unit length by default, and adds ``rank`` for rerankers and
the output formats of llama-embedding's ``--embd-output-format``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from llama_cpp_native import lib

from ._embedding import EmbeddingInput, check_encoding_format, encode_embedding
from ._rerank import rerank_template, rerank_tokens
from .embd_normalize import (NORM_MODE_EUCLIDEAN, NORM_MODE_MAX_INT16, NORM_MODE_NONE, NORM_MODE_PNORM,
                             NORM_MODE_TAXICAB, cosine_similarity)
from .llama import Llama

LLAMA_POOLING_TYPE_UNSPECIFIED = lib.LLAMA_POOLING_TYPE_UNSPECIFIED
LLAMA_POOLING_TYPE_NONE = lib.LLAMA_POOLING_TYPE_NONE
LLAMA_POOLING_TYPE_MEAN = lib.LLAMA_POOLING_TYPE_MEAN
LLAMA_POOLING_TYPE_CLS = lib.LLAMA_POOLING_TYPE_CLS
LLAMA_POOLING_TYPE_LAST = lib.LLAMA_POOLING_TYPE_LAST
LLAMA_POOLING_TYPE_RANK = lib.LLAMA_POOLING_TYPE_RANK

OUTPUT_FORMATS = ("json", "json+", "array")

__all__ = [
    "LLAMA_POOLING_TYPE_CLS", "LLAMA_POOLING_TYPE_LAST", "LLAMA_POOLING_TYPE_MEAN", "LLAMA_POOLING_TYPE_NONE",
    "LLAMA_POOLING_TYPE_RANK", "LLAMA_POOLING_TYPE_UNSPECIFIED", "LlamaEmbedding", "NORM_MODE_EUCLIDEAN",
    "NORM_MODE_MAX_INT16", "NORM_MODE_NONE", "NORM_MODE_PNORM", "NORM_MODE_TAXICAB",
]


def default_n_seq_max(n_ctx: int, n_batch: int, n_ubatch: int) -> int:
    """Sequences per decode: as many as llama-embedding packs (256), or the largest count that divides the
    micro-batch (llama.cpp's mean pooling needs that; see ``check_embedding_context``)."""
    ubatch = min(n_batch if n_ctx == 0 else min(n_ctx, n_batch), n_ubatch)
    if not isinstance(ubatch, int) or ubatch < 1:
        return 1  # the constructor's own validation names the bad value
    return max(d for d in range(1, lib.llama_max_parallel_sequences() + 1) if ubatch % d == 0)


class LlamaEmbedding(Llama):
    """A model loaded for embeddings (and reranking, with a model that has a classification head).

    ``n_ctx=0`` takes the model's training context; ``pooling_type`` overrides
    the model's pooling (``LLAMA_POOLING_TYPE_*``).  Every other keyword is
    :class:`~llama_cpp.Llama`'s; ``embeddings`` and ``kv_unified`` are always on.
    """

    def __init__(self, model_path: str | Path, n_ctx: int = 0, n_batch: int = 512, n_ubatch: int = 512,
                 pooling_type: int = LLAMA_POOLING_TYPE_UNSPECIFIED, n_gpu_layers: int | str = 0,
                 verbose: bool = True, **kwargs: Any) -> None:
        kwargs.pop("embedding", None)
        kwargs["embeddings"] = True
        kwargs["kv_unified"] = True  # every sequence may use the whole context
        if "n_seq_max" not in kwargs:
            kwargs["n_seq_max"] = default_n_seq_max(n_ctx, n_batch, n_ubatch)
        super().__init__(model_path, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, pooling_type=pooling_type,
                         n_gpu_layers=n_gpu_layers, verbose=verbose, **kwargs)

    def embed(self, input: EmbeddingInput, normalize: bool | int = NORM_MODE_EUCLIDEAN, truncate: bool = True,
              separator: str | None = None, return_count: bool = False) -> Any:
        """:meth:`Llama.embed`, normalized to unit length (euclidean) unless ``normalize`` says otherwise."""
        return super().embed(input, normalize=normalize, truncate=truncate, separator=separator,
                             return_count=return_count)

    def rank(self, query: str, documents: Sequence[str], truncate: bool = True) -> list[float]:
        """The relevance score of each document for ``query``, in the order given.

        Needs a reranker (rank pooling).  Each pair is laid out as llama.cpp
        does (the model's ``rerank`` template, else ``[CLS] query [SEP]
        document [SEP]``); the score is the classifier's first output, as
        llama-server reports it (raw, never normalized).
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__}")
        if isinstance(documents, (str, bytes)) or not isinstance(documents, Sequence):
            raise TypeError(f"documents must be a list of strings, got {type(documents).__name__}")
        if len(documents) == 0:
            raise ValueError("documents is an empty list: give at least one document to rank")
        for i, document in enumerate(documents):
            if not isinstance(document, str):
                raise TypeError(f"documents[{i}] is {type(document).__name__}; each document must be a string")
        embedder = self._embedder()
        if embedder.pooling != LLAMA_POOLING_TYPE_RANK:
            raise ValueError(f"rank() needs a reranker: this context pools with {embedder.pooling_name!r} "
                             f"(pooling_type {embedder.pooling}); load a model with a classification head, which "
                             "pools with 'rank' (LLAMA_POOLING_TYPE_RANK)")
        model = self._loaded_model
        template = rerank_template(model)
        pairs = [rerank_tokens(model, template, query, document) for document in documents]
        if truncate:
            pairs = [tokens[:embedder.limit] for tokens in pairs]
        return [float(values[0]) if values.size else 0.0 for values in embedder.run(pairs)]

    # the seed's signature: output_format is the fourth parameter, where Llama.create_embedding has truncate
    def create_embedding(  # type: ignore[override]
            self, input: EmbeddingInput, model: str | None = None, normalize: bool | int = NORM_MODE_EUCLIDEAN,
            output_format: str = "json", truncate: bool = True, encoding_format: str = "float") -> Any:
        """The embeddings in one of llama-embedding's ``--embd-output-format`` shapes.

        ``"json"``: OpenAI's response (``usage`` with ``completion_tokens: 0``);
        ``"json+"``: the same plus ``"cosineSimilarity"``, the matrix of the
        cosine similarity of every pair of vectors (with two vectors or more);
        ``"array"``: the list of vectors alone.  ``encoding_format`` is
        :meth:`Llama.create_embedding`'s, for the JSON shapes' ``data`` (an
        OpenAI server calls either class the same way).
        """
        if output_format not in OUTPUT_FORMATS:
            raise ValueError(f"output_format must be one of {', '.join(map(repr, OUTPUT_FORMATS))}, "
                             f"got {output_format!r}")
        check_encoding_format(encoding_format)
        results, _single, count = self._embed_outputs(input, normalize, truncate)
        if output_format == "array":
            return results
        response: dict[str, Any] = {
            "object": "list",
            "data": [{"object": "embedding", "embedding": encode_embedding(value, encoding_format), "index": i}
                     for i, value in enumerate(results)],
            "model": model if model is not None else self.model_path,
            "usage": {"prompt_tokens": count, "completion_tokens": 0, "total_tokens": count},
        }
        if output_format == "json+":
            vectors = _vectors(results)
            if len(vectors) >= 2:
                response["cosineSimilarity"] = [[cosine_similarity(a, b) for b in vectors] for a in vectors]
        return response


def _vectors(results: list[Any]) -> list[list[float]]:
    """Every embedding row of ``results`` (a token matrix contributes each row, as llama-embedding counts them)."""
    rows: list[list[float]] = []
    for value in results:
        if isinstance(value, float):
            rows.append([value])
        elif value and isinstance(value[0], list):
            rows.extend(value)
        else:
            rows.append(value)
    return rows
