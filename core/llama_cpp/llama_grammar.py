"""GBNF grammars (``llama_cpp.llama_grammar.LlamaGrammar``), validated when constructed.

A grammar is checked by llama.cpp's own parser the moment it is created, so a
mistake is a ``ValueError`` that says where the GBNF is wrong, not a failure
at the first sampled token.  In generation the grammar is the first stage of
the native sampler chain (as in llama.cpp), contributed by the samplers plugin.

The example grammars that come with llama.cpp are module constants:
``JSON_GBNF``, ``JSON_ARR_GBNF``, ``ARITHMETIC_GBNF``, ``LIST_GBNF``,
``C_GBNF``, ``CHESS_GBNF``, ``ENGLISH_GBNF``, ``JAPANESE_GBNF``.

JSON schemas become GBNF through llama.cpp's own converter
(common/json-schema-to-grammar.cpp); :class:`SchemaConverter` is the seed's
interface to it, with the converter's constants (``PRIMITIVE_RULES``...).
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import attrs

from llama_cpp_native import ffi, grammars_dir, lib

from ._logger import capture_messages
from ._stderr import capture_stderr
from .grammar_limits import check_gbnf
from .schema_limits import MAX_SCHEMA_CHARS, check_json_schema

_AT = re.compile(r"error parsing grammar: (.*?) at (.*)", re.S)
_PARSE = re.compile(r"error parsing grammar: ([^\n]*)")

LLAMA_GRAMMAR_DEFAULT_ROOT = "root"  # the start symbol of a grammar


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal (quotes, backslashes and control characters escaped)."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


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

    def __init__(self, *, _grammar: str, _root: str = LLAMA_GRAMMAR_DEFAULT_ROOT) -> None:
        validate_gbnf(_grammar, _root)
        self._grammar = _grammar
        self._root = _root

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(_grammar=grammar)

    @classmethod
    def from_file(cls, file: str | Path, verbose: bool = True) -> "LlamaGrammar":
        """The grammar in a GBNF file: FileNotFoundError if it is missing, OSError if it cannot be read,
        ValueError if it is empty or not valid GBNF (as in llama-cpp-python)."""
        path = Path(file)
        if not path.exists():
            raise FileNotFoundError(f"grammar file not found: {str(path)!r}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise OSError(f"cannot read grammar file {str(path)!r}: {exc}") from exc
        if not text.strip():
            raise ValueError(f"grammar file {str(path)!r} is empty")
        return cls(_grammar=text)

    @property
    def grammar(self) -> str:
        return self._grammar

    @property
    def root(self) -> str:
        return self._root

    @classmethod
    def from_json_schema(cls, json_schema: str | dict[str, Any], prop_order: Sequence[str] | None = None,
                         allow_fetch: bool = False, dotall: bool = False, raw_pattern: bool = False,
                         verbose: bool = True) -> "LlamaGrammar":
        """The grammar of JSON documents valid under ``json_schema`` (a JSON string or a dict); the other
        arguments as for :func:`json_schema_to_gbnf`.  Any failure is a ValueError, as in llama-cpp-python."""
        try:
            grammar = json_schema_to_gbnf(json_schema, prop_order=prop_order, allow_fetch=allow_fetch,
                                          dotall=dotall, raw_pattern=raw_pattern)
        except TypeError as exc:
            raise ValueError(str(exc)) from exc
        return cls(_grammar=grammar)

    def __repr__(self) -> str:
        return f"LlamaGrammar({len(self._grammar)} chars, root={self._root!r})"


@attrs.define
class BuiltinRule:
    """A rule llama.cpp's converter writes when a schema needs it: its body and the rules it uses."""

    content: str
    deps: list[str] = attrs.field(factory=list)


# The constants of llama.cpp's converter (common/json-schema-to-grammar.cpp), under the seed's names;
# tests/test_json_schema_converter.py checks them against what the converter writes.
SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'

PRIMITIVE_RULES = {
    "boolean": BuiltinRule('("true" | "false")'),
    "decimal-part": BuiltinRule("[0-9]{1,16}"),
    "integral-part": BuiltinRule("[0] | [1-9] [0-9]{0,15}"),
    "number": BuiltinRule('("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
                          ["integral-part", "decimal-part"]),
    "integer": BuiltinRule('("-"? integral-part)', ["integral-part"]),
    "value": BuiltinRule("object | array | string | number | boolean | null",
                         ["object", "array", "string", "number", "boolean", "null"]),
    "object": BuiltinRule('"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
                          ["string", "value"]),
    "array": BuiltinRule('"[" space ( value ("," space value)* )? space "]"', ["value"]),
    "uuid": BuiltinRule(r'"\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" '
                        r'[0-9a-fA-F]{12} "\""'),
    "char": BuiltinRule(r'[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})'),
    "string": BuiltinRule(r'"\"" char* "\""', ["char"]),
    "null": BuiltinRule('"null"'),
}

