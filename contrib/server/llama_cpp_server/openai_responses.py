"""OpenAI's Responses API (``POST /v1/responses``) on the chat route's engine path, with stored conversations.

Codex, the openai SDK's ``client.responses`` and openai-agents' default model send ``input`` items (messages with
content parts, ``function_call``, ``function_call_output``, ``reasoning``) beside ``instructions``, function tools,
``text.format`` and ``reasoning``.  A body is normalized once into the server's chat request (:func:`chat_request`),
so sampling, tools, grammars, reasoning, media, limits and cancellation are the chat route's own; the answer is
shaped back into a response object (:meth:`ResponsesView.whole`) or the stream of typed events
(:class:`ResponseStream`).  With ``store`` (the default, as OpenAI's) the response is kept
(:mod:`.response_store`): ``previous_response_id`` continues its conversation, whose rendered prompt the engine
still holds as a prefix (or restores from the prompt cache), so only the new input is evaluated.  llama-server's
conversion is the reference for how items become chat messages; docs/server.md says where this differs from it.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, Callable, Literal, Union

from llama_cpp.engine.policy import MAX_TENANT_LENGTH
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from .bridge import LLAMA_SERVER, EventFormat, Served, named_sse
from .errors import APIError, error_body
from .response_store import ResponseStore, StoredResponse
from .schemas import ChatRequest, SamplerFields


class _Part(BaseModel):
    # the fields of a part or item this server has no use for (``annotations``, ``status``...) are ignored: the
    # SDK sends back the items it received, with the fields its version knows; the body's own fields are checked
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class InputText(_Part):
    type: Literal["input_text"]
    text: str


class InputImage(_Part):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] | None = None


class InputFile(_Part):
    type: Literal["input_file"]


class OutputText(_Part):
    type: Literal["output_text"]
    text: str


class Refusal(_Part):
    type: Literal["refusal"]
    refusal: str


Part = Annotated[Union[InputText, InputImage, InputFile, OutputText, Refusal], Field(discriminator="type")]


class MessageItem(_Part):
    """A message; ``type`` may be left out (the SDK's easy input message)."""

    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: Union[str, list[Part]]
    id: str | None = None


class FunctionCallItem(_Part):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None


class FunctionCallOutputItem(_Part):
    type: Literal["function_call_output"]
    call_id: str
    output: Union[str, list[Annotated[Union[InputText, InputImage, InputFile], Field(discriminator="type")]]]
    id: str | None = None


class SummaryText(_Part):
    type: Literal["summary_text"]
    text: str


class ReasoningText(_Part):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Part):
    type: Literal["reasoning"]
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    id: str | None = None


_ITEM_KINDS = ("message", "function_call", "function_call_output", "reasoning")


class OtherItem(_Part):
    """An item kind whose tool runs at OpenAI (web search, computer use, MCP...) or that names a stored item:
    refused, naming its type."""

    type: str = Field(json_schema_extra={"not": {"enum": list(_ITEM_KINDS)}})  # the schema's oneOf: one match


def _item_kind(value: Any) -> str:
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", None) or "message"
    return kind if kind in _ITEM_KINDS else "other"


Item = Annotated[Union[Annotated[MessageItem, Tag("message")], Annotated[FunctionCallItem, Tag("function_call")],
                       Annotated[FunctionCallOutputItem, Tag("function_call_output")],
                       Annotated[ReasoningItem, Tag("reasoning")], Annotated[OtherItem, Tag("other")]],
                 Discriminator(_item_kind)]


class FunctionTool(_Part):
    type: str  # "function"; any other kind is refused by name (:func:`_tools`)
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionChoice(_Part):
    type: Literal["function"]
    name: str


