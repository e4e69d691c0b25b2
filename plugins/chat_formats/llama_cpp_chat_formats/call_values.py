"""What every tool-call reader shares: the offered tools, the OpenAI shape of a call, and reading values.

A model writes its calls' arguments either as JSON or tag by tag as text (``<arg_value>2</arg_value>``).  A
tagged value is read by the offered tool's parameter schema, as llama.cpp's parsers read it: a parameter the
schema types as a string keeps its text (``"007"`` stays a string); any other is read as JSON where it is
JSON, and kept as text where it is not.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Callable

import attrs


def tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    return [t["function"]["name"] for t in tools or () if isinstance(t, dict) and "function" in t]


class OfferedTools:
    """The tools a request offered: ``name in offered``, and each parameter's schema type."""

    def __init__(self, tools: list[dict[str, Any]] | None) -> None:
        self._properties: dict[str, dict[str, Any]] = {}
        for tool in tools or ():
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                params = fn.get("parameters")
                props = params.get("properties") if isinstance(params, dict) else None
                self._properties[fn["name"]] = props if isinstance(props, dict) else {}

    def __contains__(self, name: object) -> bool:
        return name in self._properties

    def __bool__(self) -> bool:
        return bool(self._properties)

    def argument(self, tool: str, parameter: str, text: str) -> Any:
        """A tagged argument's value: its text where the schema says string, else its JSON value if it has one."""
        schema = self._properties.get(tool, {}).get(parameter)
        kind = schema.get("type") if isinstance(schema, dict) else None
        if kind == "string" or (isinstance(kind, list) and kind and all(k in ("string", "null") for k in kind)
                                and text != "null"):
            return text
        return scalar(text)


#: what a reader gives: the text before the calls (the reply's content) and the calls
Parsed = tuple[str, list[dict[str, Any]]]


@attrs.frozen
class ToolCallStyle:
    """One way models write tool calls: ``parse(text, offered)`` gives the text before the calls and the calls
    of offered tools, or None where the reply holds none in this style; ``opens``, the texts that begin such a
    call (a stream holds the reply back from the first); ``tokens``, its markers' texts, kept in a reply while
    tools are offered where they are control tokens (as llama-server keeps its formats' preserved tokens)."""

    name: str
    parse: Callable[[str, OfferedTools], Parsed | None]
    opens: tuple[str, ...]
    tokens: tuple[str, ...] = ()


def make_tool_call(name: str, arguments: Any) -> dict[str, Any]:
    """An OpenAI tool_calls entry (arguments as a JSON string, as OpenAI sends them)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": name, "arguments": args}}


def json_values(text: str) -> list[tuple[Any, int, int]]:
    """Every JSON value that starts at a '{' or '[' in ``text``: (value, start, end)."""
    decoder = json.JSONDecoder()
    found, i = [], 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = decoder.raw_decode(text, i)
                found.append((value, i, end))
                i = end
                continue
            except json.JSONDecodeError:
                pass
        i += 1
    return found


def scalar(text: str) -> Any:
    """``text``'s JSON value where it is JSON, else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def named_call(obj: Any, offered: OfferedTools, keyed: bool = False) -> dict[str, Any] | None:
    """A call for an offered tool from one JSON object, in the shapes models write it: ``{"name": N,
    "arguments"|"parameters": {...}}``, Cohere's ``{"tool_name": N, "parameters": {...}}``, and with ``keyed``
    (inside a syntax's own markers only) Apertus's ``{N: {...}}``."""
    if not isinstance(obj, dict):
        return None
    name = obj.get("name", obj.get("tool_name"))
    if isinstance(name, str) and name in offered:
        args = obj.get("arguments", obj.get("parameters", {}))
        return make_tool_call(name, args if args is not None else {})
    if keyed and len(obj) == 1:
        (name, args), = obj.items()
        if name in offered and isinstance(args, dict):
            return make_tool_call(name, args)
    return None


__all__ = ["OfferedTools", "Parsed", "ToolCallStyle", "json_values", "make_tool_call", "named_call", "scalar",
           "tool_names"]
