"""The response bodies, in OpenAI's shapes as this server returns them: the OpenAPI schema's models.

The routes return the library's dicts as they are: these models only document them (``responses=`` on the
routes), so no response is validated or converted per request.  They follow what ``_completion.py``,
``_chat.py``, ``_embedding.py`` and the chat formats build; a field that only some responses carry is
optional (``= None``), a field that is always there but may be null is required and nullable.  Streamed
routes answer ``text/event-stream`` with one ``data:`` event per chunk (its JSON), an error event if the
stream fails after it started, and ``data: [DONE]`` last; :func:`sse_content` describes each event as
FastAPI does for its own SSE routes (``itemSchema``).

:func:`install` gives the app an ``openapi()`` that adds the stream chunks' models (referenced from those
event schemas only) to the components.  The routes that speak another API document their answers in modules
of their own, on this one's helpers: :mod:`.anthropic_schema`, :mod:`.openai_responses_schema` and
:mod:`.llama_server_schema`.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence, Union

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

REF = "#/components/schemas/{model}"
#: The header naming the replica that answered, on a Ray Serve deployment's answers.
REPLICA_HEADER = "X-Replica"


class AnswerModel(BaseModel):
    """The base of the answers' models (``model_*`` field names allowed)."""

    model_config = ConfigDict(protected_namespaces=())


# -- errors ---------------------------------------------------------------------------------------------
class ErrorDetail(AnswerModel):
    message: str = Field(description="what was wrong, and what is allowed")
    type: Literal["invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                  "rate_limit_error", "server_error", "timeout_error", "not_supported_error",
                  "exceed_context_size_error"]
    param: str | None = Field(description="the request field at fault (``messages[0].role``), if one is")
    code: str | None = Field(description="a machine-readable code (``invalid_api_key``, ``model_not_found``, "
                                         "``server_busy``, a validation error's type...), if there is one")
    n_prompt_tokens: int | None = Field(None, description="with exceed_context_size_error (llama-server's): the "
                                                          "prompt's tokens")
    n_ctx: int | None = Field(None, description="with exceed_context_size_error: what the context holds")


class ErrorResponse(AnswerModel):
    """OpenAI's error object: every error the server answers has this body."""

    error: ErrorDetail