STRING_FORMAT_RULES = {
    "date": BuiltinRule('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )'),
    "time": BuiltinRule('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? '
                        '( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )'),
    "date-time": BuiltinRule('date "T" time', ["date", "time"]),
    "date-string": BuiltinRule(r'"\"" date "\""', ["date"]),
    "time-string": BuiltinRule(r'"\"" time "\""', ["time"]),
    "date-time-string": BuiltinRule(r'"\"" date-time "\""', ["date-time"]),
}

DOTALL = "[\\U00000000-\\U0010FFFF]"  # what ``.`` of a pattern matches with dotall: any character
DOT = "[^\\x0A\\x0D]"  # without: any character but a line break

RESERVED_NAMES = {"root", "dot", *PRIMITIVE_RULES, *STRING_FORMAT_RULES}

_SHARED_RULES = {"space", "dot", *PRIMITIVE_RULES, *STRING_FORMAT_RULES}  # the same in every conversion
# a GBNF rule body's tokens: literals, character classes and repetition counts are never rule names
_BODY_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|\{[0-9,]*\}|[a-zA-Z0-9-]+|\s+|.')


def _load_schema(schema: Any) -> Any:
    """A schema given as JSON text or as an object (JSON text is checked for size first)."""
    if isinstance(schema, str):
        if len(schema) > MAX_SCHEMA_CHARS:
            raise ValueError(f"invalid JSON schema: it is {len(schema)} characters long; at most {MAX_SCHEMA_CHARS}")
        try:
            return json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the JSON schema is not valid JSON: {exc}") from exc
        except RecursionError:
            raise ValueError("invalid JSON schema: JSON nested too deeply") from None
    if not isinstance(schema, (dict, bool)):
        raise TypeError(f"a JSON schema is a JSON string or a dict, got {type(schema).__name__}")
    return schema


def _convert(schema: Any) -> dict[str, str]:
    """The rules llama.cpp's converter writes for ``schema`` (checked before and after, as untrusted)."""
    if not isinstance(schema, (dict, bool)):
        raise ValueError(f"a JSON schema is an object (or true/false), got {type(schema).__name__}")
    check_json_schema(schema)
    text = json.dumps(schema)
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
    rules = {}
    for line in grammar.splitlines():
        if line.strip():
            name, _, body = line.partition(" ::= ")
            rules[name] = body
    return rules


def _fetch_schema(url: str) -> Any:
    """A remote schema (``allow_fetch``): the JSON document at ``url``."""
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - https only, by the caller's choice
        document = _load_schema(response.read(MAX_SCHEMA_CHARS + 1).decode("utf-8", "replace"))
    check_json_schema(document)
    return document


