"""The answers of llama-server's own generation routes as the OpenAPI schema documents them.

``/completion`` (``/completions``), ``/infill``, ``/embedding`` (``/embeddings``), ``/apply-template`` and
``/chat/completions/input_tokens`` answer in llama-server's shapes (:mod:`.llama_server_completion`,
:mod:`.llama_server_embeddings`, :mod:`.llama_server_template`); like :mod:`.responses`, these models only
document them.  Their errors are OpenAI's error object, as llama-server's are; a stream ends with its last
event, without ``[DONE]``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .responses import (GENERATION_ERRORS, TOKEN_ERRORS, AnswerModel, InputTokenCount, Timings, errors, ok, ref,
                        sse_content)


class TopProbability(AnswerModel):
    id: int
    token: str = Field(description="the token's text (bytes that are not UTF-8 alone are left out)")
    bytes: list[int]
    logprob: float | None = Field(None, description="without post_sampling_probs")
    prob: float | None = Field(None, description="with post_sampling_probs")


class TokenProbability(TopProbability):
    """A generated token's probability (``n_probs``): its log-probability and the best candidates' before
    the samplers, or with ``post_sampling_probs`` probabilities of what the sampler chain left."""

    top_logprobs: list[TopProbability] | None = None
    top_probs: list[TopProbability] | None = None


class PromptProgress(AnswerModel):
    total: int
    cache: int = Field(description="of the prompt's tokens, those read from memory")
    processed: int
    time_ms: int


class CompletionToken(AnswerModel):
    """A streamed token (``stop: false``), or with ``return_progress`` a report of the prompt's evaluation
    (``prompt_progress``, ``tokens`` then ``[0]``)."""

    index: int
    content: str
    tokens: list[int]
    stop: Literal[False]
    id_slot: Literal[-1]
    tokens_predicted: int
    tokens_evaluated: int
    timings: Timings | None = Field(None, description="with timings_per_token")
    completion_probabilities: list[TokenProbability] | None = Field(None, description="with n_probs")
    prompt_progress: PromptProgress | None = None


class CompletionResult(AnswerModel):
    """A prompt's (or choice's) whole answer; in a stream its last event, whose ``content`` and ``tokens``
    are empty (the tokens came before)."""

    index: int
    content: str
    tokens: list[int] = Field(description="with return_tokens, outside a stream")
    id_slot: int = Field(description="the sequence that generated it")
    stop: Literal[True]
    model: str
    tokens_predicted: int
    tokens_evaluated: int
    generation_settings: dict[str, Any] = Field(description="the request's settings under llama-server's names "
                                                            "(GET /props' params, with the per-request lists)")
    prompt: str
    has_new_line: bool
    truncated: bool = Field(description="the context ended it, not n_predict")
    stop_type: Literal["none", "eos", "limit", "word"]
    stopping_word: str
    tokens_cached: int
    timings: Timings
    completion_probabilities: list[TokenProbability] | None = Field(None, description="with n_probs, outside "
                                                                                       "a stream")


class PickedFields(AnswerModel):
    """With ``response_fields``: only those fields of the result, each under the path asked for
    (``generation_settings/n_predict``: a field of an object in it), those it does not have left out."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"propertyNames": {"anyOf": [
        {"enum": list(CompletionResult.model_fields)}, {"pattern": "^[a-z_]+/"}]}})


class NativeEmbedding(AnswerModel):
    index: int
    embedding: list[list[float]] = Field(description="one row when the model pools, one per token when not")


class AppliedTemplate(AnswerModel):
    prompt: str = Field(description="the chat body rendered by the model's chat template, as the chat route "
                                    "would generate from it")


_COMPLETION_ANSWER: dict[str, Any] = {"application/json": {"schema": {"anyOf": [
    ref(CompletionResult),
    {"type": "array", "items": ref(CompletionResult), "description": "several prompts or choices, in index order"},
    ref(PickedFields)]}}}

COMPLETION: dict[int | str, dict[str, Any]] = {
    200: {"description": "The result (JSON; a list with several prompts), or with `stream` its tokens and then "
                         "its result (server-sent events, no `[DONE]`)",
          "content": {**_COMPLETION_ANSWER, **sse_content(CompletionToken, CompletionResult, PickedFields,
                                                          done=False)}},
    **errors(*GENERATION_ERRORS)}
INFILL: dict[int | str, dict[str, Any]] = {**COMPLETION, **errors(501, descriptions={
    501: "The model has no fill-in-the-middle tokens"})}
EMBEDDING: dict[int | str, dict[str, Any]] = {
    200: {"description": "Per input, its index and its embeddings",
          "content": {"application/json": {"schema": {"type": "array", "items": ref(NativeEmbedding)}}}},
    **errors(*GENERATION_ERRORS, 501, descriptions={501: "The model does not serve embeddings (load it with "
                                                         "embeddings: true; llama-server's --embeddings)"})}
_RENDER_ERRORS = errors(*TOKEN_ERRORS, 501, descriptions={501: "The model's chat format renders only while it "
                                                               "generates"})
APPLY_TEMPLATE: dict[int | str, dict[str, Any]] = {200: ok(AppliedTemplate, "The rendered prompt"), **_RENDER_ERRORS}
INPUT_TOKENS: dict[int | str, dict[str, Any]] = {
    200: ok(InputTokenCount, "How many tokens the rendered prompt takes"), **_RENDER_ERRORS}

#: referenced from the event streams and the answers' hand-written schemas only: added to the components
REFERENCED: tuple[type[BaseModel], ...] = (CompletionToken, CompletionResult, PickedFields, NativeEmbedding)