# -- completions ----------------------------------------------------------------------------------------
class Usage(AnswerModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Timings(AnswerModel):
    """llama-server's ``timings``: the prompt's part (``cache_n`` of its tokens came from memory,
    ``prompt_n`` were evaluated) and the generation's (``predicted_n`` tokens, the end-of-generation token
    counted; the first comes with the prompt, so the generation rates count the others)."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    prompt_per_token_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float
    predicted_per_second: float


TIMINGS = Field(None, description="llama-server's timings: on a whole answer, and on a stream's last event")


class CompletionLogprobs(AnswerModel):
    """The logprobs of the tokens of a choice's text; an echoed prompt's first token has none (null)."""

    tokens: list[str]
    text_offset: list[int]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]


class CompletionChoice(AnswerModel):
    text: str
    index: int
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length"]


class TextCompletion(AnswerModel):
    """A ``/v1/completions`` answer: a choice per prompt and ``n`` (prompt ``i``'s choice ``j`` is
    ``i * n + j``)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    timings: Timings | None = TIMINGS


class CompletionChunkChoice(AnswerModel):
    text: str
    index: int
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length"] | None


class TextCompletionChunk(AnswerModel):
    """One event of a streamed completion; with ``stream_options.include_usage`` the last one before
    ``[DONE]`` has no choices and the usage."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChunkChoice]
    usage: Usage | None = None
    timings: Timings | None = TIMINGS


# -- chat -----------------------------------------------------------------------------------------------
class TopLogprob(AnswerModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(AnswerModel):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChatLogprobs(AnswerModel):
    content: list[TokenLogprob] | None
    refusal: str | None


class FunctionCall(AnswerModel):
    name: str
    arguments: str = Field(description="the arguments, a JSON object as text")


class ToolCall(AnswerModel):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(AnswerModel):
    role: Literal["assistant"]
    content: str | None
    tool_calls: list[ToolCall] | None = None
    function_call: FunctionCall | None = Field(None, description="the legacy field: the call, when there is one")


class ChatChoice(AnswerModel):
    index: int
    message: ChatMessage
    logprobs: ChatLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls"]


class ChatCompletion(AnswerModel):
    """A ``/v1/chat/completions`` answer: ``n`` choices."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    timings: Timings | None = TIMINGS


class FunctionCallDelta(AnswerModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(AnswerModel):
    """A tool call's part: the first one of a call has its ``id``, ``type`` and name, the next ones more of
    its arguments."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta | None = None


class ChatDelta(AnswerModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(AnswerModel):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls"] | None


class ChatCompletionChunk(AnswerModel):
    """One event of a streamed chat completion: the role first, then the content or tool calls' deltas,
    then the finish reason; with ``stream_options.include_usage`` the last one before ``[DONE]`` has no
    choices and the usage."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    timings: Timings | None = TIMINGS


# -- embeddings, rerank ---------------------------------------------------------------------------------
class Embedding(AnswerModel):
    object: Literal["embedding"]
    embedding: Union[list[float], str, list[list[float]], float] = Field(
        description="the vector; with encoding_format base64, the base64 of its little-endian float32s; a "
                    "model without pooling gives a vector per token, a one-output classifier a score")
    index: int


class EmbeddingUsage(AnswerModel):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int | None = None


class EmbeddingList(AnswerModel):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class RerankDocument(AnswerModel):
    text: str


class RerankResult(AnswerModel):
    index: int = Field(description="the document's place in the request's documents")
    relevance_score: float = Field(description="the reranker's raw score (higher: more relevant)")
    document: RerankDocument | None = Field(None, description="with return_documents (the default)")


class RerankUsage(AnswerModel):
    prompt_tokens: int
    total_tokens: int


class RerankList(AnswerModel):
    """The documents by relevance, the most relevant first, at most ``top_n``."""

    object: Literal["list"]
    model: str
    results: list[RerankResult]
    usage: RerankUsage


# -- models, tokens, health -----------------------------------------------------------------------------
class ModelStatus(AnswerModel):
    """llama-server's state of a model: loaded, being loaded, freed while idle (sleeping), or not loaded."""

    value: Literal["loaded", "loading", "sleeping", "unloaded"]


class Model(AnswerModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    status: ModelStatus


class ModelList(AnswerModel):
    object: Literal["list"]
    data: list[Model]


class TokenPiece(AnswerModel):
    id: int
    piece: Union[str, list[int]] = Field(description="the token's text, or its bytes when they are not UTF-8 "
                                                     "on their own (llama-server's shape)")


class Tokens(AnswerModel):
    tokens: Union[list[int], list[TokenPiece]] = Field(description="token ids; with with_pieces, each with its "
                                                                   "text")


class TokenCount(AnswerModel):
    count: int


class Detokenized(AnswerModel):
    content: str = Field(description="the text (llama-server's name)")
    text: str = Field(description="the same text (the reference's name)")


class InputTokenCount(AnswerModel):
    """How many tokens a request's prompt takes, without generating (OpenAI's and llama-server's shape)."""

    object: Literal["response.input_tokens"]
    input_tokens: int


class Health(AnswerModel):
    status: Literal["ok"]


class HealthUnavailable(AnswerModel):
    status: Literal["loading model", "error"]
    error: ErrorDetail


# -- what the chat route's free-form request fields hold -----------------------------------------------
class ContentPart(AnswerModel):
    """A part of a message's content: ``{"type": "text", "text": ...}``, or media for a multimodal model
    (``image_url``, ``input_audio``...: docs/multimodal.md)."""

    type: str = Field(min_length=1)
    text: str | None = Field(None, description="a text part's text")


class ChatMessageParam(AnswerModel):
    """A chat message, as the library reads it (other keys, such as ``name`` or ``tool_call_id``, reach the
    chat template as they are)."""

    role: str = Field(min_length=1, description="'system', 'user', 'assistant', 'tool', ... (the template's)")
    content: Union[str, list[ContentPart], None] = Field(None, description="null: an assistant turn that only "
                                                                           "calls tools")
    tool_calls: list[dict[str, Any]] | None = Field(None, description="an assistant turn's calls, OpenAI's shape")


class FunctionParam(AnswerModel):
    name: str = Field(pattern=r"\S", description="not empty, not only spaces")
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON schema of the arguments (an object)")


class ToolParam(AnswerModel):
    type: Literal["function"] = "function"
    function: FunctionParam


# the request bodies' free-form lists (dicts for the library to check): the schema shows their items' shape
_ITEMS: dict[tuple[str, str], type[BaseModel]] = {
    ("ChatRequest", "messages"): ChatMessageParam, ("ChatRequest", "tools"): ToolParam,
    ("ChatRequest", "functions"): FunctionParam}
_FREE_FORM = {"additionalProperties": True, "type": "object"}


def _document_items(schema: Any, model: type[BaseModel]) -> None:
    """Give the free-form ``items`` in ``schema`` (a list field's, nullable or not) ``model``'s shape."""
    if isinstance(schema, dict):
        if schema.get("items") == _FREE_FORM:
            schema["items"] = ref(model)
        for option in schema.get("anyOf", ()):
            _document_items(option, model)


# -- the routes' responses ------------------------------------------------------------------------------
_ERRORS = {
    400: "The request was refused: its body is not JSON or not an object, or a value the server or the library "
         "does not allow (the message says what is allowed)",
    401: "No valid API key (when the server has keys): send `Authorization: Bearer <key>` or `X-Api-Key`",
    404: "No such model (`param`: `model`); the message lists the available ones",
    409: "The model or sequence is busy",
    413: "The body is larger than `max_body_bytes`",
    422: "A field of the wrong type, out of its bounds, or unknown (`param` names it)",
    429: "The model's sequences and queue are full; retry after `Retry-After` seconds",
    500: "A bug: the details are in the server's log",
    501: "The model or the server does not do this (llama-server's code for a feature it was not started with)",
    503: "The server is shutting down",
    504: "The request took longer than `request_timeout` and was cancelled",
}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}}


def ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def errors(*statuses: int, body: type[BaseModel] | None = None,
           descriptions: Mapping[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """The error responses ``statuses``, each with OpenAI's error object, or ``body`` for a route that speaks
    another API (given as content, not as a model: a route whose own media type is not JSON still answers its
    errors in JSON); ``descriptions`` replace the usual ones where that API's differ."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        out[status] = {"description": (descriptions or {}).get(status, _ERRORS[status]),
                       "content": {"application/json": {"schema": ref(body or ErrorResponse)}}}
        if status == 429:
            out[status]["headers"] = _RETRY_AFTER
    return out


def sse_content(*chunks: type[BaseModel], done: bool = True) -> dict[str, Any]:
    """``text/event-stream`` whose events carry one of ``chunks`` (or an error object) as JSON, and with
    ``done`` ``[DONE]`` last (llama-server's own routes send none)."""
    data: dict[str, Any] = {
        "type": "string", "contentMediaType": "application/json",
        "contentSchema": {"anyOf": [*map(ref, chunks), ref(ErrorResponse)]},
        "description": "an event's object; or, when the stream fails after it started, an error object"}
    return {"text/event-stream": {
        "itemSchema": {
            "type": "object",
            "required": ["data"],
            "properties": {
                "data": {"anyOf": [{"type": "string", "const": "[DONE]", "description": "the end of the stream"},
                                   data]} if done else data,
                "event": {"type": "string"},
                "id": {"type": "string"},
                "retry": {"type": "integer", "minimum": 0},
            },
        },
    }}


def named_sse_content(events: Mapping[str, type[BaseModel]]) -> dict[str, Any]:
    """``text/event-stream`` of named events (``event: <name>``, as Anthropic's API and OpenAI's Responses
    API write them), each name's data the JSON of its model, with no end marker."""
    return {"text/event-stream": {"itemSchema": {"oneOf": [{
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"type": "string", "const": name},
            "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": ref(model)},
            "id": {"type": "string"},
            "retry": {"type": "integer", "minimum": 0},
        },
    } for name, model in events.items()]}}}


def ok(model: type[BaseModel], description: str, content: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"model": model, "description": description}
    if content:
        out["content"] = content
    return out


GENERATION_ERRORS = (400, 401, 404, 413, 422, 429, 500, 503, 504)
TOKEN_ERRORS = (400, 401, 404, 413, 422, 429, 500)

COMPLETIONS: dict[int | str, dict[str, Any]] = {
    200: ok(TextCompletion, "The completion (JSON), or with `stream` its chunks (server-sent events)",
             sse_content(TextCompletionChunk)),
    **errors(*GENERATION_ERRORS)}
CHAT: dict[int | str, dict[str, Any]] = {
    200: ok(ChatCompletion, "The chat completion (JSON), or with `stream` its chunks (server-sent events)",
             sse_content(ChatCompletionChunk)),
    **errors(*GENERATION_ERRORS)}
EMBEDDINGS: dict[int | str, dict[str, Any]] = {200: ok(EmbeddingList, "The embeddings, in the inputs' order"),
                                               **errors(*GENERATION_ERRORS)}
RERANK: dict[int | str, dict[str, Any]] = {200: ok(RerankList, "The documents by relevance"),
                                           **errors(*GENERATION_ERRORS)}
MODELS: dict[int | str, dict[str, Any]] = {200: ok(ModelList, "The models this server serves"),
                                           **errors(401, 500)}
TOKENIZE: dict[int | str, dict[str, Any]] = {200: ok(Tokens, "The text's tokens"), **errors(*TOKEN_ERRORS)}
TOKENIZE_COUNT: dict[int | str, dict[str, Any]] = {200: ok(TokenCount, "How many tokens the text has"),
                                                   **errors(*TOKEN_ERRORS)}
DETOKENIZE: dict[int | str, dict[str, Any]] = {200: ok(Detokenized, "The tokens' text"), **errors(*TOKEN_ERRORS)}
HEALTH: dict[int | str, dict[str, Any]] = {
    200: ok(Health, "The first model is loaded"),
    503: {"model": HealthUnavailable, "description": "The first model is loading, or failed to load (the error "
                                                     "says why)"},
    **errors(500)}
METRICS: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus' text format, per loaded model (label `model`)",
          "content": {"text/plain": {"schema": {"type": "string"}}}},
    **errors(401, 500)}

