"""Rendering chat templates (Jinja) from GGUF files: llama-cpp-python's ``Jinja2ChatFormatter``.

Templates render in :mod:`.template_sandbox` (they are untrusted code) and are compiled on first use,
so one unusual template never breaks loading a model.  Before a template sees the messages, they are put
in the forms it renders, as llama.cpp puts them (:meth:`Jinja2ChatFormatter.template_messages`).
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Iterator

import jinja2
from llama_cpp.chat_messages import content_text
from llama_cpp.llama_chat_format import ChatFormatterResponse

from . import family_messages
from .handler import formatter_handler
from .template_caps import template_caps
from .template_sandbox import ENVIRONMENT, TemplateError, rendering

__all__ = ["Jinja2ChatFormatter", "TemplateError"]

# the text that shows, in a probe's rendering, whether a template rendered a value in the form it was given
_PROBE = "template-probe-5f0c"


def _with_object_arguments(call: dict[str, Any], where: str) -> dict[str, Any]:
    """``call`` with its JSON-string arguments parsed, for a template that renders them as an object."""
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    arguments = fn["arguments"]
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise TemplateError(f"{where}.function.arguments must be a JSON object for this chat template, which "
                            f"renders the arguments as an object; got {arguments!r:.80}")
    return {**call, "function": {**fn, "arguments": parsed}}


class _AccessedList(list[Any]):
    """An empty list of content parts that remembers whether a template went through it or indexed it."""

    accessed = False

    def __iter__(self) -> Iterator[Any]:
        self.accessed = True
        return super().__iter__()

    def __getitem__(self, index: Any) -> Any:
        self.accessed = True
        return super().__getitem__(index)


def _system_merged(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` without their leading system message, whose text goes in front of the next message's
    (a newline between, as llama.cpp joins them); alone, it is dropped."""
    system, rest = messages[0], messages[1:]
    if not rest:
        return []
    text = system.get("content")
    text = content_text(text) if isinstance(text, list) else str(text or "")
    first = rest[0]
    content = first.get("content")
    if isinstance(content, list):  # a template that renders the parts itself gets the text as one more part
        merged: Any = [{"type": "text", "text": text}, *content]
    else:
        merged = f"{text}\n{content or ''}"
    return [{**first, "content": merged}, *rest[1:]]


