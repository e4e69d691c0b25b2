"""Function definitions as the TypeScript-like namespace that functionary models were trained on.

Functionary prompts describe the offered functions as TypeScript types
inside ``namespace functions { ... }`` rather than as JSON schemas; the model
then answers with the function's name and JSON arguments.  The rendering
covers what tool schemas use: descriptions as ``//`` comments, optional
parameters (``?``), scalar types, enums and constants as literal unions,
arrays, nested objects, ``anyOf``/``oneOf`` and ``$ref`` to ``$defs``.
"""

from __future__ import annotations

import json
from typing import Any

HEADER = "// Supported function definitions that should be called when necessary."
_SCALARS = {"string": "string", "number": "number", "integer": "number", "boolean": "boolean", "null": "null"}


def _literal(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def ts_type(schema: Any, indent: str = "") -> str:
    """The TypeScript type of a JSON schema (``any`` for what has no TypeScript form)."""
    if not isinstance(schema, dict):
        return "any"
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "const" in schema:
        return _literal(schema["const"])
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(_literal(v) for v in schema["enum"]) or "never"
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(ts_type(s, indent) for s in schema[key]) or "never"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(ts_type({**schema, "type": k}, indent) for k in kind) or "any"
    if kind == "array":
        item = ts_type(schema.get("items"), indent)
        return f"({item})[]" if " | " in item else f"{item}[]"
    if kind == "object" or "properties" in schema:
        return _object_type(schema, indent)
    return _SCALARS.get(kind, "any") if isinstance(kind, str) else "any"


def _object_type(schema: dict[str, Any], indent: str) -> str:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "object"
    inner = indent + "  "
    required = set(schema.get("required") or ())
    lines = ["{"]
    for name, prop in properties.items():
        lines += _property_lines(name, prop, name in required, inner)
    lines.append(indent + "}")
    return "\n".join(lines)


def _property_lines(name: str, prop: Any, required: bool, indent: str) -> list[str]:
    lines = []
    if isinstance(prop, dict):
        if prop.get("description"):
            lines += [f"{indent}// {line}" for line in str(prop["description"]).splitlines()]
        if "default" in prop:
            lines.append(f"{indent}// default: {_literal(prop['default'])}")
    lines.append(f"{indent}{name}{'' if required else '?'}: {ts_type(prop, indent)},")
    return lines


def functions_namespace(functions: list[dict[str, Any]], namespace: str = "functions") -> str:
    """``// Supported function definitions ...`` + ``namespace functions { type NAME = (_: {...}) => any; }``."""
    definitions: dict[str, Any] = {}
    for fn in functions:
        params = fn.get("parameters") or {}
        definitions.update(params.get("$defs") or params.get("definitions") or {})
    lines = [HEADER, f"namespace {namespace} {{", ""]
    for name, schema in definitions.items():
        lines.append(f"type {name} = {ts_type(schema)};")
    if definitions:
        lines.append("")
    for fn in functions:
        if fn.get("description"):
            lines += [f"// {line}" for line in str(fn["description"]).splitlines()]
        params = fn.get("parameters") or {}
        properties = params.get("properties") if isinstance(params, dict) else None
        if isinstance(properties, dict) and properties:
            required = set(params.get("required") or ())
            lines.append(f"type {fn['name']} = (_: {{")
            for pname, prop in properties.items():
                lines += _property_lines(pname, prop, pname in required, "")
            lines.append("}) => any;")
        else:
            lines.append(f"type {fn['name']} = () => any;")
        lines.append("")
    lines.append(f"}} // namespace {namespace}")
    return "\n".join(lines)