class TextFormat(_Part):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Part):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_Part):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class _Body(BaseModel):
    """An unknown top-level field is refused (a typo never becomes a silently ignored setting)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, protected_namespaces=())

    model: str | None = None
    input: Union[str, list[Item]] = ""
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Union[Literal["auto", "none", "required"], FunctionChoice, None] = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None


class ResponsesRequest(_Body, SamplerFields):
    """The body of ``POST /v1/responses``; beside OpenAI's fields, every sampler parameter of the core
    (``top_k``, ``min_p``, ``grammar``..., sent in the SDK's ``extra_body``), as on the chat route."""

    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool = False
    store: bool = True
    metadata: dict[str, str] | None = None
    user: str | None = Field(None, max_length=MAX_TENANT_LENGTH)
    safety_identifier: str | None = Field(None, max_length=MAX_TENANT_LENGTH)
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    background: bool | None = None
    # what changes nothing on a local model: accepted, as the chat route accepts ``service_tier``
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    stream_options: dict[str, Any] | None = None


class InputTokensRequest(_Body):
    """The body of ``POST /v1/responses/input_tokens``."""


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _parts(parts: list[Any], where: str) -> list[dict[str, Any]] | str:
    """Content parts as the chat route's: text joins into a string when it is all there is (templates render
    strings), images stay parts."""
    chat: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        if isinstance(part, (InputText, OutputText)):
            chat.append({"type": "text", "text": part.text})
        elif isinstance(part, Refusal):
            chat.append({"type": "text", "text": part.refusal})
        elif isinstance(part, InputImage):
            if part.image_url is None:
                raise APIError(400, f"{where}[{i}].image_url: required (a file_id names an OpenAI file, which "
                               "this server does not have)", param=f"{where}[{i}].image_url")
            chat.append({"type": "image_url", "image_url": {"url": part.image_url}})
        else:
            raise APIError(400, f"{where}[{i}]: input_file parts are not supported here (send the text, or an "
                           "image as input_image)", param=f"{where}[{i}]")
    if all(p["type"] == "text" for p in chat):
        return "".join(p["text"] for p in chat)
    return chat


def input_messages(items: str | list[Any]) -> list[dict[str, Any]]:
    """The input as chat messages.  As llama-server merges them, an assistant's items in a row (its reasoning,
    message and function calls) are one assistant message; a function call's output is a tool message."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        last = messages[-1] if messages and messages[-1]["role"] == "assistant" else None
        if isinstance(item, MessageItem):
            content = item.content if isinstance(item.content, str) else _parts(item.content, f"{where}.content")
            role = "system" if item.role == "developer" else item.role
            if role == "assistant" and last is not None and not last.get("content"):
                last["content"] = content
            else:
                messages.append({"role": role, "content": content})
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            if last is not None:
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            output = item.output if isinstance(item.output, str) else _parts(item.output, f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
        elif isinstance(item, ReasoningItem):
            text = "".join(part.text for part in item.content or []) or "".join(s.text for s in item.summary)
            if last is not None and not last.get("content") and not last.get("tool_calls"):
                last["reasoning_content"] = text
            else:
                messages.append({"role": "assistant", "content": "", "reasoning_content": text})
        else:
            assert isinstance(item, OtherItem)
            raise APIError(400, f"{where}.type: {item.type!r} items are not supported here (messages, "
                           "function_call, function_call_output and reasoning are; continue a stored response "
                           "with previous_response_id)", param=f"{where}.type")
    return messages


def _tools(tools: list[FunctionTool] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.type != "function":
            raise APIError(400, f"tools[{i}].type: {tool.type!r} tools run at OpenAI; only function tools are "
                           "supported here", param=f"tools[{i}].type")
        if not tool.name:
            raise APIError(400, f"tools[{i}].name: required", param=f"tools[{i}].name")
        function: dict[str, Any] = {"name": tool.name, "description": tool.description or "",
                                    "parameters": tool.parameters or {"type": "object", "properties": {}}}
        out.append({"type": "function", "function": function})
    return out


def _response_format(text: TextConfig | None) -> dict[str, Any] | None:
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.schema_ is None:
        raise APIError(400, "text.format.schema: required with type 'json_schema'", param="text.format.schema")
    return {"type": "json_schema", "json_schema": {"name": fmt.name or "output", "schema": fmt.schema_}}


def chat_request(body: _Body, history: list[dict[str, Any]], **generation: Any) -> ChatRequest:
    """``body`` (after the conversation ``history``, a stored response's) as the chat route's request;
    ``generation`` adds the chat fields of a generating request."""
    messages = [{"role": "system", "content": body.instructions}] if body.instructions is not None else []
    messages += history + input_messages(body.input)
    if not messages:
        raise APIError(400, "input: required (a text, or a list of items)", param="input")
    choice = body.tool_choice
    fields: dict[str, Any] = dict(
        model=body.model, messages=messages, tools=_tools(body.tools),
        tool_choice={"type": "function", "function": {"name": choice.name}} if isinstance(choice, FunctionChoice)
        else choice, parallel_tool_calls=body.parallel_tool_calls, response_format=_response_format(body.text),
        **generation)
    effort = body.reasoning.effort if body.reasoning is not None else None
    if effort is not None:
        fields["reasoning_effort"] = effort
        fields["reasoning_format"] = "auto"
    return ChatRequest(**fields)


def generating_chat_request(body: ResponsesRequest, history: list[dict[str, Any]]) -> ChatRequest:
    """A ``/v1/responses`` body as the chat route's request."""
    if body.background:
        raise APIError(400, "background: responses run while the request waits here (leave it false)",
                       param="background")
    sampling = {name: getattr(body, name) for name in SamplerFields.model_fields if getattr(body, name) is not None}
    logprobs = {"logprobs": True, "top_logprobs": body.top_logprobs} if body.top_logprobs else {}
    return chat_request(body, history, max_tokens=body.max_output_tokens, stream=body.stream,
                        user=body.user or body.safety_identifier, **sampling, **logprobs)


class ResponseShape:
    """One response's object: the request's settings echoed, its output items, its status and usage."""

    def __init__(self, body: ResponsesRequest, model: str, response_id: str) -> None:
        self.body = body
        self.id = response_id
        self.created = int(time.time())
        self.model = model

    def snapshot(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None,
                 incomplete: bool = False) -> dict[str, Any]:
        body = self.body
        reasoning = body.reasoning
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "completed_at": int(time.time()) if status in ("completed", "incomplete") else None,
            "error": None, "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.instructions, "max_output_tokens": body.max_output_tokens, "model": self.model,
            "output": output, "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": body.previous_response_id,
            "reasoning": {"effort": reasoning.effort if reasoning else None,
                          "summary": reasoning.summary if reasoning else None},
            "store": body.store, "temperature": body.temperature,
            "text": {"format": (body.text.format.model_dump(by_alias=True, exclude_none=True)
                                if body.text is not None and body.text.format is not None else {"type": "text"})},
            "tool_choice": (body.tool_choice.model_dump() if isinstance(body.tool_choice, FunctionChoice)
                            else body.tool_choice or "auto"),
            "tools": [t.model_dump(exclude_none=True) for t in body.tools or []], "top_p": body.top_p,
            "truncation": body.truncation or "disabled", "usage": usage, "user": body.user,
            "metadata": body.metadata or {},
        }


def usage(n_prompt: int, n_cached: int, n_output: int, n_reasoning: int) -> dict[str, Any]:
    """The Responses API's usage: the input counts its tokens read from memory (a reused prefix) as cached."""
    return {"input_tokens": n_prompt, "input_tokens_details": {"cached_tokens": n_cached, "cache_write_tokens": 0},
            "output_tokens": n_output, "output_tokens_details": {"reasoning_tokens": n_reasoning},
            "total_tokens": n_prompt + n_output}


def _reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id, "summary": [],
            "content": [{"type": "reasoning_text", "text": text}] if text or status == "completed" else [],
            "status": status}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [_text_part(text)] if text is not None else []}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def _last_item_status(finish_reason: str | None) -> str:
    """The status of a response's last output item: ``incomplete`` where the token limit cut it (a call's
    arguments may then be cut JSON), as the API marks such items."""
    return "incomplete" if finish_reason == "length" else "completed"