class Jinja2ChatFormatter:
    """Renders messages with a Jinja chat template (llama-cpp-python's ``Jinja2ChatFormatter``)."""

    def __init__(self, template: str, eos_token: str, bos_token: str, add_generation_prompt: bool = True,
                 stop_token_ids: list[int] | None = None, special_tokens_map: dict[str, str] | None = None) -> None:
        self.template = template
        self.eos_token = eos_token
        self.bos_token = bos_token
        self.add_generation_prompt = add_generation_prompt
        self.stop_token_ids = list(stop_token_ids or [])
        self.special_tokens_map = dict(special_tokens_map or {})
        self._compiled: jinja2.Template | None = None
        self._takes_parts: bool | None = None
        self._takes_objects: bool | None = None
        self._takes_system: bool | None = None
        self._caps: dict[str, bool] | None = None

    def _template(self) -> jinja2.Template:
        if self._compiled is None:
            try:
                self._compiled = ENVIRONMENT.from_string(self.template)
            except jinja2.TemplateError as exc:
                raise TemplateError(f"the chat template does not compile: {exc}") from exc
        return self._compiled

    def render(self, messages: list[dict[str, Any]], **variables: Any) -> str:
        now = datetime.datetime.now()
        context = {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y"),  # as llama.cpp
                   **self.special_tokens_map, "eos_token": self.eos_token, "bos_token": self.bos_token, **variables}
        variables = {"messages": messages, **context}
        try:
            with rendering(variables):
                return self._template().render(**variables)
        except jinja2.exceptions.SecurityError as exc:
            raise TemplateError(f"the chat template was refused: it tried to reach Python internals or to change "
                                f"the values it was given ({exc})") from exc
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the chat template failed: {exc}") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            raise TemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from exc
        except RecursionError as exc:
            raise TemplateError("the chat template failed: it nests macro calls or blocks too deeply") from exc

    def _probe(self, messages: list[dict[str, Any]], **variables: Any) -> str:
        """The template's rendering of a probe conversation, or "" where it refuses or fails on it."""
        try:
            return self.render(messages, add_generation_prompt=True, **variables)
        except TemplateError:
            return ""

    def takes_content_parts(self) -> bool:
        """Whether the template renders a list of text parts itself (Gemma 4's and Granite 4's iterate them);
        one that does not (SmolLM2's adds the content to a string) gets the parts' text as one string.
        llama.cpp asks each template the same (``supports_typed_content``, common/jinja/caps.cpp), and
        counts it only if the template goes through an empty list too.  Asked once, when a list first
        comes."""
        if self._takes_parts is None:
            out = self._probe([{"role": "user", "content": [{"type": "text", "text": _PROBE}]}])
            # a template that prints the list itself (``{{ message.content }}``) shows the part's keys
            renders = _PROBE in out and "'type'" not in out and '"type"' not in out
            # llama.cpp counts a template as taking parts only if it goes through an empty list of them: one
            # that tests the content's truth first (LFM2.5's, Ministral 3's) gets the parts joined by newlines
            empty = _AccessedList()
            self._takes_parts = renders and self._probe([{"role": "user", "content": empty}]) != "" and empty.accessed
        return self._takes_parts

    def takes_object_arguments(self) -> bool:
        """Whether the template renders a tool call's arguments as an object (Qwen3-Coder's iterates their
        items, Llama 3.1's writes them with ``tojson``); one that does gets OpenAI's JSON string parsed, as
        llama.cpp does for such templates (``supports_object_arguments``, ``func_args_not_string``).
        Asked once, when a tool call first comes."""
        if self._takes_objects is None:
            arguments = {"arg": _PROBE}
            call = {"id": "call00001", "type": "function", "function": {"name": "tool1", "arguments": arguments}}
            tool = {"type": "function", "function": {"name": "tool1", "description": "Tool description", "parameters": {
                "type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}
            out = self._probe([
                {"role": "user", "content": "User message"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
                {"role": "assistant", "content": "The tool response was 'tool response'"},
                {"role": "user", "content": "User message"},
            ], tools=[tool])
            # printed as Python's repr, the object was not what the template wanted (a repr elsewhere in the
            # prompt, of the tool's parameters, says nothing about the call)
            self._takes_objects = _PROBE in out and repr(arguments) not in out
        return self._takes_objects

    def takes_system_role(self) -> bool:
        """Whether the template renders a system message (Gemma 2's refuses one, others drop it); one that
        does not gets the system message's text in front of the next message's, as llama.cpp does for
        such templates (``supports_system_role``, ``system_message_not_supported``).  Asked once, when a
        system message first comes."""
        if self._takes_system is None:
            out = self._probe([{"role": "system", "content": _PROBE}, {"role": "user", "content": "User message"}])
            self._takes_system = _PROBE in out
        return self._takes_system

    def capabilities(self) -> dict[str, bool]:
        """llama.cpp's capabilities of the template (llama-server's ``chat_template_caps``:
        ``supports_tools``, ``supports_system_role``...; :mod:`.template_caps`), found once."""
        if self._caps is None:
            self._caps = template_caps(self)
        return dict(self._caps)

    def template_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` in the forms this template renders: lists of text parts as their text where it takes
        strings (:meth:`takes_content_parts`), tool-call arguments as objects where it takes objects
        (:meth:`takes_object_arguments`; arguments that are not a JSON object are a ValueError naming the
        call), a leading system message merged into the next message where it renders none
        (:meth:`takes_system_role`), then as llama.cpp's handler of the template's family hands them over
        (:mod:`.family_messages`).  Unchanged where none applies."""
        flatten = any(isinstance(m.get("content"), list) for m in messages) and not self.takes_content_parts()
        objects = any(m.get("tool_calls") for m in messages) and self.takes_object_arguments()
        merge = bool(messages) and messages[0].get("role") == "system" and not self.takes_system_role()
        if not (flatten or objects or merge):
            return family_messages.adapted(self.template, messages)
        out = []
        for i, message in enumerate(messages):
            if flatten and isinstance(message.get("content"), list):
                message = {**message, "content": content_text(message["content"])}
            if objects and message.get("tool_calls"):
                message = {**message, "tool_calls": [_with_object_arguments(call, f"messages[{i}].tool_calls[{k}]")
                                                     for k, call in enumerate(message["tool_calls"])]}
            out.append(message)
        return family_messages.adapted(self.template, _system_merged(out) if merge else out)

    def __call__(self, *, messages: list[dict[str, Any]], functions: Any = None, function_call: Any = None,
                 tools: Any = None, tool_choice: Any = None, add_generation_prompt: bool | None = None,
                 **kwargs: Any) -> ChatFormatterResponse:
        """Render; extra keywords become template variables (``enable_thinking``, ``documents``...).

        Variables that are None are left undefined, as transformers does:
        templates test ``tools is defined`` and then iterate.  Content parts and tool-call arguments reach
        the template in the form it renders (:meth:`template_messages`).
        """
        messages = self.template_messages(messages)
        variables = {"functions": functions, "function_call": function_call, "tools": tools,
                     "tool_choice": tool_choice, **kwargs}
        prompt = self.render(
            messages, add_generation_prompt=self.add_generation_prompt if add_generation_prompt is None
            else add_generation_prompt, **{k: v for k, v in variables.items() if v is not None},
        )
        return ChatFormatterResponse(prompt=prompt, stop=[self.eos_token] if self.eos_token else None,
                                     added_special=bool(self.bos_token) and prompt.startswith(self.bos_token))

    def to_chat_handler(self) -> Any:
        """A chat handler that renders with this formatter (llama-cpp-python's method): structured output,
        tools and streaming as for the named formats."""
        return formatter_handler(self)