# referenced from the event streams' schemas and from `errors()` only: install() adds them to the components
_REFERENCED: tuple[type[BaseModel], ...] = (TextCompletionChunk, ChatCompletionChunk, ErrorResponse)


_FASTAPI_422 = {"$ref": "#/components/schemas/HTTPValidationError"}


def install(app: FastAPI, referenced: Sequence[type[BaseModel]] = ()) -> None:
    """``app.openapi()``: FastAPI's schema, plus the models only the event streams and errors reference
    (these routes' and ``referenced``, those of the routes that speak other APIs), and the shapes of the chat
    body's messages, tools and functions (``_ITEMS``)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = FastAPI.openapi(app)  # which keeps it as app.openapi_schema: the changes below stay
        _, extra = models_json_schema([(m, "serialization") for m in (*_REFERENCED, *referenced)]
                                      + [(m, "validation") for m in _ITEMS.values()], ref_template=REF)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, definition in extra.get("$defs", {}).items():
            components.setdefault(name, definition)
        for (body, field), model in _ITEMS.items():
            _document_items(components.get(body, {}).get("properties", {}).get(field), model)
        for operation in (op for path in schema.get("paths", {}).values() for op in path.values()):
            # FastAPI adds its own 422 to a route with a body that documents none: the route's API answers a
            # malformed body with 400 (Anthropic's), never with FastAPI's validation error
            if operation.get("responses", {}).get("422", {}).get("content", {}).get("application/json", {}).get(
                    "schema") == _FASTAPI_422:
                del operation["responses"]["422"]
            for response in operation.get("responses", {}).values():
                for media in response.get("content", {}).values():
                    if "$ref" in media.get("schema", {}) or "anyOf" in media.get("schema", {}):
                        # the routes' "-> Any" gave it a title only
                        media["schema"].pop("title", None)
        for name in ("HTTPValidationError", "ValidationError"):  # referenced by FastAPI's 422 alone
            components.pop(name, None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise the schema


def with_root_path(schema: dict[str, Any], root_path: str) -> dict[str, Any]:
    """``schema`` as served under ``root_path`` (behind a proxy): that path first in its servers, as
    FastAPI's own /openapi.json does."""
    root_path = root_path.rstrip("/")
    servers = schema.get("servers", [])
    if not root_path or any(s.get("url") == root_path for s in servers):
        return schema
    return {**schema, "servers": [{"url": root_path}, *servers]}
