"""The answers of OpenAI's Responses routes as the OpenAPI schema documents them.

Like :mod:`.responses`, these models only document what :mod:`.openai_responses` builds (a response object, the
typed events of its stream, the stored input items); nothing is validated or converted per request.  Errors are
OpenAI's error object, as on the chat route; a stream that fails after it started ends with an ``error`` event.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, Field

from .openai_responses import Item
from .responses import (GENERATION_ERRORS, TOKEN_ERRORS, AnswerModel, InputTokenCount, errors, named_sse_content,
                        ok)

Status = Literal["in_progress", "completed", "incomplete"]
ItemStatus = Status  # an item the token limit cut is incomplete, as its response is


class ReasoningTextPart(AnswerModel):
    type: Literal["reasoning_text"]
    text: str


class OutputTextPart(AnswerModel):
    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]] = Field(description="always empty")
    logprobs: list[dict[str, Any]] = Field(description="always empty")


class OutputReasoning(AnswerModel):
    """The model's reasoning (what the chat route answers as ``reasoning_content``)."""

    type: Literal["reasoning"]
    id: str
    summary: list[dict[str, Any]] = Field(description="always empty: the reasoning is given whole, in content")
    content: list[ReasoningTextPart]
    status: ItemStatus


class OutputMessage(AnswerModel):
    type: Literal["message"]
    id: str
    status: ItemStatus
    role: Literal["assistant"]
    content: list[OutputTextPart]


class OutputFunctionCall(AnswerModel):
    """A call of one of the request's function tools; the client answers it with a ``function_call_output``
    item carrying ``call_id``."""

    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str = Field(description="the arguments, JSON text")
    status: ItemStatus


OutputItem = Union[OutputReasoning, OutputMessage, OutputFunctionCall]


class IncompleteDetails(AnswerModel):
    reason: Literal["max_output_tokens"]


class ReasoningSettings(AnswerModel):
    effort: str | None
    summary: str | None


class TextSettings(AnswerModel):
    format: dict[str, Any] = Field(description="the request's text.format, or {\"type\": \"text\"}")


class InputTokensDetails(AnswerModel):
    cached_tokens: int = Field(description="the prompt's tokens read from memory (a reused prefix, or restored "
                                           "from the prompt cache)")
    cache_write_tokens: int


class OutputTokensDetails(AnswerModel):
    reasoning_tokens: int


class ResponseUsage(AnswerModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseObject(AnswerModel):
    """A ``/v1/responses`` answer, and what ``GET /v1/responses/{response_id}`` returns of a stored one: the
    request's settings echoed, the output items in the order they came, the status and usage."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Status
    completed_at: int | None
    error: None = Field(description="always null: a failed request answers an error, and is not stored")
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    reasoning: ReasoningSettings
    store: bool
    temperature: float | None
    text: TextSettings
    tool_choice: Union[str, dict[str, Any]]
    tools: list[dict[str, Any]]
    top_p: float | None
    truncation: str
    usage: ResponseUsage | None = Field(description="null until the response is done")
    user: str | None
    metadata: dict[str, str]


class _Event(AnswerModel):
    sequence_number: int


class ResponseEvent(_Event):
    type: Literal["response.created", "response.in_progress", "response.completed", "response.incomplete"]
    response: ResponseObject


class OutputItemEvent(_Event):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: OutputItem


class _Located(_Event):
    item_id: str
    output_index: int


class ContentPartEvent(_Located):
    type: Literal["response.content_part.added", "response.content_part.done"]
    content_index: int
    part: Union[OutputTextPart, ReasoningTextPart]


class OutputTextDelta(_Located):
    type: Literal["response.output_text.delta"]
    content_index: int
    delta: str
    logprobs: list[dict[str, Any]]


class OutputTextDone(_Located):
    type: Literal["response.output_text.done"]
    content_index: int
    text: str
    logprobs: list[dict[str, Any]]


class ReasoningTextDelta(_Located):
    type: Literal["response.reasoning_text.delta"]
    content_index: int
    delta: str


class ReasoningTextDone(_Located):
    type: Literal["response.reasoning_text.done"]
    content_index: int
    text: str


class FunctionCallArgumentsDelta(_Located):
    type: Literal["response.function_call_arguments.delta"]
    delta: str


class FunctionCallArgumentsDone(_Located):
    type: Literal["response.function_call_arguments.done"]
    arguments: str
    name: str


class StreamError(_Event):
    """A stream that failed after it started ends with this event."""

    type: Literal["error"]
    code: str = Field(description="a machine-readable code, or the error's type")
    message: str
    param: str | None


class DeletedResponse(AnswerModel):
    id: str
    object: Literal["response"]
    deleted: Literal[True]


class InputItemsPage(AnswerModel):
    """A page of a stored response's input items, each with its id (``after`` one of them asks for the next
    page)."""

    object: Literal["list"]
    data: list[Item]
    first_id: str | None
    last_id: str | None
    has_more: bool


#: the stream's events by name, as :class:`.openai_responses.ResponseStream` writes them
EVENTS: dict[str, type[BaseModel]] = {
    **dict.fromkeys(("response.created", "response.in_progress", "response.completed", "response.incomplete"),
                    ResponseEvent),
    **dict.fromkeys(("response.output_item.added", "response.output_item.done"), OutputItemEvent),
    **dict.fromkeys(("response.content_part.added", "response.content_part.done"), ContentPartEvent),
    "response.output_text.delta": OutputTextDelta, "response.output_text.done": OutputTextDone,
    "response.reasoning_text.delta": ReasoningTextDelta, "response.reasoning_text.done": ReasoningTextDone,
    "response.function_call_arguments.delta": FunctionCallArgumentsDelta,
    "response.function_call_arguments.done": FunctionCallArgumentsDone,
    "error": StreamError}

_UNKNOWN = "No stored response with this id (made with `store: true`, by this API key, and not deleted or evicted)"
_CONTINUED = {404: "No such model (`param`: `model`; the message lists the available ones), or no stored response "
                   "`previous_response_id` (`param` names it)"}
_STORED = {404: _UNKNOWN}
CREATE: dict[int | str, dict[str, Any]] = {
    200: ok(ResponseObject, "The response (JSON), or with `stream` its events (server-sent events, named)",
            named_sse_content(EVENTS)),
    **errors(*GENERATION_ERRORS, descriptions=_CONTINUED)}
INPUT_TOKENS: dict[int | str, dict[str, Any]] = {
    200: ok(InputTokenCount, "How many tokens the prompt of this input (after the previous response's "
                                 "conversation) has"),
    **errors(*TOKEN_ERRORS, descriptions=_CONTINUED)}
GET: dict[int | str, dict[str, Any]] = {200: ok(ResponseObject, "The stored response"),
                                        **errors(401, 404, 500, descriptions=_STORED)}
DELETE: dict[int | str, dict[str, Any]] = {200: ok(DeletedResponse, "The response is no longer stored"),
                                           **errors(401, 404, 500, descriptions=_STORED)}
INPUT_ITEMS: dict[int | str, dict[str, Any]] = {
    200: ok(InputItemsPage, "A page of the stored request's input items"),
    **errors(400, 401, 404, 422, 500, descriptions={
        400: "`limit` is not 1 to 100, or `order` not `asc` or `desc`", 404: _UNKNOWN + "; or `after` names no "
        "input item of it"})}

#: referenced from the event streams only: added to the schema's components
REFERENCED: tuple[type[BaseModel], ...] = tuple(dict.fromkeys(EVENTS.values()))
