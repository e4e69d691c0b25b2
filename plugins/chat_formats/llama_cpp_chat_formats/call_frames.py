"""The frames a forced tool call is written in: the text around a call's tool name and its arguments.

A :class:`CallFrame` writes the arguments as one JSON object (Hermes / Qwen, Mistral, Llama 3.x...); a
:class:`TaggedFrame` writes them one by one between tags (Qwen3-Coder's ``<parameter=KEY>``, GLM's
``<arg_key>``, MiniMax-M2's ``<parameter name="KEY">``); :data:`JSON_FRAME` is ``{"name": ..., "arguments":
{...}}``, for a format that has none of its own.  Each gives the grammar of one call of a chosen tool, finds
the call's head in a reply, and reads its arguments.  :mod:`.forced_calls` finds a template's frame.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from llama_cpp.llama_grammar import LlamaGrammar, SchemaConverter, gbnf_literal, json_schema_grammar
from llama_cpp.reasoning_grammar import class_char, text_without

from .call_values import OfferedTools


# where a frame's text has a call id: any letter or digit at each of these places
ID_SLOT = "\0" * 9
_ID_RULE = "[a-zA-Z0-9]{9}"


def fits(text: str, pattern: str) -> bool:
    """Whether ``text`` is ``pattern`` with letters or digits at its id slots (the same length)."""
    return len(text) == len(pattern) and all(
        c == p or (p == "\0" and c.isascii() and c.isalnum()) for c, p in zip(text, pattern))


def _gbnf(pattern: str) -> str:
    """GBNF for ``pattern`` (not empty): its text, and any id at its id slots."""
    parts = pattern.split(ID_SLOT)
    return " ".join(item for i, part in enumerate(parts)
                    for item in ((_ID_RULE,) if i else ()) + ((gbnf_literal(part),) if part else ()))


@dataclass(frozen=True)
class CallFrame:
    """The text of one call around its tool's name and its JSON arguments (:data:`ID_SLOT` where it has an id)."""

    opening: str
    after_name: str
    closing: str
    #: what the template writes between a thought and the call (stripped; None where it writes no thought)
    after_thought: str | None = field(default=None, kw_only=True)

    def head(self, name: str) -> str:
        """Everything before the arguments of a call of ``name``."""
        return self.opening + name + self.after_name

    def write(self, name: str, arguments: str) -> str:
        return self.head(name) + arguments + self.closing

    def grammar(self, functions: list[dict[str, Any]]) -> LlamaGrammar:
        """One call of one of ``functions``, its arguments following the function's parameters."""
        converter = SchemaConverter()
        calls = []
        for i, fn in enumerate(functions):
            arguments = converter.visit(fn.get("parameters") or _NO_PARAMETERS, f"call{i}-args")
            closing = f" {_gbnf(self.closing)}" if self.closing else ""
            calls.append(f"{_gbnf(self.head(fn['name']))} {arguments}{closing}")
        return LlamaGrammar(_grammar=converter.format_grammar() + f"root ::= {' | '.join(calls)}\n")

    def match_head(self, text: str, names: list[str]) -> tuple[str, int] | None:
        """(the name, where the arguments begin) when ``text`` begins with a complete head of a call of one of
        ``names``, and not with what may still become the longer head of another ("get" and "get_weather")."""
        heads = [(self.head(name).lstrip(), name) for name in names]
        complete = [(head, name) for head, name in heads if fits(text[:len(head)], head)]
        if not complete:
            return None
        head, name = max(complete, key=lambda found: len(found[0]))
        if any(len(head) < len(other) and len(text) < len(other) and fits(text, other[:len(text)])
               for other, _ in heads):
            return None
        return name, len(head)

    def held_back(self, text: str) -> int:
        """How much of the end of ``text`` (a call's arguments so far) may be the beginning of the closing."""
        for k in range(min(len(self.closing), len(text)), 0, -1):
            if fits(text[-k:], self.closing[:k]):
                return k
        return 0

    def without_closing(self, text: str) -> str:
        """A whole call's arguments: ``text`` (what follows the head) less the closing at its end."""
        body, closing = text.rstrip(), self.closing.strip()
        return body[:-len(closing)].rstrip() if closing and fits(body[-len(closing):], closing) else body


_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
_JSON_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*')


