"""``embed`` / ``create_embedding``: inputs in, vectors (or OpenAI embedding objects) out.

Kept apart from the Llama facade because it is about shaping inputs and
outputs (strings, token lists, separators, truncation, normalization, the
OpenAI response); the decoding itself is :class:`~llama_cpp.engine.embedder.Embedder`'s.
"""

from __future__ import annotations

import base64
import numbers
from typing import Any, Callable, Sequence, Union

import numpy as np
from llama_cpp_native import lib

from ._llama_base import LlamaBase
from .embd_normalize import NORM_MODE_NONE, norm_mode, normalize_rows
from .engine.embedder import Embedder
from .llama_types import CreateEmbeddingResponse, Embedding

EmbeddingInput = Union[str, Sequence[str], Sequence[int], Sequence[Sequence[int]]]
# what one input embeds to: a vector, a token matrix (no pooling), or a score (a one-output rank head)
Embedded = Union[list[float], list[list[float]], float]

ENCODING_FORMATS = ("float", "base64")


def split_inputs(input: Any, separator: str | None) -> tuple[list[str | list[int]], bool]:
    """The inputs of an embedding call and whether it was a single one (a string or one token list).

    A string with ``separator`` is split into several inputs.  TypeError or
    ValueError name what was wrong and what is allowed.
    """
    if separator is not None and not isinstance(separator, str):
        raise TypeError(f"separator must be a string or None, got {type(separator).__name__}")
    if separator == "":
        raise ValueError("separator must not be empty")
    if isinstance(input, str):
        if separator is not None:
            return list(input.split(separator)), False
        return [input], True
    if isinstance(input, (bytes, bytearray)):
        raise TypeError("input must be text (str), not bytes; decode it first (data.decode('utf-8'))")
    if isinstance(input, np.ndarray):
        input = input.tolist()
    if not isinstance(input, Sequence):
        raise TypeError(f"input must be a string, a list of strings, or a list of token-id lists; "
                        f"got {type(input).__name__}")
    if len(input) == 0:
        raise ValueError("input is an empty list: give at least one string or token list to embed")
    if all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in input):
        return [list(input)], True  # one tokenized input (as OpenAI accepts an array of token ids)
    items: list[str | list[int]] = []
    for i, item in enumerate(input):
        if isinstance(item, str):
            items.append(item)
        elif isinstance(item, (list, tuple, np.ndarray)) and all(
                isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in item):
            items.append(list(item))
        else:
            raise TypeError(f"input[{i}] is {type(item).__name__} {item!r:.60}; each input must be a string or a "
                            "list of token ids")
    return items, False


