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
    #: what the template writes between one call's arguments and the next call's name (None: it writes one
    #: call a turn, or its reader does not read several back)
    link: str | None = field(default=None, kw_only=True)

    def head(self, name: str) -> str:
        """Everything before the arguments of a call of ``name``."""
        return self.opening + name + self.after_name

    def write(self, name: str, arguments: str) -> str:
        return self.head(name) + arguments + self.closing

    def write_calls(self, calls: list[tuple[str, str]]) -> str:
        """Several calls ((name, arguments) each) in one reply, linked as the template links them."""
        assert self.link is not None or len(calls) == 1
        linked = (self.link or "").join(name + self.after_name + arguments for name, arguments in calls)
        return self.opening + linked + self.closing

    def grammar(self, functions: list[dict[str, Any]], parallel: bool = False) -> LlamaGrammar:
        """A call of one of ``functions``, its arguments following the function's parameters; with ``parallel``
        (and a :attr:`link`) one or more."""
        converter = SchemaConverter()
        calls = []
        for i, fn in enumerate(functions):
            arguments = converter.visit(fn.get("parameters") or _NO_PARAMETERS, f"call{i}-args")
            calls.append(f"{_gbnf(fn['name'] + self.after_name)} {arguments}")
        return LlamaGrammar(_grammar=converter.format_grammar() + self._calls_rules(calls, parallel))

    def _calls_rules(self, calls: list[str], parallel: bool) -> str:
        """The root of a reply of calls: the opening, one call (or, ``parallel``, several linked), the closing;
        ``calls`` the grammar of each function's call from its name on."""
        parts = [_gbnf(self.opening)] if self.opening else []
        parts.append("one-call")
        if parallel and self.link:
            parts.append(f"({_gbnf(self.link)} one-call)*")
        if self.closing:
            parts.append(_gbnf(self.closing))
        return f"one-call ::= {' | '.join(calls)}\nroot ::= {' '.join(parts)}\n"

    def match_head(self, text: str, names: list[str], linked: bool = False) -> tuple[str, int] | None:
        """(the name, where the arguments begin) when ``text`` begins with a complete head of a call of one of
        ``names``, and not with what may still become the longer head of another ("get" and "get_weather");
        ``linked``: a call after the :attr:`link`, whose head is its name and what follows it."""
        heads = [((name + self.after_name if linked else self.head(name)).lstrip(), name) for name in names]
        complete = [(head, name) for head, name in heads if fits(text[:len(head)], head)]
        if not complete:
            return None
        head, name = max(complete, key=lambda found: len(found[0]))
        if any(len(head) < len(other) and len(text) < len(other) and fits(text, other[:len(text)])
               for other, _ in heads):
            return None
        return name, len(head)

    def held_back(self, text: str, parallel: bool = False) -> int:
        """How much of the end of ``text`` (a call's arguments so far) may be the beginning of the closing (or,
        ``parallel``, of the link to another call)."""
        ends = [self.closing, self.link] if parallel and self.link else [self.closing]
        for k in range(min(max(map(len, ends)), len(text)), 0, -1):
            if any(len(end) >= k and fits(text[-k:], end[:k]) for end in ends):
                return k
        return 0

    def links_at(self, text: str) -> list[int]:
        """Where :attr:`link` is written in ``text`` (every place; a call's arguments may contain its text)."""
        if not self.link:
            return []
        pattern = re.compile("[a-zA-Z0-9]{9}".join(re.escape(part) for part in self.link.split(ID_SLOT)))
        return [found.start() for found in pattern.finditer(text)]

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

    def grammar(self, functions: list[dict[str, Any]], parallel: bool = False) -> LlamaGrammar:
        def one(fn: dict[str, Any], at: str) -> dict[str, Any]:
            """The call of ``fn``, placed at ``at`` (a JSON pointer) in the whole schema: the local refs of
            its parameters (pydantic's ``#/$defs/...``) point into them there."""
            arguments = _rebased(fn.get("parameters") or _NO_PARAMETERS, f"{at}/properties/arguments")
            return {"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": arguments},
                    "required": ["name", "arguments"]}

        return json_schema_grammar(one(functions[0], "") if len(functions) == 1
                                   else {"anyOf": [one(fn, f"/anyOf/{i}") for i, fn in enumerate(functions)]})

    def match_head(self, text: str, names: list[str], linked: bool = False) -> tuple[str, int] | None:
        head = _JSON_HEAD.match(text)  # (no link: never a call after one)
        if head is None:
            return None
        name = json.loads(head.group(1))
        return (name, head.end()) if name in names else None


JSON_FRAME = JsonFrame()


def _rebased(schema: Any, at: str) -> Any:
    """``schema`` with its local refs (``#/...``, relative to its own root) pointing into it at ``at``."""
    if isinstance(schema, list):
        return [_rebased(item, at) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _rebased(value, at) for key, value in schema.items()}
    ref = schema.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        out["$ref"] = "#" + at + ref[1:]
    return out


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

    def grammar(self, functions: list[dict[str, Any]], parallel: bool = False) -> LlamaGrammar:
        converter = SchemaConverter()
        texts: list[str] = []
        calls = []
        for i, fn in enumerate(functions):
            params = fn.get("parameters") or _NO_PARAMETERS
            required = set(params.get("required") or ())
            definitions = {k: params[k] for k in ("$defs", "definitions") if k in params}
            parts = [_gbnf(fn["name"] + self.after_name)]
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
            calls.append(" ".join(parts))
        return LlamaGrammar(_grammar=converter.format_grammar() + "".join(f"{rule}\n" for rule in texts)
                            + self._calls_rules(calls, parallel))

    def read_arguments(self, text: str, function: dict[str, Any]) -> dict[str, Any] | None:
        """The arguments of a whole call's text after its head (None where it was cut short)."""
        found = self.arguments_at(text, 0, function)
        return found[0] if found is not None and text[found[1]:].strip() == self.closing.strip() else None

    def arguments_at(self, text: str, at: int, function: dict[str, Any]) -> tuple[dict[str, Any], int] | None:
        """The arguments written from ``at`` in ``text`` (a call's, after its head), and where they end; None
        where one was cut short."""
        offered = OfferedTools([{"type": "function", "function": function}])
        arguments: dict[str, Any] = {}
        while text.startswith(self.arg_open, at):
            key_at = at + len(self.arg_open)
            mid = text.find(self.arg_mid, key_at)
            end = text.find(self.arg_close, mid + len(self.arg_mid)) if mid >= 0 else -1
            if end < 0:
                return None
            key = text[key_at:mid]
            arguments[key] = offered.argument(function["name"], key, text[mid + len(self.arg_mid):end])
            at = end + len(self.arg_close)
        return arguments, at


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
