"""JSON schema -> GBNF equals llama.cpp's own converter on llama.cpp's own test cases.

The cases come from tests/test-json-schema-to-grammar.cpp of the pinned
source: each SUCCESS case must give exactly the expected grammar (compared
line by line without indentation, as the C++ test trims), each FAILURE case a
ValueError.  Every expected grammar is also accepted by LlamaGrammar.
"""

from __future__ import annotations

import re

import pytest

from llama_cpp import LlamaGrammar
from llama_cpp.llama_grammar import json_schema_to_gbnf
from llama_cpp.testing import llama_cpp_source_dir

_CASE = re.compile(r'test\(\{\s*(SUCCESS|FAILURE),\s*"((?:[^"\\]|\\.)*)",\s*R"""\((.*?)\)""",\s*R"""\((.*?)\)"""',
                   re.S)


def _cases() -> list[tuple[str, str, str, str]]:
    text = (llama_cpp_source_dir() / "tests" / "test-json-schema-to-grammar.cpp").read_text(encoding="utf-8")
    return [m.groups() for m in _CASE.finditer(text)]


CASES = _cases()


def _lines(grammar: str) -> list[str]:
    return [line.strip() for line in grammar.strip().splitlines() if line.strip()]


def test_cases_were_found() -> None:
    assert len(CASES) >= 70


@pytest.mark.parametrize(("status", "name", "schema", "expected"), CASES, ids=[c[1] for c in CASES])
def test_llama_cpp_json_schema_case(status: str, name: str, schema: str, expected: str) -> None:
    if status == "FAILURE":
        with pytest.raises(ValueError):
            json_schema_to_gbnf(schema)
        return
    assert _lines(json_schema_to_gbnf(schema)) == _lines(expected)
    LlamaGrammar.from_string(expected)  # and the grammar is one llama.cpp accepts


def test_from_json_schema_and_property_order() -> None:
    schema = '{"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}, "required": ["a", "b"]}'
    grammar = LlamaGrammar.from_json_schema(schema)
    root = next(line for line in grammar.grammar.splitlines() if line.startswith("root ::="))
    assert root.index("b-kv") < root.index("a-kv")  # the schema's order
    reordered = json_schema_to_gbnf(schema, prop_order=["a"])
    root = next(line for line in reordered.splitlines() if line.startswith("root ::="))
    assert root.index("a-kv") < root.index("b-kv")
