"""Checks of an untrusted JSON schema before llama.cpp's converter turns it into GBNF.

llama.cpp's converter (common/json-schema.cpp builds the schema's nodes,
common/json-schema-to-grammar.cpp writes the grammar) trusts its input.
Tried one by one in a memory-limited subprocess, it:

- writes ``char{5,2}`` for ``minLength`` 5 with ``maxLength`` 2, and
  ``item ("," item){4,1}`` for ``minItems`` 5 with ``maxItems`` 2, which
  llama.cpp's grammar parser then expands until the process dies;
- reads counts as C ints (``maxLength`` 4294967301 becomes 5) and casts
  integer bounds out of the 64-bit range with undefined behaviour
  (``minimum`` 1e300, ``exclusiveMinimum`` 2**63-1);
- writes a wrong grammar, without complaint, for an integer ``minimum``
  above its ``maximum``;
- recurses once per nested schema and per ``$ref`` followed (a crash at
  about 1000 levels on a 1 MB thread stack), forever around an ``allOf``
  whose ``$ref`` leads back to it, and on the characters of a long
  property name (a crash at a few thousand);
- copies a schema once per entry of a ``type`` list and inlines the
  properties of every ``allOf`` target (exponential: 3 types nested 12 deep
  gave 266 MB of grammar);
- names each rule after the path of property names that leads to it (a
  schema nested 1000 deep gave 4 MB of grammar, 3000 deep 36 MB);
- takes time cubic in the optional properties of an object (1000: 2.6 s,
  2000: over 20 s) and copies its rule table for each ``pattern``
  (5000 patterns: 3.5 s).

:func:`check_json_schema` walks the schema as the converter would, without
recursion and with every count bounded, and raises ``ValueError`` naming
what is wrong and where (``at properties.name``).  The grammar the converter
then writes is checked by :func:`llama_cpp.grammar_limits.check_gbnf`.
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeAlias

from .grammar_limits import MAX_GBNF_CHARS

# The JSON text of a schema: its grammar is about as large (and at most
# MAX_GBNF_CHARS); llama.cpp's converter takes about 0.7 s per MiB.
MAX_SCHEMA_CHARS = 1 << 20
# Nesting of JSON containers anywhere in the document (``const`` and
# ``enum`` values too): Python's json recurses at about 1000.
MAX_JSON_DEPTH = 256
# Schemas nested inside each other as the converter recurses, through $ref
# and allOf: it needs about 1 kB of stack per level.  OpenAI's structured
# outputs allow 10.
MAX_SCHEMA_DEPTH = 64
# Schemas the converter visits, copies by type lists and allOf included:
# 5000 properties convert in about 0.1 s.  OpenAI allows 5000 properties.
MAX_SCHEMA_NODES = 10_000
# Optional properties of one object (the converter's time is cubic in them:
# 256 take about 50 ms), and the sum of their cubes over all objects.
MAX_OPTIONAL_PROPERTIES = 256
MAX_OPTIONAL_WORK = 4 * 256 ** 3
# Patterns times schema nodes: the converter copies its rule table (about
# one rule per node) for each pattern; a million copies take about 0.3 s.
MAX_PATTERN_WORK = 1_000_000
# A property name: the converter runs std::regex over rule names built from
# it, which recurses once per character; 10000 crash on a 1 MB stack.
MAX_NAME_CHARS = 256
MAX_REF_CHARS = 1024
# llama.cpp reads counts (minLength, ...) as C ints.
MAX_COUNT = 2 ** 31 - 1
_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1

_PAIRS = (("minLength", "maxLength"), ("minItems", "maxItems"), ("minProperties", "maxProperties"))
_COUNTS = tuple(key for pair in _PAIRS for key in pair)
_DIGITS = re.compile(r"[0-9]+")
_ABSENT = object()

Path: TypeAlias = "tuple[()] | tuple[Path, str | int]"  # (parent path, key or index), () at the top level


def check_json_schema(schema: Any) -> None:
    """Raise ValueError if ``schema`` is invalid in a way llama.cpp's converter mishandles, or too large."""
    _check_nesting(schema)
    _Walk(schema).run()