class JsonFrame(CallFrame):
    """``{"name": ..., "arguments": {...}}``, the frame of a formatter whose template writes none of its own: the
    grammar of llama.cpp's schema converter (the whitespace between its parts is the model's)."""

    def __init__(self) -> None:
        super().__init__('{"name": "', '", "arguments": ', "}")

    def grammar(self, functions: list[dict[str, Any]]) -> LlamaGrammar:
        def one(fn: dict[str, Any]) -> dict[str, Any]:
            return {"type": "object", "properties": {"name": {"const": fn["name"]},
                                                     "arguments": fn.get("parameters") or _NO_PARAMETERS},
                    "required": ["name", "arguments"]}

        return json_schema_grammar(one(functions[0]) if len(functions) == 1
                                   else {"anyOf": [one(fn) for fn in functions]})

    def match_head(self, text: str, names: list[str]) -> tuple[str, int] | None:
        head = _JSON_HEAD.match(text)
        if head is None:
            return None
        name = json.loads(head.group(1))
        return (name, head.end()) if name in names else None


JSON_FRAME = JsonFrame()


@dataclass(frozen=True)
class TaggedFrame(CallFrame):
    """A call whose arguments are written one by one: ``arg_open`` KEY ``arg_mid`` VALUE ``arg_close`` each, in
    the schema's order (required ones always, the others if the model writes them).  A string's value is its
    text (without ``arg_close`` in it; an enum's, one of its values), any other value its JSON, as the
    families' readers read them by the schema."""

    arg_open: str = ""
    arg_mid: str = ""
    arg_close: str = ""

    def tagged(self, arguments: dict[str, Any]) -> str:
        """``arguments`` written one by one, as the template writes them."""
        return "".join(self.arg_open + key + self.arg_mid + (value if isinstance(value, str) else json.dumps(value))
                       + self.arg_close for key, value in arguments.items())

    def grammar(self, functions: list[dict[str, Any]]) -> LlamaGrammar:
        converter = SchemaConverter()
        texts: list[str] = []
        calls = []
        for i, fn in enumerate(functions):
            params = fn.get("parameters") or _NO_PARAMETERS
            required = set(params.get("required") or ())
            definitions = {k: params[k] for k in ("$defs", "definitions") if k in params}
            parts = [_gbnf(self.head(fn["name"]))]
            for j, (key, schema) in enumerate((params.get("properties") or {}).items()):
                value = f"call{i}-value{j}"
                if (allowed := _enum_texts(schema)) is not None:
                    texts.append(f"{value} ::= " + " | ".join(gbnf_literal(v) for v in allowed))
                elif _is_text(schema) and "maxLength" in schema:  # bounded: none of the closing's first character
                    low, high = int(schema.get("minLength", 0)), int(schema["maxLength"])
                    texts.append(f"{value} ::= [^{class_char(self.arg_close[0])}]{{{low},{high}}}")
                elif _is_text(schema):
                    texts.extend(text_without(value, self.arg_close))
                else:
                    value = converter.visit({**schema, **definitions} if isinstance(schema, dict) else schema, value)
                argument = f"{_gbnf(self.arg_open + key + self.arg_mid)} {value} {_gbnf(self.arg_close)}"
                parts.append(argument if key in required else f"({argument})?")
            if self.closing:
                parts.append(_gbnf(self.closing))
            calls.append(" ".join(parts))
        return LlamaGrammar(_grammar=converter.format_grammar() + "".join(f"{rule}\n" for rule in texts)
                            + f"root ::= {' | '.join(calls)}\n")

    def read_arguments(self, text: str, function: dict[str, Any]) -> dict[str, Any] | None:
        """The arguments of a whole call's text after its head (None where it was cut short)."""
        offered = OfferedTools([{"type": "function", "function": function}])
        arguments: dict[str, Any] = {}
        at = 0
        while text.startswith(self.arg_open, at):
            key_at = at + len(self.arg_open)
            mid = text.find(self.arg_mid, key_at)
            end = text.find(self.arg_close, mid + len(self.arg_mid)) if mid >= 0 else -1
            if end < 0:
                return None
            key = text[key_at:mid]
            arguments[key] = offered.argument(function["name"], key, text[mid + len(self.arg_mid):end])
            at = end + len(self.arg_close)
        return arguments if text[at:].strip() == self.closing.strip() else None


def _is_text(schema: Any) -> bool:
    """Whether a parameter's value is written as its text: a string (possibly null)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    return kind == "string" or (isinstance(kind, list) and "string" in kind and set(kind) <= {"string", "null"})


def _enum_texts(schema: Any) -> list[str] | None:
    """A string parameter's allowed values, where the schema lists them (``enum``, ``const``)."""
    if not _is_text(schema):
        return None
    values = schema.get("enum") if "enum" in schema else [schema["const"]] if "const" in schema else None
    return values if isinstance(values, list) and values and all(isinstance(v, str) for v in values) else None
