"""GBNF grammars (``llama_cpp.llama_grammar.LlamaGrammar``), validated when constructed.

A grammar is checked by llama.cpp's own parser the moment it is created, so a
mistake is a ``ValueError`` that says where the GBNF is wrong, not a failure
at the first sampled token.  In generation the grammar is the first stage of
the native sampler chain (as in llama.cpp), contributed by the samplers plugin.

The example grammars that come with llama.cpp are module constants:
``JSON_GBNF``, ``JSON_ARR_GBNF``, ``ARITHMETIC_GBNF``, ``LIST_GBNF``,
``C_GBNF``, ``CHESS_GBNF``, ``ENGLISH_GBNF``, ``JAPANESE_GBNF``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from llama_cpp_native import ffi, grammars_dir, lib

from ._logger import capture_messages
from ._stderr import capture_stderr
from .grammar_limits import check_gbnf
from .schema_limits import MAX_SCHEMA_CHARS, check_json_schema

_AT = re.compile(r"error parsing grammar: (.*?) at (.*)", re.S)
_PARSE = re.compile(r"error parsing grammar: ([^\n]*)")


def _position(text: str, rest: str) -> str:
    """'line L, column C' of where ``rest`` (the unparsed remainder) starts in ``text``."""
    rest = rest.split("\n\n", 1)[0] if rest not in text else rest
    index = text.rfind(rest) if rest else len(text)
    if index < 0:
        return "an unknown position"
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"line {line}, column {column}"


def validate_gbnf(text: str, root: str = "root") -> None:
    """Raise ValueError (with the position) unless llama.cpp accepts ``text`` as a grammar.

    The text is first checked for what would make llama.cpp allocate without
    bound or take long (see :mod:`llama_cpp.grammar_limits`).
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("a grammar must be a non-empty GBNF string")
    check_gbnf(text, root)
    with capture_stderr() as captured, capture_messages() as logged:
        smpl = lib.llama_sampler_init_grammar(ffi.NULL, text.encode("utf-8"), root.encode("utf-8"))
    if smpl != ffi.NULL:
        lib.llama_sampler_free(smpl)
        return
    message = (captured.text + "".join(logged.messages)).strip()
    match = _AT.search(message)
    if match:
        what, rest = match.group(1), match.group(2)
        raise ValueError(f"invalid GBNF grammar: {what} at {_position(text, rest)}")
    if f"'{root}' symbol" in message:
        raise ValueError(f"invalid GBNF grammar: no rule named {root!r} (the start symbol)")
    parse = _PARSE.search(message)
    if parse:
        what = parse.group(1).strip()
        name = re.search(r"'([^']+)'", what)
        where = ""
        if name and name.group(1) in text:
            where = f" at {_position(text, text[text.index(name.group(1)):])}"
        raise ValueError(f"invalid GBNF grammar: {what}{where}")
    detail = message.splitlines()[0] if message else "rejected by llama.cpp's grammar parser"
    raise ValueError(f"invalid GBNF grammar: {detail}")


class LlamaGrammar:
    """A validated GBNF grammar.  ``from_string`` / ``from_file`` as in llama-cpp-python."""

    def __init__(self, *, _grammar: str, _root: str = "root") -> None:
        validate_gbnf(_grammar, _root)
        self._grammar = _grammar
        self._root = _root

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(_grammar=grammar)

    @classmethod
    def from_file(cls, file: str | Path, verbose: bool = True) -> "LlamaGrammar":
        path = Path(file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read grammar file {str(path)!r}: {exc}") from exc
        return cls(_grammar=text)

    @property
    def grammar(self) -> str:
        return self._grammar

    @property
    def root(self) -> str:
        return self._root

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> "LlamaGrammar":
        """The grammar of JSON documents valid under ``json_schema`` (a JSON string)."""
        return cls(_grammar=json_schema_to_gbnf(json_schema))

    def __repr__(self) -> str:
        return f"LlamaGrammar({len(self._grammar)} chars, root={self._root!r})"


def json_schema_to_gbnf(schema: str | dict[str, Any], prop_order: list[str] | None = None) -> str:
    """GBNF for a JSON schema, by llama.cpp's own converter (common/json-schema-to-grammar.cpp).

    ``prop_order`` lists properties that come first, in that order (llama.cpp
    orders them as the schema does otherwise).  An invalid schema is a
    ValueError with llama.cpp's explanation, never a fallback to plain JSON.
    The schema is checked before conversion, and the grammar after it, for
    what llama.cpp mishandles (see :mod:`llama_cpp.schema_limits`).
    """
    if isinstance(schema, str):
        if len(schema) > MAX_SCHEMA_CHARS:
            raise ValueError(f"invalid JSON schema: it is {len(schema)} characters long; at most {MAX_SCHEMA_CHARS}")
        try:
            schema_obj = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the JSON schema is not valid JSON: {exc}") from exc
        except RecursionError:
            raise ValueError("invalid JSON schema: JSON nested too deeply") from None
    else:
        schema_obj = schema
    if not isinstance(schema_obj, (dict, bool)):
        raise ValueError(f"a JSON schema is an object (or true/false), got {type(schema_obj).__name__}")
    check_json_schema(schema_obj)
    if prop_order and isinstance(schema_obj, dict):
        schema_obj = _with_property_order(schema_obj, prop_order)
    text = json.dumps(schema_obj)
    if len(text) > MAX_SCHEMA_CHARS:
        raise ValueError(f"invalid JSON schema: it is {len(text)} characters long as JSON; at most {MAX_SCHEMA_CHARS}")
    error = ffi.new("char **")
    out = lib.llama_cpp_native_json_schema_to_grammar(text.encode("utf-8"), error)
    if out == ffi.NULL:
        message = ffi.string(error[0]).decode("utf-8", "replace") if error[0] != ffi.NULL else "unknown error"
        lib.llama_cpp_native_free(error[0])
        raise ValueError(f"invalid JSON schema: {message.strip()}")
    try:
        grammar = ffi.string(out).decode("utf-8")
    finally:
        lib.llama_cpp_native_free(out)
    try:
        check_gbnf(grammar)
    except ValueError as exc:
        raise ValueError(f"invalid JSON schema: the grammar it converts to is refused: {exc}") from None
    return grammar


def _with_property_order(schema: dict[str, Any], order: list[str]) -> dict[str, Any]:
    props = schema.get("properties")
    if not isinstance(props, dict):
        return schema
    ranked = sorted(props, key=lambda k: (order.index(k) if k in order else len(order), list(props).index(k)))
    return {**schema, "properties": {k: props[k] for k in ranked}}


def json_schema_grammar(schema: dict[str, Any]) -> LlamaGrammar:
    """A LlamaGrammar for a schema given as a dict (as in ``response_format``)."""
    return LlamaGrammar(_grammar=json_schema_to_gbnf(schema))


_CONSTANTS = {
    "JSON_GBNF": "json.gbnf",
    "JSON_ARR_GBNF": "json_arr.gbnf",
    "ARITHMETIC_GBNF": "arithmetic.gbnf",
    "LIST_GBNF": "list.gbnf",
    "C_GBNF": "c.gbnf",
    "CHESS_GBNF": "chess.gbnf",
    "ENGLISH_GBNF": "english.gbnf",
    "JAPANESE_GBNF": "japanese.gbnf",
}


def __getattr__(name: str) -> str:
    """The example grammars, read from the llama.cpp build on first use."""
    if name in _CONSTANTS:
        value = (grammars_dir / _CONSTANTS[name]).read_text(encoding="utf-8")
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
