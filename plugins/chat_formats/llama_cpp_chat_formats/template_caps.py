"""What a chat template can render: llama.cpp's template capabilities (llama-server's ``chat_template_caps``).

llama.cpp runs the template on probe conversations and watches which values it reads (common/jinja/caps.cpp);
clients read the answer in ``/props`` (``supports_tools`` to know whether to offer tools at all).  Here the
same probe conversations are rendered and the output is read: a value the template renders shows in it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .template_sandbox import TemplateError

if TYPE_CHECKING:
    from .jinja import Jinja2ChatFormatter

_MARK = "caps-probe-7d21"
_TOOL_NAME = "caps_probe_tool"
_TOOLS = [{"type": "function", "function": {"name": _TOOL_NAME, "description": "Tool description", "parameters": {
    "type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}},
    "required": ["arg"]}}}]
_USER = {"role": "user", "content": "User message"}


def _rendered(formatter: Jinja2ChatFormatter, messages: list[dict[str, Any]], **variables: Any) -> str | None:
    try:
        return formatter.render(messages, add_generation_prompt=True, **variables)
    except TemplateError:
        return None


def _calling(calls: list[tuple[str, str]], objects: bool) -> list[dict[str, Any]]:
    """llama.cpp's probe of tool calls: a turn that makes ``calls`` (id, the argument's value), the tool's
    answer and a user message after it."""
    made = [{"id": id_, "type": "function", "function": {
        "name": _TOOL_NAME, "arguments": {"arg": value} if objects else json.dumps({"arg": value})}}
        for id_, value in calls]
    return [_USER, {"role": "assistant", "content": "", "tool_calls": made},
            {"role": "tool", "content": "Tool response", "tool_call_id": calls[0][0]},
            {"role": "assistant", "content": "The tool response was 'tool response'"}, _USER]


def template_caps(formatter: Jinja2ChatFormatter) -> dict[str, bool]:
    """llama.cpp's capabilities of ``formatter``'s template, under its names (in its order: by name)."""
    typed = formatter.takes_content_parts()
    plain = _rendered(formatter, [{"role": "user", "content": _MARK}])
    objects = formatter.takes_object_arguments()
    one = _rendered(formatter, _calling([("call00001", _MARK)], objects), tools=_TOOLS)
    two = _rendered(formatter, _calling([("call00001", "first"), ("call00002", _MARK)], objects), tools=_TOOLS)
    offered = _rendered(formatter, [_USER], tools=_TOOLS)
    thinking = {"enable_thinking": True}
    history = [_USER, {"role": "assistant", "content": "Assistant message", "reasoning_content": _MARK}, _USER,
               {"role": "assistant", "content": "Assistant message", "reasoning_content": "Reasoning content"}, _USER]
    kept = _rendered(formatter, history, preserve_thinking=True, clear_thinking=False,
                     truncate_history_thinking=False, drop_thinking=False, **thinking)
    # (a template may test for one level alone: DeepSeek V4's "max", Cohere2 MoE's "none")
    efforts = {_rendered(formatter, [_USER], reasoning_effort=effort, reasoning_strength=effort, **thinking)
               for effort in ("none", "low", "medium", "high", "max", _MARK)}
    caps = {
        "supports_string_content": plain is not None and (_MARK in plain or not typed),
        "supports_typed_content": typed,
        "supports_tools": offered is not None and _TOOL_NAME in offered,
        "supports_tool_calls": one is not None and _MARK in one,
        "supports_parallel_tool_calls": two is not None and _MARK in two,
        "supports_system_role": formatter.takes_system_role(),
        "supports_preserve_reasoning": kept is not None and _MARK in kept,
        "supports_reasoning_effort": len(efforts) > 1,
        "supports_object_arguments": objects,
    }
    return dict(sorted(caps.items()))


__all__ = ["template_caps"]