def _reply_message(output: list[dict[str, Any]]) -> dict[str, Any]:
    """The response's output as the conversation's assistant message (what a continuation renders)."""
    reply: dict[str, Any] = {"role": "assistant", "content": ""}
    for item in output:
        if item["type"] == "reasoning":
            reply["reasoning_content"] = "".join(part["text"] for part in item["content"])
        elif item["type"] == "message":
            reply["content"] = "".join(part["text"] for part in item["content"])
        elif item["type"] == "function_call":
            reply.setdefault("tool_calls", []).append({"id": item["call_id"], "type": "function", "function": {
                "name": item["name"], "arguments": item["arguments"]}})
    return reply


def _input_items(items: str | list[Any]) -> list[dict[str, Any]]:
    """The request's input as items with ids (``GET /v1/responses/{id}/input_items``)."""
    items_out: list[dict[str, Any]]
    if isinstance(items, str):
        items_out = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": items}]}]
    else:
        items_out = [item.model_dump(exclude_none=True, by_alias=True) for item in items]
    prefixes = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
    for item in items_out:
        item.setdefault("type", "message")
        item.setdefault("id", _new_id(prefixes.get(item["type"], "item")))
        if item["type"] == "message" and isinstance(item.get("content"), str):
            kind = "output_text" if item["role"] == "assistant" else "input_text"
            item["content"] = [{"type": kind, "text": item["content"]}]
    return items_out


