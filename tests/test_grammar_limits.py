"""Untrusted grammars and JSON schemas are refused before llama.cpp can allocate without bound or take long.

Each hostile case must give a ValueError within a second while the process's
resident memory grows by less than 50 MB.  They run in one child process
with an address-space limit and a timeout, so that a regression fails the
test instead of exhausting the machine.  Valid grammars (llama.cpp's
examples, the grammars of its JSON schema test cases) still pass.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from llama_cpp import LlamaGrammar, llama_grammar
from llama_cpp.grammar_limits import MAX_GBNF_CHARS, check_gbnf
from llama_cpp.llama_grammar import json_schema_to_gbnf
from llama_cpp.schema_limits import check_json_schema
from llama_cpp_native import grammars_dir
from test_json_schema_grammar import CASES

LONG = "a" * 2000


def _chain(n: int, rule: str) -> str:
    return "root ::= r0\n" + "".join(rule.format(i=i, j=i + 1) + "\n" for i in range(n)) + f'r{n} ::= "a"\n'


def _nested_object(depth: int) -> str:
    return '{"type": "object", "properties": {"a": ' * depth + '{"type": "string"}' + "}}" * depth


# id -> (GBNF, a part of the message)
HOSTILE_GBNF = {
    "min above max": ('root ::= "a"{5,2}',
                      "repetition {5,2} at line 1, column 13: the minimum is larger than the maximum"),
    "min above max, spaced": ('root ::= ( "a" { 5 ,\n 2 } )', "repetition { 5 ,\n 2 } at line 1, column 16"),
    "min above max in a group": ('root ::= ("a" | "b"{3,1})+', "repetition {3,1}"),
    "min above 2000": ('root ::= "a"{2001,}', "the minimum is larger than 2000"),
    "count beyond uint64": ('root ::= "a"{0,99999999999999999999999}', "a count is larger than"),
    "long literal repeated": (f'root ::= "{LONG}"{{2000}}', "more than 1000000 rule elements"),
    "many rules repeating literals": ("".join(f'r{i} ::= "{LONG[:1000]}"{{2000}}\n' for i in range(20)) + "root ::= r0",
                                      "more than 1000000 rule elements"),
    "nested groups repeated": ('root ::= ((("a"){1000}){1000}){1000}', ""),  # llama.cpp refuses this one itself
    "parentheses 600 deep": ("root ::= " + "(" * 600 + '"a"' + ")" * 600, "parentheses nest more than 512 deep"),
    "parentheses 100000 deep": ("root ::= " + "(" * 100_000 + '"a"' + ")" * 100_000, "parentheses nest"),
    "rules chained at the start": (_chain(10_000, 'r{i} ::= r{j} "a"'), "more than 2048 rules nest"),
    "exponential left recursion check": (_chain(40, "r{i} ::= r{j} | r{j}"), "left recursion would take"),
    "repeated optional rules": (_chain(6, 'r{i} ::= r{j}{{2000}} | ""'), "left recursion would take"),
    "nested optional repetitions": ('root ::= y{0,2000}\ny ::= x{0,2000} | ""\nx ::= "a" | ""', "rules nest"),
    "optional repetitions multiply": ('root ::= y{0,100}\ny ::= x{0,100} | ""\nx ::= "a" | ""', "4096 ways"),
    "hidden left recursion": ('root ::= x root "a" | "b"\nx ::= "c"?', "left recursion"),
    "hidden left recursion, three rules": ('root ::= r0\nr0 ::= r1 "a"\nr1 ::= (r3 r2 r3)\nr2 ::= r0 "b" | "c"\n'
                                           'r3 ::= "ab"+ | ("ab" [a-c])*', "(r0 -> r1 -> r2 -> r0)"),
    "10000 alternatives": ("root ::= " + " | ".join(f'"v{i}"' for i in range(10_000)), "4096 ways"),
    "over 1 MiB": ('root ::= "' + "a" * MAX_GBNF_CHARS + '"', "characters long; at most 1048576"),
    "NUL character": ('root ::= "a\x00"{5,2}', "a NUL character at line 1, column 12"),
}

# id -> (JSON schema text, a part of the message)
HOSTILE_SCHEMAS = {
    "minLength above maxLength": ('{"type": "object", "properties": {"name": {"type": "string", "minLength": 5, '
                                  '"maxLength": 2}}}', "minLength 5 is larger than maxLength 2 at properties.name"),
    "minItems above maxItems": ('{"type": "array", "items": {"type": "string"}, "minItems": 5, "maxItems": 2}',
                                "minItems 5 is larger than maxItems 2 at the top level"),
    "minProperties above maxProperties": ('{"type": "object", "minProperties": 5, "maxProperties": 2}',
                                          "minProperties 5 is larger than maxProperties 2"),
    "integer minimum above maximum": ('{"type": "integer", "minimum": 10, "maximum": 5}',
                                      "minimum 10 is larger than maximum 5"),
    "no integer between exclusive bounds": ('{"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 6}',
                                            "exclusiveMinimum 5 and exclusiveMaximum 6 leave no integer"),
    "integer bound beyond int64": ('{"type": "integer", "minimum": 1e300}', "outside the 64-bit range"),
    "exclusive bound overflowing int64": ('{"type": "integer", "exclusiveMinimum": 9223372036854775807}',
                                          "outside the 64-bit range"),
    "negative maxLength": ('{"type": "string", "maxLength": -1}', "maxLength must be a non-negative integer"),
    "fractional maxItems": ('{"type": "array", "maxItems": 2.5}', "maxItems must be a non-negative integer"),
    "maxLength beyond a C int": ('{"type": "string", "maxLength": 4294967301}', "no larger than 2147483647"),
    "boolean minLength": ('{"type": "string", "minLength": true}', "got True"),
    "pattern repeating {5,2}": ('{"type": "string", "pattern": "^a{5,2}$"}', "the minimum is larger than the maximum"),
    "JSON nested 100000 deep": ('{"anyOf": [' * 100_000 + "{}" + "]}" * 100_000, "at most 1048576"),
    "JSON nested 2000 deep": ('{"anyOf": [' * 2000 + "{}" + "]}" * 2000, "nested too deeply"),
    "schemas nested 100 deep": (_nested_object(100), "schemas nest more than 64 deep"),
    "$ref chain 1000 long": (json.dumps({"$defs": {f"d{i}": {"type": "object", "properties": {"x": {
        "$ref": f"#/$defs/d{i + 1}"}}} for i in range(1000)} | {"d1000": {"type": "string"}}, "$ref": "#/$defs/d0"}),
        "schemas nest more than 64 deep"),
    "$ref cycle in allOf": ('{"$defs": {"a": {"$ref": "#/$defs/a"}}, "allOf": [{"$ref": "#/$defs/a"}]}',
                            "a $ref cycle inside allOf"),
    "allOf back to itself": ('{"$defs": {"A": {"type": "object", "properties": {"x": {"allOf": [{"$ref": '
                             '"#/$defs/A"}]}}}}, "$ref": "#/$defs/A"}', "nest more than 64 deep"),
    "allOf doubling": (json.dumps({"$defs": {f"A{i}": {"type": "object", "properties": {"x": {"allOf": [
        {"$ref": f"#/$defs/A{i + 1}"}, {"$ref": f"#/$defs/A{i + 1}"}]}}} for i in range(30)}
        | {"A30": {"type": "object", "properties": {"y": {"type": "string"}}}}, "$ref": "#/$defs/A0"}), "invalid JSON"),
    "type lists nested": ('{"type": ["object", "object", "object", "object", "object"], "properties": {"a": ' * 10
                          + '{"type": "string"}' + "}}" * 10, "invalid JSON schema"),
    "500 optional properties": (json.dumps({"type": "object", "properties": {f"p{i}": {"type": "integer"}
                                                                             for i in range(500)}}),
                                "500 optional properties; at most 256"),
    "property name of 100000 characters": (json.dumps({"type": "object", "properties": {"$" * 100_000: {}}}),
                                           "a property name of 100000 characters"),
    "5000 patterns": (json.dumps({"type": "object", "properties": {f"p{i}": {"type": "string", "pattern": "^a+$"}
                                                                   for i in range(5000)},
                                  "required": [f"p{i}" for i in range(5000)]}), "5000 patterns"),
    "10000 enum values": (json.dumps({"enum": [f"value-{i}" for i in range(10_000)]}), "4096 ways"),
    "unresolvable $ref": ('{"$ref": "#/$defs/missing"}', "cannot resolve $ref"),
}

_BAD_NAME = '{"type": "object", "properties": {"name": {"type": "string", "minLength": 5, "maxLength": 2}}}'
# id -> (JSON schema text, a part of the message), given as a chat request's response_format or forced tool call
HOSTILE_REQUESTS = {
    "response_format json_schema": (_BAD_NAME, "minLength 5 is larger than maxLength 2 at properties.name"),
    "forced tool call": (_BAD_NAME, "minLength 5 is larger than maxLength 2 at properties.arguments.properties.name"),
}

_CHILD = textwrap.dedent("""
    import json, sys, time
    from llama_cpp import LlamaGrammar
    from llama_cpp_chat_formats.handler import json_schema_grammar, response_format_grammar
    from llama_cpp_chat_formats.forced_calls import JSON_FRAME

    CALLS = {
        "gbnf": LlamaGrammar.from_string,
        "schema": LlamaGrammar.from_json_schema,
        "response_format": lambda text: response_format_grammar(
            {"type": "json_schema", "json_schema": {"schema": json.loads(text)}}),
        "tool": lambda text: JSON_FRAME.grammar([{"name": "f", "parameters": json.loads(text)}]),
    }

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))

    def reset_peak():
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    cases, out = json.load(sys.stdin), open(sys.argv[1], "w")
    LlamaGrammar.from_string('root ::= "a"')  # load and warm up first
    for kind, name, text in cases:
        out.write(json.dumps(["start", name]) + "\\n"); out.flush()
        before, peak_reset = status("VmRSS"), reset_peak()
        start = time.perf_counter()
        try:
            CALLS[kind](text)
            error = None
        except ValueError as exc:
            error = str(exc)
        seconds = time.perf_counter() - start
        peak = status("VmHWM") if peak_reset else status("VmRSS")
        out.write(json.dumps(["done", name, error, seconds, (peak - before) / 1024]) + "\\n"); out.flush()