def _check_nesting(value: Any) -> None:
    """JSON nesting at most MAX_JSON_DEPTH (a Python object that contains itself is infinitely deep)."""
    stack = [(value, 1)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"invalid JSON schema: JSON nested more than {MAX_JSON_DEPTH} deep")
        seen += len(children)
        if seen > MAX_SCHEMA_CHARS:  # each value takes at least a character
            raise ValueError(f"invalid JSON schema: it is larger than {MAX_SCHEMA_CHARS} characters")
        stack.extend((child, depth + 1) for child in children)


def _render(path: Path) -> str:
    parts: list[str | int] = []
    while path:
        path, key = path
        parts.append(key)
    out = ""
    for key in reversed(parts):
        out += f"[{key}]" if isinstance(key, int) else f".{key}" if out else str(key)
    if len(out) > 160:
        out = f"{out[:60]}...{out[-90:]}"
    return f"at {out}" if out else "at the top level"


def _fail(what: str, path: Path) -> ValueError:
    return ValueError(f"invalid JSON schema: {what} {_render(path)}")


def _alternatives(part: Any) -> list[tuple[Any, Any]] | None:
    """The alternatives of an allOf part that the builder makes an anyOf (with the type each forces)."""
    if not isinstance(part, dict) or "$ref" in part:
        return None
    key = "oneOf" if "oneOf" in part else "anyOf" if "anyOf" in part else None
    if key is not None:
        return [(alt, None) for alt in part[key]] if isinstance(part[key], list) else []
    if isinstance(part.get("type"), list):
        return [(part, one) for one in part["type"]]
    return None


