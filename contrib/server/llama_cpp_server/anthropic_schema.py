"""The answers of Anthropic's Messages routes as the OpenAPI schema documents them.

Like :mod:`.responses`, these models only document what :mod:`.anthropic_messages` builds (a message, the
named events of its stream, Anthropic's error object); nothing is validated or converted per request.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, Field

from .responses import GENERATION_ERRORS, TOKEN_ERRORS, AnswerModel, errors, named_sse_content, ok


class AnthropicErrorDetail(AnswerModel):
    type: Literal["invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                  "request_too_large", "rate_limit_error", "api_error", "overloaded_error"]
    message: str = Field(description="what was wrong, and what is allowed (the field at fault first)")


class AnthropicError(AnswerModel):
    """Anthropic's error object: every error of these routes has this body, and a stream that fails after it
    started ends with it as its ``error`` event."""

    type: Literal["error"]
    error: AnthropicErrorDetail


class AnthropicUsage(AnswerModel):
    """Of the prompt's tokens: those read from memory (a reused prefix, or restored from the prompt cache),
    those a ``cache_control`` breakpoint wrote into the prompt cache, and the rest; then the output."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    output_tokens: int


class TextContent(AnswerModel):
    type: Literal["text"]
    text: str


class ThinkingContent(AnswerModel):
    type: Literal["thinking"]
    thinking: str
    signature: str = Field(description="always empty: a local model's thinking is not signed")


class ToolUseContent(AnswerModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(description="the call's arguments ({} in a stream's content_block_start: "
                                              "they come as input_json_delta events)")


Content = Union[TextContent, ThinkingContent, ToolUseContent]
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class AnthropicMessage(AnswerModel):
    """A ``/v1/messages`` answer: thinking, then text, then tool uses."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    content: list[Content]
    model: str
    stop_reason: StopReason | None = Field(description="null only in a stream's message_start")
    stop_sequence: str | None
    usage: AnthropicUsage


class MessageStart(AnswerModel):
    type: Literal["message_start"]
    message: AnthropicMessage


class Ping(AnswerModel):
    type: Literal["ping"]


class ContentBlockStart(AnswerModel):
    type: Literal["content_block_start"]
    index: int
    content_block: Content


class TextDelta(AnswerModel):
    type: Literal["text_delta"]
    text: str


class ThinkingDelta(AnswerModel):
    type: Literal["thinking_delta"]
    thinking: str


class SignatureDelta(AnswerModel):
    type: Literal["signature_delta"]
    signature: str


class InputJSONDelta(AnswerModel):
    type: Literal["input_json_delta"]
    partial_json: str


class ContentBlockDelta(AnswerModel):
    type: Literal["content_block_delta"]
    index: int
    delta: Union[TextDelta, ThinkingDelta, SignatureDelta, InputJSONDelta]


class ContentBlockStop(AnswerModel):
    type: Literal["content_block_stop"]
    index: int


class StopDelta(AnswerModel):
    stop_reason: StopReason
    stop_sequence: str | None


class MessageDelta(AnswerModel):
    type: Literal["message_delta"]
    delta: StopDelta
    usage: AnthropicUsage


class MessageStop(AnswerModel):
    type: Literal["message_stop"]


class InputTokens(AnswerModel):
    input_tokens: int


#: the stream's events by name, as :class:`.anthropic_messages.MessageStream` writes them
EVENTS: dict[str, type[BaseModel]] = {
    "message_start": MessageStart, "ping": Ping, "content_block_start": ContentBlockStart,
    "content_block_delta": ContentBlockDelta, "content_block_stop": ContentBlockStop,
    "message_delta": MessageDelta, "message_stop": MessageStop, "error": AnthropicError}

# Anthropic's API answers a body it cannot read, or a field out of its bounds, with 400 (never 422)
_DESCRIPTIONS = {400: "The request was refused: its body is not JSON, a field is missing, of the wrong type, out "
                      "of its bounds or unknown, or a value the server or the library does not allow (the message "
                      "names the field and says what is allowed)"}

MESSAGES: dict[int | str, dict[str, Any]] = {
    200: ok(AnthropicMessage, "The message (JSON), or with `stream` its events (server-sent events, named)",
            named_sse_content(EVENTS)),
    **errors(*(s for s in GENERATION_ERRORS if s != 422), body=AnthropicError, descriptions=_DESCRIPTIONS)}
COUNT_TOKENS: dict[int | str, dict[str, Any]] = {
    200: ok(InputTokens, "How many tokens the conversation's prompt has"),
    **errors(*(s for s in TOKEN_ERRORS if s != 422), body=AnthropicError, descriptions=_DESCRIPTIONS)}

#: referenced from the event streams and the errors only: added to the schema's components
REFERENCED: tuple[type[BaseModel], ...] = tuple(EVENTS.values())