""")


@pytest.fixture(scope="module")
def hostile_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list]:
    """Run every hostile case in one child with 3 GB of address space and 120 s in all."""
    cases = [["gbnf", name, text] for name, (text, _) in HOSTILE_GBNF.items()]
    cases += [["schema", name, text] for name, (text, _) in HOSTILE_SCHEMAS.items()]
    cases += [["response_format" if "response" in name else "tool", name, text]
              for name, (text, _) in HOSTILE_REQUESTS.items()]
    results = tmp_path_factory.mktemp("hostile") / "results.jsonl"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    proc = subprocess.run([sys.executable, "-c", _CHILD, str(results)], input=json.dumps(cases), text=True,
                          capture_output=True, timeout=120, preexec_fn=limit, env={**os.environ})
    found: dict[str, list] = {}
    started = None
    for line in results.read_text().splitlines():
        entry = json.loads(line)
        if entry[0] == "start":
            started = entry[1]
        else:
            found[entry[1]] = entry[2:]
    if proc.returncode != 0:
        pytest.fail(f"the child died (rc {proc.returncode}) during {started!r}: {proc.stderr[-2000:]}")
    return found


HOSTILE = {**HOSTILE_GBNF, **HOSTILE_SCHEMAS, **HOSTILE_REQUESTS}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_case_is_refused_quickly_and_small(name: str, hostile_results: dict[str, list]) -> None:
    error, seconds, grown_mb = hostile_results[name]
    expected = HOSTILE[name][1]
    assert error is not None, f"{name}: accepted"
    assert expected in error, error
    assert seconds < 1.0, f"{name}: {seconds:.2f} s"
    assert grown_mb < 50, f"{name}: {grown_mb:.0f} MB"


def test_a_schema_that_contains_itself_is_refused() -> None:
    schema: dict = {"type": "object", "properties": {}}
    schema["properties"]["self"] = schema
    with pytest.raises(ValueError, match="nested more than 256 deep"):
        json_schema_to_gbnf(schema)


EXAMPLES = sorted(p.name for p in Path(grammars_dir).glob("*.gbnf"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_llama_cpp_example_grammars_pass(name: str) -> None:
    text = (Path(grammars_dir) / name).read_text(encoding="utf-8")
    check_gbnf(text)
    LlamaGrammar.from_file(Path(grammars_dir) / name)


@pytest.mark.parametrize("constant", sorted(llama_grammar._CONSTANTS))
def test_example_grammar_constants_pass(constant: str) -> None:
    LlamaGrammar.from_string(getattr(llama_grammar, constant))


VALID_SCHEMAS = [(c[1], c[2]) for c in CASES if c[0] == "SUCCESS"]


@pytest.mark.parametrize(("name", "schema"), VALID_SCHEMAS, ids=[c[0] for c in VALID_SCHEMAS])
def test_grammars_of_llama_cpp_schema_cases_pass(name: str, schema: str) -> None:
    check_json_schema(json.loads(schema))
    check_gbnf(json_schema_to_gbnf(schema))


@pytest.mark.parametrize("grammar", [
    'root ::= "{5,2}" [{}] "\\"{5,2}" # a comment {5,2}\n',  # braces in literals, classes and comments
    'root ::= [\\]{5,2}] "a"',  # an escaped ] does not close the class
    'root ::= "a"{2000} "b"{0,5000} "c"{3,}',  # a maximum above 2000 is no maximum
    'root ::= ("a"?)* ("b"*)*',  # a repeated group that can match nothing: the stacks do not grow
    'root ::= x{0,2000}\nx ::= "a" | ""',
    'root ::= "ab" r0\nr0 ::= "c" r0 | ""',  # right recursion
    "root ::= " + " | ".join(f'"v{i}"' for i in range(4000)),
])
def test_valid_grammars_pass(grammar: str) -> None:
    LlamaGrammar.from_string(grammar)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"name": {"type": "string", "minLength": 2, "maxLength": 2}}},
    {"type": "string", "maxLength": 5000},
    {"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807},
    {"type": "integer", "exclusiveMinimum": 1.5, "exclusiveMaximum": 3},
    {"type": "number", "minimum": 1.5, "maximum": 1.5},
    {"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}}, "$ref": "#/$defs/node"},
    {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(256)}},
    {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)},
     "required": [f"p{i}" for i in range(3000)]},
])
def test_valid_schemas_pass(schema: dict) -> None:
    LlamaGrammar.from_string(json_schema_to_gbnf(schema))


def test_a_large_grammar_is_scanned_in_linear_time() -> None:
    unit = '"{5,2}" [a-z] (x | "y") '
    text = "root ::= " + unit * (MAX_GBNF_CHARS // len(unit) - 1) + '\nx ::= "x"'
    start = time.perf_counter()
    check_gbnf(text)
    assert time.perf_counter() - start < 5
