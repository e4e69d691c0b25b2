"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``) on the chat route's engine path.

Claude Code, the anthropic SDK and agent frameworks built on it send Anthropic's body: a ``system`` apart, content
blocks (text, images, ``tool_use``, ``tool_result``, ``thinking``), tools with an ``input_schema``.  A body is
normalized once into the server's chat request (:func:`chat_request`), so sampling, tools, grammars, reasoning,
media, limits, cancellation and metrics are the chat route's own; the answer is shaped back into Anthropic's
message (:func:`message`) or its stream of named events (:class:`MessageStream`), errors into its error object
(:func:`error_body`).  llama-server's conversion is the reference for how blocks become chat messages, so the same
request renders the same prompt on both; docs/server.md says where this differs from it (and why).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Callable, Literal, Union

from llama_cpp.engine.policy import MAX_TENANT_LENGTH
from pydantic import BaseModel, ConfigDict, Field

from .bridge import EngineFacts, EventFormat, Served, named_sse
from .schemas import ChatRequest, SamplerFields

# Anthropic's error types by status (its API answers a malformed body with 400, never 422)
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


class _Block(BaseModel):
    # a block's other fields are ignored: the SDK sends back the blocks it received, with the fields its
    # version knows (``citations``, ``caller``...), most of them null; the body's own fields are checked
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class CacheControl(_Block):
    """A prompt-cache breakpoint (``{"type": "ephemeral"}``, optionally with a ``ttl``)."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class TextBlock(_Block):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[dict[str, Any]] | None = None


class Base64Source(_Block):
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class URLSource(_Block):
    type: Literal["url"]
    url: str


class ImageBlock(_Block):
    type: Literal["image"]
    source: Union[Base64Source, URLSource] = Field(discriminator="type")
    cache_control: CacheControl | None = None


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: CacheControl | None = None


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str
    content: Union[str, list[Annotated[Union[TextBlock, ImageBlock], Field(discriminator="type")]], None] = None
    is_error: bool | None = None
    cache_control: CacheControl | None = None


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: str


# by its ``type``, so that a malformed block's error names its field, not every kind it is not
ContentBlock = Annotated[Union[TextBlock, ImageBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock,
                               RedactedThinkingBlock], Field(discriminator="type")]


class Message(_Block):
    role: Literal["user", "assistant", "system"]  # a system message inside the conversation, as the API allows
    content: Union[str, list[ContentBlock]]


class Tool(_Block):
    """A client tool.  Anthropic's server tools (web search, code execution...) carry a versioned ``type`` and
    are refused: nothing here runs them."""

    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    cache_control: CacheControl | None = None


class ToolChoice(_Block):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingEnabled(_Block):
    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1)


class ThinkingDisabled(_Block):
    type: Literal["disabled"]


class ThinkingAdaptive(_Block):
    """The model decides when to think (``adaptive``; ``between_tools``: after tool results): the template's
    default, which is what a local model's chat template decides by."""

    type: Literal["adaptive", "between_tools"]


class JSONOutputFormat(_Block):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Block):
    """The answer's format (a JSON schema its text must follow) and the reasoning effort (given to the template
    as ``reasoning_effort``, as the chat route's field)."""

    format: JSONOutputFormat | None = None
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None


class Metadata(_Block):
    user_id: str | None = Field(None, max_length=MAX_TENANT_LENGTH)