def _builds_object(schema: dict[str, Any], forced: Any) -> bool:
    """Whether common_chat_schema_builder::build_node makes an object of ``schema`` (its $ref followed)."""
    if "oneOf" in schema or "anyOf" in schema:
        return False
    kind = forced if forced is not None else schema.get("type")
    if isinstance(kind, list) or "const" in schema or "enum" in schema:
        return False
    has_properties = "properties" in schema or schema.get("additionalProperties", True) is not True
    return kind in (None, "") and has_properties or kind == "object" and (has_properties or "allOf" not in schema)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Walk:
    """The schemas llama.cpp's converter visits, in its order, as an explicit stack.

    Each entry is (schema, type forced by a type list or None, path, depth,
    length of the converter's rule name).  A ``$ref`` target is visited the
    first time it is met, as the converter does; the properties of an
    ``allOf`` target are visited each time, as the converter inlines them.
    """

    def __init__(self, root: Any) -> None:
        self.root = root
        self.stack: list[tuple[Any, Any, Path, int, int]] = [(root, None, (), 1, 0)]
        self.visits = self.patterns = self.names = self.optional_work = 0
        self.refs: set[int] = set()
        self.checked: set[tuple[int, str]] = set()

    def run(self) -> None:
        while self.stack:
            mark = len(self.stack) - 1
            self.visit(*self.stack.pop())
            self.stack[mark:] = reversed(self.stack[mark:])  # so that they come off in the converter's order
        if self.patterns * self.visits > MAX_PATTERN_WORK:
            raise ValueError(f"invalid JSON schema: {self.patterns} patterns in {self.visits} subschemas; "
                             f"llama.cpp's converter copies its rules for each pattern, so patterns times "
                             f"subschemas is at most {MAX_PATTERN_WORK}")

    def push(self, schema: Any, path: Path, depth: int, name: int, forced: Any = None) -> None:
        self.stack.append((schema, forced, path, depth, name))

    def visit(self, schema: Any, forced: Any, path: Path, depth: int, name: int) -> None:
        self.visits += 1
        if self.visits > MAX_SCHEMA_NODES:
            raise _fail(f"more than {MAX_SCHEMA_NODES} subschemas once type lists and allOf are expanded "
                        "(llama.cpp's converter copies them)", path)
        if depth > MAX_SCHEMA_DEPTH:
            raise _fail(f"schemas nest more than {MAX_SCHEMA_DEPTH} deep, $ref and allOf included "
                        "(llama.cpp's converter recurses once per level)", path)
        self.names += 4 * (name + 10)  # a rule's name appears in its definition and where it is used
        if self.names > MAX_GBNF_CHARS:
            raise _fail(f"the grammar would be larger than {MAX_GBNF_CHARS} characters (llama.cpp writes rules "
                        "for each subschema, named after the property names on its path: here "
                        f"{name} characters)", path)
        if not isinstance(schema, dict):
            return  # the converter refuses it
        kind = forced if forced is not None else schema.get("type")
        self.keywords(schema, kind, path)
        if "$ref" in schema:
            self.ref(schema["$ref"], path, depth)
            return
        key = "oneOf" if "oneOf" in schema else "anyOf" if "anyOf" in schema else None
        if key is not None:
            for i, alt in enumerate(schema[key] if isinstance(schema[key], list) else ()):
                self.push(alt, ((path, key), i), depth + 1, name + 14)
            return
        if isinstance(kind, list):  # {"type": ["a", "b"], ...}: one copy of the schema per type
            for i, one in enumerate(kind):
                self.push(schema, ((path, "type"), i), depth + 1, name + 3, forced=one)
            return
        if "const" in schema or "enum" in schema:
            return
        self.structure(schema, kind if isinstance(kind, str) else "", path, depth, name)

    def structure(self, schema: dict[str, Any], kind: str, path: Path, depth: int, name: int) -> None:
        """Dispatch on the type as common_chat_schema_builder::build_node does."""
        if _builds_object(schema, kind or None):
            self.object(schema, path, depth, name)
        elif kind in ("", "object", "string") and "allOf" in schema:
            self.all_of(schema, path, depth, name)
        elif kind == "array" or kind == "" and ("items" in schema or "prefixItems" in schema):
            key = "items" if "items" in schema else "prefixItems"
            items = schema.get(key, _ABSENT)
            if isinstance(items, list):
                for i, item in enumerate(items):
                    self.push(item, ((path, key), i), depth + 1, name + 12)
            elif items is not _ABSENT:
                self.push(items, (path, key), depth + 1, name + 5)
        elif kind in ("", "string") and isinstance(schema.get("pattern"), str):
            self.patterns += 1

    def object(self, schema: dict[str, Any], path: Path, depth: int, name: int) -> None:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        required = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
        for prop, sub in properties.items():
            self.property(prop, sub, (path, "properties"), depth, name)
        additional = schema.get("additionalProperties", _ABSENT)
        if isinstance(additional, dict):
            self.push(additional, (path, "additionalProperties"), depth + 1, name + 17)
        open_ended = additional is True or isinstance(additional, dict) or \
            additional is _ABSENT and "properties" not in schema
        self.optional(sum(p not in required for p in properties) + open_ended, path)

    def property(self, prop: str, sub: Any, path: Path, depth: int, name: int) -> None:
        if len(prop) > MAX_NAME_CHARS:
            raise _fail(f"a property name of {len(prop)} characters; at most {MAX_NAME_CHARS}", path)
        self.push(sub, (path, prop), depth + 1, name + 1 + len(prop))

    def optional(self, count: int, path: Path) -> None:
        if count > MAX_OPTIONAL_PROPERTIES:
            raise _fail(f"an object with {count} optional properties; at most {MAX_OPTIONAL_PROPERTIES} "
                        "(llama.cpp's converter takes time cubic in them)", path)
        self.optional_work += count ** 3
        if self.optional_work > MAX_OPTIONAL_WORK:
            raise _fail(f"too many objects with many optional properties (llama.cpp's converter takes time "
                        f"cubic in an object's optional properties; their cubes add up to more than "
                        f"{MAX_OPTIONAL_WORK})", path)

    def all_of(self, schema: dict[str, Any], path: Path, depth: int, name: int) -> None:
        """Each part is built, and the converter merges the properties of the objects among them."""
        parts = schema["allOf"]
        if not isinstance(parts, list):
            return
        merged = 0
        for i, part in enumerate(parts):
            where = ((path, "allOf"), i)
            self.push(part, where, depth + 1, name + 8)
            alternatives = _alternatives(part)
            if alternatives is None:
                merged += self.merge(part, None, where, depth, name)
            for j, (alt, forced) in enumerate(alternatives or ()):
                merged += self.merge(alt, forced, (where, j), depth, name)
        self.optional(merged, path)

    def merge(self, part: Any, forced: Any, path: Path, depth: int, name: int) -> int:
        """Visit an allOf part's properties where the converter inlines them; how many there are."""
        seen: set[int] = set()
        while forced is None and isinstance(part, dict) and isinstance(part.get("$ref"), str):
            if id(part) in seen:
                raise _fail("a $ref cycle inside allOf (llama.cpp's converter would recurse forever)", path)
            seen.add(id(part))
            part, path = self.resolve(part["$ref"], path)
        if not isinstance(part, dict) or not _builds_object(part, forced):
            return 0
        properties = part.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        for prop, sub in properties.items():
            self.property(prop, sub, (path, "properties"), depth, name)
        return len(properties)

    def ref(self, ref: Any, path: Path, depth: int) -> None:
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return  # the converter refuses it
        target, target_path = self.resolve(ref, path)
        if id(target) not in self.refs:
            self.refs.add(id(target))
            self.push(target, target_path, depth + 1, 3 + len(ref))

    def resolve(self, ref: str, path: Path) -> tuple[Any, Path]:
        """The target of a ``#/...`` reference, as common_chat_schema_builder::resolve_ref finds it."""
        if len(ref) > MAX_REF_CHARS:
            raise _fail(f"a $ref of {len(ref)} characters; at most {MAX_REF_CHARS}", path)
        target = self.root
        target_path: Path = ()
        for token in ref[1:].split("/")[1:]:
            if isinstance(target, dict) and token in target:
                target, target_path = target[token], (target_path, token)
            elif isinstance(target, list) and _DIGITS.fullmatch(token) and int(token) < len(target):
                target, target_path = target[int(token)], (target_path, int(token))
            else:
                raise _fail(f"cannot resolve $ref {ref!r} ({token!r} not found)", path)
        return target, target_path

    def keywords(self, schema: dict[str, Any], kind: Any, path: Path) -> None:
        """Counts are non-negative C ints, bounds leave something to match, integer bounds fit in 64 bits."""
        if (id(schema), str(kind)) in self.checked:
            return
        self.checked.add((id(schema), str(kind)))
        for key in _COUNTS:
            value = schema.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
                raise _fail(f"{key} must be a non-negative integer no larger than {MAX_COUNT}, got {value!r}",
                            path)
        for low, high in _PAIRS:
            if low in schema and high in schema and schema[low] > schema[high]:
                raise _fail(f"{low} {schema[low]} is larger than {high} {schema[high]}", path)
        bounds: dict[str, float] = {k: schema[k] for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
                                    if _number(schema.get(k))}
        for key, value in bounds.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise _fail(f"{key} must be a finite number, got {value!r}", path)
        if kind == "integer":
            self.integer_bounds(bounds, path)
        else:
            self.number_bounds(bounds, path)

    def integer_bounds(self, bounds: dict[str, float], path: Path) -> None:
        """As build_integer folds them: minimum (else exclusiveMinimum + 1) to maximum (else exclusiveMaximum - 1)."""
        # the keyword each bound comes from, "" where there is none
        low_key = "minimum" if "minimum" in bounds else "exclusiveMinimum" if "exclusiveMinimum" in bounds else ""
        high_key = "maximum" if "maximum" in bounds else "exclusiveMaximum" if "exclusiveMaximum" in bounds else ""
        low = high = None
        if low_key:
            value = bounds[low_key]
            low = math.ceil(value) if low_key == "minimum" else math.floor(value) + 1
        if high_key:
            value = bounds[high_key]
            high = math.floor(value) if high_key == "maximum" else math.ceil(value) - 1
        for key, folded in ((low_key, low), (high_key, high)):
            if folded is not None and not _INT64_MIN <= folded <= _INT64_MAX:
                raise _fail(f"integer {key} {bounds[key]!r} is outside the 64-bit range llama.cpp converts", path)
        if low is not None and high is not None and low > high:
            if low_key == "minimum" and high_key == "maximum":
                raise _fail(f"minimum {bounds[low_key]!r} is larger than maximum {bounds[high_key]!r}", path)
            raise _fail(f"{low_key} {bounds[low_key]!r} and {high_key} {bounds[high_key]!r} leave no integer", path)

    def number_bounds(self, bounds: dict[str, float], path: Path) -> None:
        for low, high in (("minimum", "maximum"), ("exclusiveMinimum", "exclusiveMaximum"),
                          ("minimum", "exclusiveMaximum"), ("exclusiveMinimum", "maximum")):
            if low in bounds and high in bounds:
                if bounds[low] > bounds[high] or bounds[low] == bounds[high] and (low, high) != ("minimum", "maximum"):
                    raise _fail(f"{low} {bounds[low]!r} and {high} {bounds[high]!r} leave no number", path)