def _pointer(document: Any, fragment: str, ref: str) -> Any:
    """The part of ``document`` a JSON pointer (``/$defs/a``) names."""
    target = document
    for part in [p for p in fragment.split("/") if p]:
        try:
            target = target[int(part)] if isinstance(target, list) else target[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ValueError(f"cannot resolve $ref {ref!r}: no {part!r} there") from None
    return target


class SchemaConverter:
    """JSON schemas to GBNF, the seed's interface to llama.cpp's converter.

    ``resolve_refs(schema, url)`` fetches remote ``$ref`` targets (``https://``, with
    ``allow_fetch``) and puts them in place; ``visit(schema, name)`` converts a schema into rules, the
    start rule called ``name`` (``""``: ``root``); ``format_grammar()`` is the GBNF of every rule
    visited.  ``prop_order`` (names, or the seed's ``{name: rank}``) puts those properties first, in
    that order, in every object; ``dotall`` lets ``.`` in a pattern match line breaks; with
    ``raw_pattern`` a schema that is a string with a ``pattern`` gives the grammar of the text itself,
    not of a JSON string of it.
    """

    def __init__(self, *, prop_order: Mapping[str, int] | Iterable[str] | None = None, allow_fetch: bool = False,
                 dotall: bool = False, raw_pattern: bool = False) -> None:
        ranks = prop_order if isinstance(prop_order, Mapping) else {n: i for i, n in enumerate(prop_order or ())}
        self._prop_order = dict(ranks)
        self._allow_fetch = allow_fetch
        self._dotall = dotall
        self._raw_pattern = raw_pattern
        self._rules: dict[str, str] = {}
        self._remote: dict[str, Any] = {}  # fetched documents by URL

    def resolve_refs(self, schema: Any, url: str) -> Any:
        """``schema`` with every remote ``$ref`` replaced by what it points at; local ``#/...`` refs stay
        (the converter resolves them).  ``url`` is the schema's own address (the seed passes "stdin")."""
        check_json_schema(schema)  # untrusted: bounded before it is walked
        return self._inline(schema, ())

    def _inline(self, node: Any, resolving: tuple[str, ...], document: Any = None) -> Any:
        """``node`` with remote refs put in place; inside a fetched ``document`` its local refs too (they
        point into that document, not into the schema it is put in)."""
        if isinstance(node, list):
            return [self._inline(item, resolving, document) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref.startswith("https://") or (document is not None and ref.startswith("#"))):
            if ref in resolving:
                raise ValueError(f"the remote schema reached through {resolving[0]!r} refers to itself at {ref!r}; "
                                 "inline it")
            base, _, fragment = ref.partition("#")
            if base:
                if not self._allow_fetch:
                    raise ValueError(f"the schema refers to {ref!r}: fetching remote schemas needs allow_fetch=True")
                if base not in self._remote:
                    self._remote[base] = _fetch_schema(base)
                document = self._remote[base]
            return self._inline(_pointer(document, fragment, ref), (*resolving, ref), document)
        if isinstance(ref, str) and not ref.startswith("#"):
            raise ValueError(f"unsupported $ref {ref!r}: a local '#/...' reference or an https:// URL")
        return {key: self._inline(value, resolving, document) for key, value in node.items()}

    def visit(self, schema: Any, name: str) -> str:
        """Convert ``schema`` into rules whose start is ``name`` (``""``: ``root``; a reserved name gets a
        ``-``, as in the seed); the start rule's name.  A named visit's rules other than the shared ones
        (``space``, ``dot``, the primitives) are prefixed with ``name-``, so that visits do not collide."""
        rules = _convert(self._ordered(schema))
        if self._dotall and "dot" in rules:
            rules["dot"] = DOTALL
        if self._raw_pattern:
            rules["root"] = self._raw(schema, rules["root"])
        start = f"{name}-" if name in RESERVED_NAMES else (name or LLAMA_GRAMMAR_DEFAULT_ROOT)
        if name:
            renamed = {rule: (start if rule == "root" else f"{name}-{rule}")
                       for rule in rules if rule not in _SHARED_RULES}
            rules = {renamed.get(rule, rule): "".join(renamed.get(t, t) for t in _BODY_TOKEN.findall(body))
                     for rule, body in rules.items()}
        for rule, body in rules.items():
            if self._rules.get(rule, body) != body:
                raise ValueError(f"rule {rule!r} is already defined differently; visit under another name")
            self._rules[rule] = body
        return start

    def _ordered(self, schema: Any) -> Any:
        """``schema`` with the ``prop_order`` properties first in every object."""
        if not self._prop_order:
            return schema
        if isinstance(schema, list):
            return [self._ordered(item) for item in schema]
        if not isinstance(schema, dict):
            return schema
        out = {key: self._ordered(value) for key, value in schema.items()}
        props = out.get("properties")
        if isinstance(props, dict):
            keys = list(props)
            ranked = sorted(keys, key=lambda k: (self._prop_order.get(k, len(self._prop_order)), keys.index(k)))
            out["properties"] = {k: props[k] for k in ranked}
        return out

    @staticmethod
    def _raw(schema: Any, root: str) -> str:
        """The start rule of a pattern schema without the JSON string's quotes around it."""
        quote = r'"\""'
        if not (isinstance(schema, dict) and isinstance(schema.get("pattern"), str)
                and root.startswith(quote + " ") and root.endswith(" " + quote)):
            raise ValueError("raw_pattern applies to a schema that is a string with a pattern")
        return root[len(quote) + 1:-len(quote) - 1]

    def format_grammar(self) -> str:
        """The GBNF of every rule visited, one per line, sorted by name (as llama.cpp writes it)."""
        return "".join(f"{name} ::= {body}\n" for name, body in sorted(self._rules.items()))


def json_schema_to_gbnf(schema: str | dict[str, Any], prop_order: Sequence[str] | None = None,
                        allow_fetch: bool = False, dotall: bool = False, raw_pattern: bool = False) -> str:
    """GBNF for a JSON schema (JSON text or a dict), by llama.cpp's own converter
    (common/json-schema-to-grammar.cpp), through :class:`SchemaConverter`.

    ``prop_order`` lists properties that come first, in that order, in every
    object (llama.cpp orders them as the schema does otherwise); ``allow_fetch``
    lets ``$ref`` fetch ``https://`` schemas; ``dotall`` lets ``.`` in a
    pattern match line breaks; ``raw_pattern`` turns a pattern schema into the
    grammar of the text itself.  An invalid schema is a ValueError with
    llama.cpp's explanation, never a fallback to plain JSON; a schema that is
    neither text nor a dict is a TypeError.  The schema is checked before
    conversion, and the grammar after it, for what llama.cpp mishandles (see
    :mod:`llama_cpp.schema_limits`).
    """
    converter = SchemaConverter(prop_order=prop_order, allow_fetch=allow_fetch, dotall=dotall,
                                raw_pattern=raw_pattern)
    converter.visit(converter.resolve_refs(_load_schema(schema), "stdin"), "")
    return converter.format_grammar()


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