class _Conversation(BaseModel):
    """What both routes take: the conversation and what shapes its prompt.  An unknown field is refused (a
    typo never becomes a silently ignored setting), as on every route here."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, protected_namespaces=())

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    system: Union[str, list[TextBlock], None] = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Union[ThinkingEnabled, ThinkingDisabled, ThinkingAdaptive, None] = Field(None, discriminator="type")
    output_config: OutputConfig | None = None
    cache_control: CacheControl | None = None  # on the last block that can carry one


class MessagesRequest(_Conversation, SamplerFields):
    """The body of ``POST /v1/messages``; beside Anthropic's fields, every sampler parameter of the core
    (``min_p``, ``repeat_penalty``, ``grammar``..., sent in the SDK's ``extra_body``), as on the chat route."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    metadata: Metadata | None = None
    # what changes nothing on a local model: accepted, as the chat route accepts OpenAI's ``store``
    service_tier: Literal["auto", "standard_only"] | None = None
    inference_geo: str | None = None
    speed: str | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


class CountTokensRequest(_Conversation):
    """The body of ``POST /v1/messages/count_tokens``."""


def _image_part(block: ImageBlock) -> dict[str, Any]:
    source = block.source
    url = f"data:{source.media_type};base64,{source.data}" if isinstance(source, Base64Source) else source.url
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_message(block: ToolResultBlock) -> dict[str, Any]:
    """A ``tool_result`` as the chat route's tool message: text alone collapses to a string, as llama-server
    does (templates render strings), images keep the parts."""
    content = block.content
    if content is None or isinstance(content, str):
        return {"role": "tool", "tool_call_id": block.tool_use_id, "content": content or ""}
    if all(isinstance(part, TextBlock) for part in content):
        text = "".join(part.text for part in content if isinstance(part, TextBlock))
        return {"role": "tool", "tool_call_id": block.tool_use_id, "content": text}
    parts = [{"type": "text", "text": p.text} if isinstance(p, TextBlock) else _image_part(p) for p in content]
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": parts}


def _mark(mark: CacheControl) -> dict[str, Any]:
    """A breakpoint as the core takes it on a chat message, a text part or a tool
    (:mod:`llama_cpp.cache_breakpoints`)."""
    return mark.model_dump(exclude_none=True)


def _marked(item: dict[str, Any], mark: CacheControl | None) -> dict[str, Any]:
    """``item`` with the breakpoint ``mark`` (a message's keeps the longer ttl of two)."""
    if mark is None:
        return item
    held = item.get("cache_control")
    if held is not None and held.get("ttl") == "1h":
        return item
    return {**item, "cache_control": _mark(mark)}


def _chat_messages(message: Message) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages: its tool results first (a tool message each, answering the
    assistant's calls just before), then the message itself with its text and image parts, its ``tool_use``
    blocks as ``tool_calls`` and its thinking as ``reasoning_content``.  A text block's ``cache_control`` stays
    on its part; another block's goes on the chat message it became (its breakpoint: the end of that
    message's text)."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    reasoning = ""
    mark: CacheControl | None = None  # the message's own, from a block that is no text part
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(_marked({"type": "text", "text": block.text}, block.cache_control))
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block))
            mark = block.cache_control or mark
        elif isinstance(block, ToolUseBlock):
            calls.append({"id": block.id, "type": "function",
                          "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}})
            mark = block.cache_control or mark
        elif isinstance(block, ToolResultBlock):
            results.append(_marked(_tool_message(block), block.cache_control))
        elif isinstance(block, ThinkingBlock):
            reasoning += block.thinking
        # redacted thinking is another model's encrypted thought: nothing a local template can render
    out = list(results)
    if parts or calls or reasoning:
        chat: dict[str, Any] = {"role": message.role, "content": parts or ""}
        if calls:
            chat["tool_calls"] = calls
        if reasoning:
            chat["reasoning_content"] = reasoning
        out.append(_marked(chat, mark))
    return out


def _tool_choice(choice: ToolChoice | None) -> str | dict[str, Any] | None:
    if choice is None:
        return None
    if choice.type == "tool":
        if not choice.name:
            raise ValueError("tool_choice.name: required with type 'tool' (the tool to call)")
        return {"type": "function", "function": {"name": choice.name}}
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]


def chat_request(body: _Conversation, **generation: Any) -> ChatRequest:
    """``body`` as the chat route's request; ``generation`` adds the chat fields of a generating request."""
    messages: list[dict[str, Any]] = []
    if body.system is not None:  # system blocks join as llama-server joins them: no separator
        if isinstance(body.system, str):
            messages.append({"role": "system", "content": body.system})
        else:  # (a breakpoint on any of them: the end of the system prompt)
            system: dict[str, Any] = {"role": "system", "content": "".join(b.text for b in body.system)}
            for block in body.system:
                system = _marked(system, block.cache_control)
            messages.append(system)
    for message in body.messages:
        messages.extend(_chat_messages(message))
    if body.cache_control is not None and messages:  # automatic caching: the last block that can carry one
        messages[-1] = _marked(messages[-1], body.cache_control)
    tools = None
    if body.tools is not None:
        tools = [_marked({"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                           "parameters": t.input_schema}}, t.cache_control)
                 for t in body.tools]
    fields: dict[str, Any] = dict(model=body.model, messages=messages, tools=tools,
                                  tool_choice=_tool_choice(body.tool_choice), **generation)
    if body.tool_choice is not None and body.tool_choice.disable_parallel_tool_use:
        fields["parallel_tool_calls"] = False
    if isinstance(body.thinking, ThinkingEnabled):
        fields.update(reasoning_budget=body.thinking.budget_tokens, reasoning_format="auto",
                      chat_template_kwargs={"enable_thinking": True})
    elif isinstance(body.thinking, ThinkingDisabled):
        fields["reasoning_effort"] = "none"
    output = body.output_config
    if output is not None and output.effort is not None and "reasoning_effort" not in fields:
        fields["reasoning_effort"] = output.effort
    if output is not None and output.format is not None:
        fields["response_format"] = {"type": "json_schema", "json_schema": {"name": "output",
                                                                            "schema": output.format.schema_}}
    return ChatRequest(**fields)


def generating_chat_request(body: MessagesRequest) -> ChatRequest:
    """A ``/v1/messages`` body as the chat route's request (sampling, limits and the tenant included)."""
    sampling = {name: getattr(body, name) for name in SamplerFields.model_fields if getattr(body, name) is not None}
    user = body.metadata.user_id if body.metadata is not None else None
    return chat_request(body, max_tokens=body.max_tokens, stop=body.stop_sequences, stream=body.stream, user=user,
                        **sampling)


def message_id(chat_id: str) -> str:
    """The message id of a chat completion's id (``chatcmpl-x`` -> ``msg_x``): one id for every event."""
    return "msg_" + chat_id.removeprefix("chatcmpl-")


def stop_reason(finish_reason: str | None, stop_sequence: str | None) -> str:
    """Anthropic's ``stop_reason`` for the chat route's ``finish_reason``; ``stop_sequence`` the stop string that
    ended it, if one did."""
    if finish_reason == "tool_calls":
        return "tool_use"
    if finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if stop_sequence is not None else "end_turn"


def usage(n_prompt: int, facts: EngineFacts, n_output: int) -> dict[str, int]:
    """Anthropic's usage: of the prompt's tokens, those read from memory (a reused prefix, restored from the
    prompt cache or held by the sequence), those evaluated and written into the prompt cache at a
    ``cache_control`` breakpoint, and the rest; then the output."""
    return {"input_tokens": n_prompt - facts.n_cached - facts.n_cache_written,
            "cache_creation_input_tokens": facts.n_cache_written, "cache_read_input_tokens": facts.n_cached,
            "output_tokens": n_output}


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def message(chat: dict[str, Any], model: str, facts: EngineFacts) -> dict[str, Any]:
    """A whole chat completion (one choice) as Anthropic's message: thinking, text, then tool uses."""
    choice = chat["choices"][0]
    reply = choice["message"]
    content: list[dict[str, Any]] = []
    if reply.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": reply["reasoning_content"], "signature": ""})
    if reply.get("content"):
        content.append({"type": "text", "text": reply["content"]})
    for call in reply.get("tool_calls") or []:
        function = call["function"]
        content.append({"type": "tool_use", "id": call["id"], "name": function["name"],
                        "input": _tool_input(function["arguments"])})
    counts = chat["usage"]
    return {"id": message_id(chat["id"]), "type": "message", "role": "assistant", "content": content,
            "model": model, "stop_reason": stop_reason(choice["finish_reason"], facts.stop_string),
            "stop_sequence": facts.stop_string,
            "usage": usage(counts["prompt_tokens"], facts, counts["completion_tokens"])}


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error object (``{"type": "error", "error": {"type", "message"}}``).  It has no ``param``: the
    field an error is about leads its message, as in every error here."""
    kind = _ERROR_TYPES.get(400 if status == 422 else status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


class MessageStream:
    """A chat stream's chunks as Anthropic's events, ``(name, data)`` each: ``message_start`` and a ``ping`` first,
    then each content block opened, its deltas, closed when the next one opens (thinking, text, each tool use in
    turn), and at the end ``message_delta`` (stop reason, usage) and ``message_stop``."""

    def __init__(self, model: str, facts: Callable[[], EngineFacts]) -> None:
        self.model = model
        self.prompt = facts  # asked when the stream starts and when it ends (:meth:`.Served.engine_facts`)
        self.started = False
        self.index = -1
        self.open: str | None = None  # the type of the block that is open
        self.tools: dict[int, int] = {}  # tool call index -> block index
        self.finish: str | None = None

    def _start(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        self.started = True
        facts = self.prompt()
        start: dict[str, Any] = {"id": message_id(chunk["id"]), "type": "message", "role": "assistant", "content": [],
                 "model": self.model, "stop_reason": None, "stop_sequence": None,
                 "usage": usage(facts.n_prompt, facts, 0)}
        return [("message_start", {"type": "message_start", "message": start}), ("ping", {"type": "ping"})]

    def _close(self) -> list[tuple[str, dict[str, Any]]]:
        if self.open is None:
            return []
        events = []
        if self.open == "thinking":  # Anthropic's clients expect a signature before a thinking block ends
            events.append(self._delta({"type": "signature_delta", "signature": ""}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": self.index}))
        self.open = None
        return events

    def _open(self, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        events = self._close()
        self.index += 1
        self.open = block["type"]
        events.append(("content_block_start", {"type": "content_block_start", "index": self.index,
                                               "content_block": block}))
        return events

    def _delta(self, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}

    def events(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The events of one chat chunk (the last one carries ``usage``)."""
        events = [] if self.started else self._start(chunk)
        for choice in chunk.get("choices", []):
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                if self.open != "thinking":
                    events += self._open({"type": "thinking", "thinking": "", "signature": ""})
                events.append(self._delta({"type": "thinking_delta", "thinking": delta["reasoning_content"]}))
            if delta.get("content"):
                if self.open != "text":
                    events += self._open({"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": delta["content"]}))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                if call.get("index", 0) not in self.tools:
                    events += self._open({"type": "tool_use", "id": call.get("id", ""),
                                          "name": function.get("name", ""), "input": {}})
                    self.tools[call.get("index", 0)] = self.index
                if function.get("arguments"):
                    events.append(self._delta({"type": "input_json_delta", "partial_json": function["arguments"]}))
            if choice.get("finish_reason") is not None:
                self.finish = choice["finish_reason"]
        counts = chunk.get("usage")
        if counts is not None:
            events += self._close()
            facts = self.prompt()
            events.append(("message_delta", {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason(self.finish, facts.stop_string),
                          "stop_sequence": facts.stop_string},
                "usage": usage(counts["prompt_tokens"], facts, counts["completion_tokens"])}))
            events.append(("message_stop", {"type": "message_stop"}))
        return events


def error_shape(status: int, message: str, param: str | None, code: str | None) -> tuple[int, dict[str, Any]]:
    """An error at an Anthropic route: its status (a 422 of a malformed body is Anthropic's 400) and body."""
    return (400 if status == 422 else status), error_body(status, message)


_FORM = EventFormat(named_sse, lambda status, message, param, code: named_sse(("error", error_body(status, message))),
                    lambda: named_sse(("ping", {"type": "ping"})), None)


class MessagesView:
    """Anthropic's view of the chat route's answers, in its named events (no end marker: ``message_stop``
    ends a stream)."""

    form = _FORM

    def stream(self, served: Served) -> Callable[[Any], list[Any]]:
        return MessageStream(served.model, served.engine_facts).events

    def whole(self, answer: dict[str, Any], served: Served) -> dict[str, Any]:
        return message(answer, served.model, served.engine_facts())
