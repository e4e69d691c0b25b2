"""The seed's grammar API over llama.cpp's JSON-schema converter: SchemaConverter, its constants,
from_json_schema's options and from_file's errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from llama_cpp import Llama, LlamaGrammar
from llama_cpp import llama_grammar as G
from llama_cpp.llama_grammar import SchemaConverter, json_schema_to_gbnf


def _rules(grammar: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in grammar.splitlines() if line)


def _with(schema: dict[str, Any]) -> dict[str, str]:
    """The rules of an object holding ``schema`` (so the builtin rules keep their own names)."""
    return _rules(json_schema_to_gbnf({"type": "object", "properties": {"x": schema}, "required": ["x"]}))


@pytest.mark.parametrize(("schema", "names"), [
    ({"type": "boolean"}, ["boolean"]),
    ({"type": "number"}, ["number", "integral-part", "decimal-part"]),
    ({"type": "integer"}, ["integer", "integral-part"]),
    ({}, ["value", "object", "array", "string", "char", "number", "boolean", "null"]),
    ({"type": "string", "format": "uuid"}, ["uuid"]),
    ({"type": "string", "format": "date-time"}, ["date-time-string", "date-time", "date", "time"]),
    ({"type": "string", "format": "date"}, ["date-string"]),
    ({"type": "string", "format": "time"}, ["time-string"]),
])
def test_the_constants_are_what_llama_cpp_writes(schema: dict[str, Any], names: list[str]) -> None:
    rules = _with(schema)
    for name in names:
        builtin = G.PRIMITIVE_RULES.get(name) or G.STRING_FORMAT_RULES[name]
        assert rules[name] == builtin.content, name
        assert set(builtin.deps) <= set(rules)
        assert name in G.RESERVED_NAMES
    assert rules["space"] == G.SPACE_RULE
    assert _with({"type": "string", "pattern": "^a.b$"})["dot"] == G.DOT
    assert G.LLAMA_GRAMMAR_DEFAULT_ROOT == "root" and "root" in G.RESERVED_NAMES and "dot" in G.RESERVED_NAMES


def test_dotall_and_raw_pattern(tiny_model_path: Path) -> None:
    assert _rules(json_schema_to_gbnf({"type": "string", "pattern": "^a.b$"}, dotall=True))["dot"] == G.DOTALL
    raw = LlamaGrammar.from_json_schema({"type": "string", "pattern": "^[ab]{3}$"}, raw_pattern=True)
    assert not _rules(raw.grammar)["root"].startswith('"\\""')  # no JSON quote opens it
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        text = llm.create_completion("x", grammar=raw, max_tokens=8, temperature=0.0)["choices"][0]["text"]
    assert re.fullmatch("[ab]{3}", text), text  # the text itself, no JSON quotes
    with pytest.raises(ValueError, match="raw_pattern applies to a schema that is a string with a pattern"):
        LlamaGrammar.from_json_schema({"type": "integer"}, raw_pattern=True)


def test_prop_order_reaches_every_object() -> None:
    inner = {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"b": {"type": "integer"}, "a": inner}}
    for order in (["a"], {"a": 0}):
        converter = SchemaConverter(prop_order=order, allow_fetch=False, dotall=False, raw_pattern=False)
        converter.visit(schema, "")
        rules = _rules(converter.format_grammar())
        assert rules["root"].index("a-kv") < rules["root"].index("b-kv")
        assert rules["a"].index("a-a-kv") < rules["a"].index("a-z-kv")  # nested objects too


def test_visits_under_names_do_not_collide() -> None:
    converter = SchemaConverter(prop_order=None, allow_fetch=False, dotall=False, raw_pattern=False)
    person = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    place = {"type": "object", "properties": {"name": {"type": "integer"}}, "required": ["name"]}
    assert converter.visit(person, "person") == "person"
    assert converter.visit(place, "place") == "place"
    assert converter.visit({"type": "number"}, "number") == "number-"  # a reserved name gets a dash
    rules = _rules(converter.format_grammar())
    assert rules["person-name-kv"].endswith("string") and rules["place-name-kv"].endswith("integer")
    LlamaGrammar.from_string(converter.format_grammar() + "root ::= person | place | number-\n")
    with pytest.raises(ValueError, match="already defined differently"):
        converter.visit({"type": "integer"}, "person")


def test_remote_refs_need_allow_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    remote = {"$defs": {"id": {"$ref": "#/$defs/int"}, "int": {"type": "integer"}}}
    fetched: list[str] = []
    monkeypatch.setattr(G, "_fetch_schema", lambda url: fetched.append(url) or remote)
    schema = {"type": "object", "properties": {"id": {"$ref": "https://example.org/s.json#/$defs/id"}},
              "required": ["id"]}
    with pytest.raises(ValueError, match="allow_fetch=True"):
        json_schema_to_gbnf(schema)
    assert _rules(json_schema_to_gbnf(schema, allow_fetch=True))["id-kv"].endswith("space integer")
    assert fetched == ["https://example.org/s.json"]  # the fetched document's own refs point into it
    remote["$defs"]["loop"] = {"$ref": "#/$defs/loop"}
    with pytest.raises(ValueError, match="refers to itself"):
        json_schema_to_gbnf({"$ref": "https://example.org/t.json#/$defs/loop"}, allow_fetch=True)
    with pytest.raises(ValueError, match="unsupported \\$ref"):
        json_schema_to_gbnf({"$ref": "other.json"})


def test_what_is_not_a_schema() -> None:
    with pytest.raises(TypeError, match="JSON string or a dict"):
        json_schema_to_gbnf([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="JSON string or a dict"):  # from_json_schema: every failure a ValueError
        LlamaGrammar.from_json_schema([1, 2])  # type: ignore[arg-type]


def test_from_file_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="grammar file not found"):
        LlamaGrammar.from_file(tmp_path / "missing.gbnf")
    (tmp_path / "empty.gbnf").write_text("  \n")
    with pytest.raises(ValueError, match="is empty"):
        LlamaGrammar.from_file(tmp_path / "empty.gbnf")
    (tmp_path / "binary.gbnf").write_bytes(b"\xff\xfe root")
    with pytest.raises(OSError, match="cannot read grammar file"):
        LlamaGrammar.from_file(tmp_path / "binary.gbnf")
    (tmp_path / "ok.gbnf").write_text('root ::= "yes"\n')
    assert LlamaGrammar.from_file(tmp_path / "ok.gbnf").grammar == 'root ::= "yes"\n'