class EmbeddingAPI(LlamaBase):
    """The embedding methods of :class:`llama_cpp.Llama`."""

    def _embedder(self) -> Embedder:
        scheduler = self._live_scheduler()
        if not self.context_params.embeddings:
            raise RuntimeError("this model was loaded without embeddings: create it with "
                               "Llama(model_path, embedding=True) (or embeddings=True) to embed")
        model = self._live_model()
        if model.read(lib.llama_model_has_encoder) and model.read(lib.llama_model_has_decoder):
            raise RuntimeError("embeddings of encoder-decoder models are not supported (nor are they by llama.cpp)")
        return Embedder(scheduler)

    def _input_tokens(self, items: list[str | list[int]], limit: int, truncate: bool,
                      describe: Callable[[], str]) -> list[list[int]]:
        """Token ids of each input (text tokenized with the model's special tokens, e.g. [CLS] ... [SEP]),
        cut to ``limit`` with ``truncate``, else a ValueError naming the input and its length."""
        out = []
        for i, item in enumerate(items):
            tokens = (self.tokenize(item.encode("utf-8"), add_bos=True, special=False) if isinstance(item, str)
                      else self._token_list(item))
            if len(tokens) > limit:
                if not truncate:
                    raise ValueError(f"input {i} has {len(tokens)} tokens, more than one embedding can hold: at "
                                     f"most {describe()}; pass truncate=True to cut it")
                tokens = tokens[:limit]
            out.append(tokens)
        return out

    def _embed_outputs(self, input: Any, normalize: Any, truncate: bool, separator: str | None = None,
                       ) -> tuple[list[Embedded], bool, int]:
        """Every input's embedding as Python values, whether the call was a single input, and the token count."""
        mode = norm_mode(normalize)
        items, single = split_inputs(input, separator)
        embedder = self._embedder()
        tokens = self._input_tokens(items, embedder.limit, truncate, embedder.describe_limit)
        raw = embedder.run(tokens)
        rank = embedder.pooling == lib.LLAMA_POOLING_TYPE_RANK
        results: list[Embedded] = []
        for values in raw:
            if rank:  # classifier outputs: never normalized
                if embedder.n_cls_out == 1:
                    results.append(float(values[0]) if values.size else 0.0)
                else:
                    results.append(values.tolist())
                continue
            if mode != NORM_MODE_NONE and values.size:
                values = normalize_rows(values, mode)
            results.append(values.tolist())
        return results, single, sum(len(t) for t in tokens)

    def embed(self, input: EmbeddingInput, normalize: bool | int = False, truncate: bool = True,
              separator: str | None = None, return_count: bool = False) -> Any:
        """Embed a string, a list of strings, or token lists (``Llama(embedding=True)`` only).

        One string (or one token list) gives one result, a list gives a list;
        ``separator`` splits a string into several inputs.  A result is a
        vector when the context pools (mean, cls, last), a matrix of one row
        per token without pooling, and for rank pooling a score (a one-output
        head) or the classifier's outputs.  ``normalize`` is llama.cpp's
        ``--embd-normalize`` mode (llama_cpp.embd_normalize; default: raw).
        An input longer than one decode can hold is cut with ``truncate``,
        else a ValueError.  ``return_count`` adds the number of tokens
        embedded: ``(result, count)``.
        """
        results, single, count = self._embed_outputs(input, normalize, truncate, separator)
        result = results[0] if single else results
        return (result, count) if return_count else result

    def create_embedding(self, input: EmbeddingInput, model: str | None = None,
                         normalize: bool | int = False, truncate: bool = True,
                         encoding_format: str = "float") -> CreateEmbeddingResponse:
        """``embed`` as an OpenAI embeddings response (``{"object": "list", "data": [...], "usage": ...}``).

        ``encoding_format="base64"`` gives each embedding as the base64 of its
        little-endian float32 bytes, as OpenAI does (a token matrix row after
        row, a score as one float).
        """
        check_encoding_format(encoding_format)
        results, _single, count = self._embed_outputs(input, normalize, truncate)
        data: list[Embedding] = [{"object": "embedding", "embedding": encode_embedding(value, encoding_format),
                                  "index": i} for i, value in enumerate(results)]
        return {"object": "list", "data": data, "model": model if model is not None else self.model_path,
                "usage": {"prompt_tokens": count, "total_tokens": count}}


def encode_base64(value: Embedded) -> str:
    """OpenAI's ``encoding_format="base64"``: the float32 values, little-endian, base64-encoded."""
    return base64.b64encode(np.asarray(value, dtype="<f4").tobytes()).decode("ascii")


def check_encoding_format(encoding_format: str) -> None:
    """ValueError unless ``encoding_format`` is one of OpenAI's (checked before anything is embedded)."""
    if encoding_format not in ENCODING_FORMATS:
        raise ValueError(f"encoding_format must be one of {', '.join(map(repr, ENCODING_FORMATS))}, "
                         f"got {encoding_format!r}")


def encode_embedding(value: Embedded, encoding_format: str) -> Embedded | str:
    """One embedding in a response: as is (``"float"``) or :func:`encode_base64`'s text (``"base64"``)."""
    return encode_base64(value) if encoding_format == "base64" else value
