"""The answers of llama-server's own routes as the OpenAPI schema documents them.

The generation routes, ``/completion`` (``/completions``), ``/infill``, ``/embedding`` (``/embeddings``),
``/apply-template`` and ``/chat/completions/input_tokens`` (:mod:`.llama_server_completion`,
:mod:`.llama_server_embeddings`, :mod:`.llama_server_template`), and the administration routes, ``/props``,
``/slots``, ``/lora-adapters``, ``/prefixes`` and the ``/models`` of llama-server's router mode, answer in
llama-server's shapes; like :mod:`.responses`, these models only document them.  Their errors are OpenAI's
error object, as llama-server's are; a stream ends with its last event, without ``[DONE]``.  The routes that
read their bodies by hand (to answer llama-server's errors) get their bodies' schemas here (``*_BODY``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .responses import (GENERATION_ERRORS, TOKEN_ERRORS, AnswerModel, InputTokenCount, Timings, errors, ok, ref,
                        sse_content)
from .schemas import LoraEntry


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


# -- administration -------------------------------------------------------------------------------------
class Success(AnswerModel):
    success: Literal[True]


class GenerationDefaults(AnswerModel):
    n_ctx: int = Field(description="a sequence's context")
    params: dict[str, Any] = Field(description="a request's default settings under llama-server's names")


class Modalities(AnswerModel):
    vision: bool
    video: bool
    audio: bool


class Props(AnswerModel):
    """What a client of llama-server reads before it sends anything."""

    default_generation_settings: GenerationDefaults
    total_slots: int
    model_alias: str
    model_path: str
    modalities: Modalities
    endpoint_slots: bool
    endpoint_props: bool
    endpoint_metrics: bool
    chat_template: str
    bos_token: str
    eos_token: str
    build_info: str
    is_sleeping: bool


class Slot(AnswerModel):
    id: int
    n_ctx: int
    speculative: bool
    is_processing: bool
    n_prompt_tokens: int | None = Field(None, description="the tokens the sequence holds, once it has held some")


class SaveTimings(AnswerModel):
    save_ms: float


class RestoreTimings(AnswerModel):
    restore_ms: float


class SlotSaved(AnswerModel):
    id_slot: int
    filename: str
    n_saved: int
    n_written: int = Field(description="bytes")
    timings: SaveTimings


class SlotRestored(AnswerModel):
    id_slot: int
    filename: str
    n_restored: int
    n_read: int = Field(description="bytes")
    timings: RestoreTimings


class SlotErased(AnswerModel):
    id_slot: int
    n_erased: int


class LoraAdapter(AnswerModel):
    id: int
    path: str
    scale: float
    task_name: str = Field(description="always empty: the adapter file's metadata is not read")
    prompt_prefix: str = Field(description="always empty")


class PrefixList(AnswerModel):
    """What the model's engine can reuse, as chained block hashes, for a balancer in front of several
    servers."""

    name: str
    model: str = Field(description="what the hashes start from: the model file's identity")
    block_tokens: int
    hashes: list[str] = Field(description="each block's hash once, the shallowest first")


class LoadProgress(AnswerModel):
    stages: list[str]
    current: str
    value: float = Field(description="0 to 1")


class ModelState(AnswerModel):
    status: Literal["loaded", "loading", "sleeping", "unloaded"]
    progress: LoadProgress | None = Field(None, description="while it loads")
    exit_code: int | None = Field(None, description="on unloaded: 0 freed, 1 a failed load")
    error: str | None = Field(None, description="why a load failed")


class ModelEvent(AnswerModel):
    """A model's status: each model's first, when the stream starts; then every change and load step."""

    model: str
    event: Literal["model_status"]
    data: ModelState


class ModelName(AnswerModel):
    model: str = Field(min_length=1, description="one of the server's models (GET /v1/models)")


class SlotFile(AnswerModel):
    filename: str | None = Field(None, description="save and restore: a plain file name in slot_save_path")


def _body(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """``openapi_extra`` documenting the JSON body of a route that reads it by hand."""
    return {"requestBody": {"required": False, "description": description,
                            "content": {"application/json": {"schema": schema}}}}


LOAD_BODY = _body(ref(ModelName), "The model to load")
UNLOAD_BODY = _body(ref(ModelName), "The model to free")
SLOT_ACTION_BODY = _body(ref(SlotFile), "The file of a save or restore")
SET_LORA_ADAPTERS_BODY = _body({"type": "array", "items": ref(LoraEntry)}, "Every adapter's scale (one left out: 0)")
POST_PROPS_BODY = _body({"type": "object", "maxProperties": 0}, "Nothing: llama-server's changes no property, and "
                                                                "here one named is a 400")


_MODEL_ERRORS = (401, 404, 429, 500)  # a route that only admits the request's model
PROPS: dict[int | str, dict[str, Any]] = {200: ok(Props, "The model's properties"), **errors(*_MODEL_ERRORS)}
POST_PROPS: dict[int | str, dict[str, Any]] = {
    200: ok(Success, "Nothing changed (llama-server's answer)"),
    **errors(400, 401, 413, 500, 501, descriptions={
        400: "The body is not a JSON object, or names a property (none can be changed)",
        501: "The server was not started with props_endpoint (llama-server's --props)"})}
SLOTS: dict[int | str, dict[str, Any]] = {
    200: {"description": "Each sequence", "content": {"application/json": {"schema": {
        "type": "array", "items": ref(Slot)}}}},
    **errors(*_MODEL_ERRORS, 501, descriptions={501: "The slots endpoint is off (slots_endpoint: false)"})}
SLOT_ACTION: dict[int | str, dict[str, Any]] = {
    200: {"description": "What the action did", "content": {"application/json": {"schema": {"anyOf": [
        ref(SlotSaved), ref(SlotRestored), ref(SlotErased)]}}}},
    **errors(400, *_MODEL_ERRORS, 409, 413, 422, 501, descriptions={
        400: "Not a slot id, an action other than save, restore and erase, or a file name that leaves "
             "slot_save_path or names no file",
        409: "The slot's sequence is generating",
        501: "Save and restore need slot_save_path (llama-server's --slot-save-path)"})}
PREFIXES: dict[int | str, dict[str, Any]] = {
    200: ok(PrefixList, "The reusable prefixes' block hashes"),
    **errors(400, *_MODEL_ERRORS, 422, descriptions={400: "block_tokens not 1 to 4096, or max_hashes not 0 to 65536"})}
LORA_ADAPTERS: dict[int | str, dict[str, Any]] = {
    200: {"description": "The model's adapters and their scales", "content": {"application/json": {"schema": {
        "type": "array", "items": ref(LoraAdapter)}}}},
    **errors(*_MODEL_ERRORS)}
SET_LORA_ADAPTERS: dict[int | str, dict[str, Any]] = {
    200: ok(Success, "The scales of the requests that come after it"),
    **errors(400, *_MODEL_ERRORS, 413, 422, descriptions={
        400: "The body is not a JSON array, or names an adapter that is not there (or twice)"})}
LOAD: dict[int | str, dict[str, Any]] = {
    200: ok(Success, "The model is loaded"),
    **errors(400, 401, 404, 413, 500, descriptions={400: "No model named, or it is loaded already"})}
UNLOAD: dict[int | str, dict[str, Any]] = {
    200: ok(Success, "The model is freed"),
    **errors(400, 401, 404, 409, 413, 500, descriptions={400: "No model named, or it is not loaded",
                                                         409: "Requests are running or queued on it"})}
MODEL_EVENTS: dict[int | str, dict[str, Any]] = {
    200: {"description": "Each model's status, then every change (server-sent events that do not end; a ping "
                         "comment between them)", "content": sse_content(ModelEvent, done=False)},
    **errors(401, 500)}

#: referenced from the event streams, the hand-written schemas and the hand-read bodies only: added to the
#: components
REFERENCED: tuple[type[BaseModel], ...] = (CompletionToken, CompletionResult, PickedFields, NativeEmbedding, Slot,
                                          SlotSaved, SlotRestored, SlotErased, LoraAdapter, ModelEvent, ModelName,
                                          SlotFile)
