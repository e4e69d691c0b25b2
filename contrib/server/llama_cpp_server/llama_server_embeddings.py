"""llama-server's native embeddings (``/embedding``, ``/embeddings``): ``input`` or ``content`` in, a list of
``{"index", "embedding"}`` matrices out (one row when the model pools, one per token when it does not)."""

from __future__ import annotations

from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field

from .errors import APIError


class NativeEmbeddingRequest(BaseModel):
    """The body of llama-server's ``/embedding`` and ``/embeddings``: ``input`` (or ``content``) and
    ``embd_normalize`` (-1 none, 0 max-absolute to int16, 1 taxicab, 2 euclidean, the default, >2 p-norm)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), allow_inf_nan=False)

    input: Union[str, list[int], list[Union[str, list[int]]], None] = None
    content: Union[str, list[int], list[Union[str, list[int]]], None] = None
    model: str | None = None
    embd_normalize: int = Field(2, ge=-1)


def embedding_inputs(body: NativeEmbeddingRequest) -> list[str] | list[list[int]]:
    """The inputs, one embedding each (a list of token ids is one input), as llama-server reads them; texts
    and token lists are not mixed in one request here."""
    value = body.input if body.input is not None else body.content
    if value is None:
        raise APIError(400, '"input" or "content" must be provided', param="input")
    empty = APIError(400, "input: every input needs some text or tokens to embed (an empty one has none)",
                     param="input")
    if not value:
        raise empty
    if isinstance(value, str):
        return [value]
    if all(isinstance(item, int) for item in value):
        return [[item for item in value if isinstance(item, int)]]
    texts = [item for item in value if isinstance(item, str)]
    token_lists = [item for item in value if isinstance(item, list)]
    if any(len(item) == 0 for item in [*texts, *token_lists]):
        raise empty
    if len(texts) == len(value):
        return texts
    if len(token_lists) == len(value):
        return token_lists
    raise APIError(400, "input: a list of inputs holds texts or lists of token ids, not both", param="input")


def native_embeddings(vectors: list[Any]) -> list[dict[str, Any]]:
    """llama-server's answer: per input its index and a matrix (one row when pooled, one per token when not)."""
    return [{"index": i, "embedding": value if value and isinstance(value[0], list) else [value]}
            for i, value in enumerate(vectors)]