class ResponsesView:
    """The Responses API's view of one request's chat answer, which it also keeps (``body.store``) in ``store``
    for ``tenant``, with the conversation its chat request's ``messages`` hold."""

    # an error after the stream started is the API's error event (code, message, param), which clients read as
    # an event of the stream, as OpenAI sends it
    form = EventFormat(named_sse, lambda status, message, param, code: named_sse(("error", {
        "type": "error", "code": code or error_body(status, message)["error"]["type"], "message": message,
        "param": param, "sequence_number": 0})), LLAMA_SERVER.ping, None)

    def __init__(self, body: ResponsesRequest, store: ResponseStore, tenant: str,
                 messages: list[dict[str, Any]]) -> None:
        self.body = body
        self.store = store
        self.tenant = tenant
        self.messages = messages  # the chat request's, instructions first when given

    def usage(self, served: Served, counts: dict[str, int], output: list[dict[str, Any]]) -> dict[str, Any]:
        n_cached = served.engine_facts().n_cached
        reasoning = "".join(part["text"] for item in output if item["type"] == "reasoning" for part in item["content"])
        n_reasoning = len(served.llama.tokenize(reasoning.encode("utf-8"), add_bos=False)) if reasoning else 0
        return usage(counts["prompt_tokens"], n_cached, counts["completion_tokens"], n_reasoning)

    def finish(self, shape: ResponseShape, output: list[dict[str, Any]], served: Served, counts: dict[str, int],
               finish_reason: str | None) -> dict[str, Any]:
        """The final response object, stored when asked."""
        incomplete = finish_reason == "length"
        response = shape.snapshot("incomplete" if incomplete else "completed", output,
                                  self.usage(served, counts, output), incomplete)
        if self.body.store:
            conversation = self.messages[1:] if self.body.instructions is not None else list(self.messages)
            self.store.put(StoredResponse(shape.id, self.tenant, response, _input_items(self.body.input),
                                          [*conversation, _reply_message(output)]))
        return response

    def whole(self, answer: dict[str, Any], served: Served) -> dict[str, Any]:
        shape = ResponseShape(self.body, served.model, self.store.new_id())
        choice = answer["choices"][0]
        reply = choice["message"]
        output = []
        if reply.get("reasoning_content"):
            output.append(_reasoning_item(_new_id("rs"), reply["reasoning_content"], "completed"))
        if reply.get("content"):
            output.append(_message_item(_new_id("msg"), reply["content"], "completed"))
        for call in reply.get("tool_calls") or []:
            output.append(_call_item(_new_id("fc"), call["id"], call["function"]["name"],
                                     call["function"]["arguments"], "completed"))
        if output:
            output[-1]["status"] = _last_item_status(choice["finish_reason"])
        return self.finish(shape, output, served, answer["usage"], choice["finish_reason"])

    def stream(self, served: Served) -> Callable[[Any], list[Any]]:
        return ResponseStream(self, ResponseShape(self.body, served.model, self.store.new_id()), served).events


class ResponseStream:
    """A chat stream's chunks as the Responses API's events, ``(type, data)`` each, numbered: ``response.created``
    and ``response.in_progress`` first; per output item (reasoning, the message, each function call, in the order
    they come) ``response.output_item.added``, its content part, its deltas, and when the next one opens its
    ``.done`` events; at the end ``response.completed`` (``response.incomplete`` at the token limit) with the
    whole response."""

    def __init__(self, view: ResponsesView, shape: ResponseShape, served: Served) -> None:
        self.view = view
        self.shape = shape
        self.served = served
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the item being written
        self.tools: dict[int, dict[str, Any]] = {}  # tool call index -> its item
        self.finish_reason: str | None = None
        self.started = False

    def _event(self, kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return kind, event

    def _where(self) -> dict[str, Any]:
        assert self.open is not None
        return {"item_id": self.open["id"], "output_index": len(self.output) - 1}

    def _close(self, status: str = "completed") -> list[tuple[str, dict[str, Any]]]:
        """The open item's ``.done`` events, with ``status`` (``incomplete``: the token limit cut it)."""
        item, events = self.open, list[tuple[str, dict[str, Any]]]()
        if item is None:
            return events
        where = self._where()
        if item["type"] == "reasoning":
            text = item["content"][0]["text"]
            events += [self._event("response.reasoning_text.done", **where, content_index=0, text=text),
                       self._event("response.content_part.done", **where, content_index=0,
                                   part={"type": "reasoning_text", "text": text})]
        elif item["type"] == "message":
            part = item["content"][0]
            events += [self._event("response.output_text.done", **where, content_index=0, text=part["text"],
                                   logprobs=[]),
                       self._event("response.content_part.done", **where, content_index=0, part=dict(part))]
        else:
            events.append(self._event("response.function_call_arguments.done", **where,
                                      arguments=item["arguments"], name=item["name"]))
        item["status"] = status
        events.append(self._event("response.output_item.done", output_index=where["output_index"],
                                  item=json.loads(json.dumps(item))))
        self.open = None
        return events

    def _add(self, item: dict[str, Any], part: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
        events = self._close()
        self.output.append(item)
        self.open = item
        events.append(self._event("response.output_item.added", output_index=len(self.output) - 1,
                                  item=json.loads(json.dumps(item))))
        if part is not None:
            item["content"].append(part)
            events.append(self._event("response.content_part.added", **self._where(), content_index=0,
                                      part=dict(part)))
        return events

    def events(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The events of one chat chunk (the last one carries ``usage``)."""
        events: list[tuple[str, dict[str, Any]]] = []
        if not self.started:
            self.started = True
            snapshot = self.shape.snapshot("in_progress", [])
            events += [self._event("response.created", response=snapshot),
                       self._event("response.in_progress", response=snapshot)]
        for choice in chunk.get("choices", []):
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                if self.open is None or self.open["type"] != "reasoning":
                    events += self._add(_reasoning_item(_new_id("rs"), "", "in_progress"),
                                        {"type": "reasoning_text", "text": ""})
                assert self.open is not None
                self.open["content"][0]["text"] += delta["reasoning_content"]
                events.append(self._event("response.reasoning_text.delta", **self._where(), content_index=0,
                                          delta=delta["reasoning_content"]))
            if delta.get("content"):
                if self.open is None or self.open["type"] != "message":
                    events += self._add(_message_item(_new_id("msg"), None, "in_progress"), _text_part(""))
                assert self.open is not None
                self.open["content"][0]["text"] += delta["content"]
                events.append(self._event("response.output_text.delta", **self._where(), content_index=0,
                                          delta=delta["content"], logprobs=[]))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                index = call.get("index", 0)
                if index not in self.tools:
                    item = _call_item(_new_id("fc"), call.get("id", ""), function.get("name", ""), "",
                                      "in_progress")
                    events += self._add(item, None)
                    self.tools[index] = item
                if function.get("arguments"):
                    self.tools[index]["arguments"] += function["arguments"]
                    events.append(self._event("response.function_call_arguments.delta", **self._where(),
                                              delta=function["arguments"]))
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
        counts = chunk.get("usage")
        if counts is not None:
            events += self._close(_last_item_status(self.finish_reason))
            response = self.view.finish(self.shape, self.output, self.served, counts, self.finish_reason)
            kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
            events.append(self._event(kind, response=response))
        return events


def input_items_page(record: StoredResponse, limit: int, order: str, after: str | None,
                     before: str | None = None) -> dict[str, Any]:
    """``GET /v1/responses/{id}/input_items``: a page of the stored request's input items (``order`` ``desc``,
    the API's default, lists the last first).  The cursors are item ids: ``after`` starts the page after
    one, ``before`` ends it before one (alone, it gives the ``limit`` items just before it: the previous
    page); ``has_more`` says whether items between the cursors are left off the page."""
    items = list(record.input_items) if order == "asc" else list(reversed(record.input_items))
    ids = [item["id"] for item in items]

    def position(cursor: str, name: str) -> int:
        if cursor not in ids:
            raise APIError(404, f"{name}: no input item {cursor!r} in response {record.id!r}", param=name)
        return ids.index(cursor)

    start = position(after, "after") + 1 if after is not None else 0
    end = position(before, "before") if before is not None else len(items)
    between = items[start:end]
    page = between[-limit:] if before is not None and after is None else between[:limit]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(between) > limit}
