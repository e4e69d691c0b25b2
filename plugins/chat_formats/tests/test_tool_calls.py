"""Tool calling: replies of each family's style parsed into tool_calls, and forced calls."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from llama_cpp import Llama
from llama_cpp_chat_formats.tool_calls import parse_tool_calls

TOOLS = [
    {"type": "function", "function": {"name": "special_function", "parameters": {
        "type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}}},
    {"type": "function", "function": {"name": "special_function_with_opt", "parameters": {
        "type": "object", "properties": {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}},
        "required": ["arg1"]}}},
]

# replies in the styles of llama.cpp's tests/test-chat.cpp (pinned source)
RECORDED = {
    "hermes": ('<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
               None, [("special_function", {"arg1": 1})]),
    "hermes-parallel": ('Let me call both.\n<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n'
                        '</tool_call>\n<tool_call>\n{"name": "special_function_with_opt", "arguments": '
                        '{"arg1": 1, "arg2": 2}}\n</tool_call>',
                        "Let me call both.", [("special_function", {"arg1": 1}),
                                              ("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    "qwen3-coder": ("<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n"
                    "</tool_call>", None, [("special_function", {"arg1": 1})]),
    "mistral": ('[TOOL_CALLS]special_function[ARGS]{"arg1": 1}[TOOL_CALLS]special_function_with_opt[ARGS]'
                '{"arg1": 1, "arg2": 2}', None, [("special_function", {"arg1": 1}),
                                                 ("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    "mistral-call-id": ('[TOOL_CALLS]special_function[CALL_ID]a1b2c3d4e[ARGS]{"arg1": 1}', None,
                        [("special_function", {"arg1": 1})]),
    "mistral-list": ('[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}}]', None,
                     [("special_function", {"arg1": 1})]),
    "llama-3": ('{"name": "special_function", "parameters": {"arg1": 1}}', None, [("special_function", {"arg1": 1})]),
    "llama-3-python-tag": ('<|python_tag|>{"name": "special_function", "parameters": {"arg1": 1}}', None,
                           [("special_function", {"arg1": 1})]),
    "functionary-v3.2": ('>>>special_function\n{"arg1": 1}', None, [("special_function", {"arg1": 1})]),
    "functionary-v3.2-text-and-calls": ('>>>all\nChecking.>>>special_function\n{"arg1": 1}\n>>>special_function_with_opt'
                                        '\n{"arg1": 1, "arg2": 2}', "Checking.",
                                        [("special_function", {"arg1": 1}),
                                         ("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    "functionary-v3.2-text-only": (">>>all\nNo call needed.", "No call needed.", []),
    "chatml-function-calling": ('functions.special_function:\n{"arg1": 1}', None,
                                [("special_function", {"arg1": 1})]),
    "functionary-v3.1": ('<function=special_function>{"arg1": 1}</function>', None,
                         [("special_function", {"arg1": 1})]),
    "firefunction-v2": (' functools[{"name": "special_function", "arguments": {"arg1": 1}}, '
                        '{"name": "special_function_with_opt", "arguments": {"arg1": 1, "arg2": 2}}]', None,
                        [("special_function", {"arg1": 1}), ("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    # gpt-oss (harmony): the recipient in the channel header after the analysis, or in the role header
    "gpt-oss": ('<|channel|>analysis<|message|>I should call it.<|end|><|start|>assistant<|channel|>commentary '
                'to=functions.special_function <|constrain|>json<|message|>{"arg1": 1}',
                "<|channel|>analysis<|message|>I should call it.<|end|>", [("special_function", {"arg1": 1})]),
    "gpt-oss-recipient-in-role": (' to=functions.special_function<|channel|>commentary json<|message|>{"arg1": 1}',
                                  None, [("special_function", {"arg1": 1})]),
    "gpt-oss-analysis-channel": ('<|channel|>analysis to=functions.special_function_with_opt<|message|>'
                                 '{"arg1": 1, "arg2": 2}', None, [("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    # Gemma 4: its own value syntax, strings between <|"|>, parallel calls one block each
    "gemma4": ('<|tool_call>call:special_function{arg1:1}<tool_call|>', None, [("special_function", {"arg1": 1})]),
    "gemma4-thought-and-parallel": (
        '<|channel>thought\nBoth.<channel|><|tool_call>call:special_function{arg1:1}<tool_call|>'
        '<|tool_call>call:special_function_with_opt{arg1:1, arg2:2}<tool_call|>',
        "<|channel>thought\nBoth.<channel|>", [("special_function", {"arg1": 1}),
                                                ("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    "gemma4-values": ('<|tool_call>call:special_function{arg1:-2.5e1,note:<|"|>a "quoted", {text}<|"|>,'
                      'flags:[true,false,null],nested:{k:<|"|>v<|"|>},empty:{}}<tool_call|>', None,
                      [("special_function", {"arg1": -25.0, "note": 'a "quoted", {text}', "flags": [True, False, None],
                                             "nested": {"k": "v"}, "empty": {}})]),
    # the families with markers of their own, as their templates write a call
    "deepseek-r1": ("Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n```json\n"
                    '{"arg1": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>', "Sure.", [("special_function", {"arg1": 1})]),
    "deepseek-v3.1": ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>special_function<｜tool▁sep｜>{"arg1": 1}<｜tool▁call▁end｜>'
                      '<｜tool▁call▁begin｜>special_function_with_opt<｜tool▁sep｜>{"arg1": 1, "arg2": 2}<｜tool▁call▁end｜>'
                      "<｜tool▁calls▁end｜>", None, [("special_function", {"arg1": 1}),
                                                    ("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    "kimi-k2": ('<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0<|tool_call_argument_begin|>'
                '{"arg1": 1}<|tool_call_end|><|tool_calls_section_end|>', None, [("special_function", {"arg1": 1})]),
    "solar-open": ('<|tool_calls|><|tool_call:begin|>call00001<|tool_call:name|>special_function<|tool_call:args|>'
                   '{"arg1": 1}<|tool_call:end|><|calls|>', None, [("special_function", {"arg1": 1})]),
    "glm": ("Let me check.\n<tool_call>special_function_with_opt\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n"
            "<arg_key>arg2</arg_key>\n<arg_value>2</arg_value>\n</tool_call>", "Let me check.",
            [("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    "glm-no-arguments": ("<tool_call>special_function</tool_call>", None, [("special_function", {})]),
    "hunyuan-3": ("<tool_calls:opensource>\n<tool_call:opensource>special_function<tool_sep:opensource>\n"
                  "<arg_key:opensource>arg1</arg_key:opensource>\n<arg_value:opensource>1</arg_value:opensource>\n"
                  "</tool_call:opensource>\n</tool_calls:opensource>", None, [("special_function", {"arg1": 1})]),
    "minimax-m2": ('<minimax:tool_call>\n<invoke name="special_function">\n<parameter name="arg1">1</parameter>\n'
                   "</invoke>\n</minimax:tool_call>", None, [("special_function", {"arg1": 1})]),
    "deepseek-v3.2": ('<｜DSML｜function_calls>\n<｜DSML｜invoke name="special_function">\n<｜DSML｜parameter name="arg1" '
                      'string="false">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>', None,
                      [("special_function", {"arg1": 1})]),
    "seed-oss": ("<seed:tool_call>\n<function=special_function>\n<parameter=arg1>1</parameter>\n</function>\n"
                 "</seed:tool_call>", None, [("special_function", {"arg1": 1})]),
    "minicpm-5": ('<function name="special_function"><param name="arg1">1</param></function>', None,
                  [("special_function", {"arg1": 1})]),
    "nemotron-nano-v2": ('<TOOLCALL>[{"name": "special_function", "arguments": {"arg1": 1}}]</TOOLCALL>', None,
                         [("special_function", {"arg1": 1})]),
    "apriel": ('<tool_calls>[{"name": "special_function", "arguments": {"arg1": 1}}]</tool_calls>', None,
               [("special_function", {"arg1": 1})]),
    "minimax-m1": ('<tool_calls>\n{"name": "special_function", "arguments": {"arg1": 1}}\n{"name": '
                   '"special_function_with_opt", "arguments": {"arg1": 1, "arg2": 2}}\n</tool_calls>', None,
                   [("special_function", {"arg1": 1}), ("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    "command-r7b": ('<|START_THINKING|>Plan.<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": '
                    '"special_function", "parameters": {"arg1": 1}}\n]<|END_ACTION|>',
                    "<|START_THINKING|>Plan.<|END_THINKING|>", [("special_function", {"arg1": 1})]),
    "apertus": ('<|tools_prefix|>[{"special_function": {"arg1": 1}}]<|tools_suffix|>', None,
                [("special_function", {"arg1": 1})]),
    "gigachat-3.1": ('<|function_call|>{"name": "special_function", "arguments": {"arg1": 1}}', None,
                     [("special_function", {"arg1": 1})]),
    "kimi-k3": ('<|open|>tools<|sep|><|open|>call tool="special_function" index="1"<|sep|><|open|>argument key="arg1" '
                'type="number"<|sep|>1<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>', None,
                [("special_function", {"arg1": 1})]),
    "minimax-m3": (']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="special_function">]<]minimax[>[<arg1>1'
                   ']<]minimax[>[</arg1>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>', None,
                   [("special_function", {"arg1": 1})]),
    "command-r-plus": ('Action:\n```json\n[\n    {\n        "tool_name": "special_function",\n        "parameters": '
                       '{"arg1": 1}\n    }\n]```', None, [("special_function", {"arg1": 1})]),
    "lfm2": ("<|tool_call_start|>[special_function(arg1=1), special_function_with_opt(arg1=1, arg2=2)]"
             "<|tool_call_end|>", None, [("special_function", {"arg1": 1}),
                                         ("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
}


@pytest.mark.parametrize("text", [
    "<|tool_call_start|>[special_function(arg1=__import__('os').getpid())]<|tool_call_end|>",  # not a literal
    "<|tool_call_start|>[special_function(1)]<|tool_call_end|>",  # positional: no parameter names
    "<tool_call>unknown_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
    '<|tools_prefix|>[{"unknown_function": {"arg1": 1}}]<|tools_suffix|>',
    '<|tool_call>call:special_function{arg1:<|"|>unterminated}<tool_call|>',  # a string that never closes
    "<|tool_call>call:special_function{arg1:1",  # cut off by max_tokens
    '<|channel|>commentary to=functions.unknown<|message|>{"arg1": 1}',  # not an offered tool
    '<|channel|>commentary to=functions.special_function<|message|>not json',
])
def test_broken_calls_of_the_newer_families_stay_text(text: str) -> None:
    assert parse_tool_calls(text, TOOLS) == (text, [])


@pytest.mark.parametrize("style", list(RECORDED))
def test_recorded_replies_are_parsed(style: str) -> None:
    text, content, expected = RECORDED[style]
    got_content, calls = parse_tool_calls(text, TOOLS)
    assert got_content == content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == expected
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)


def test_tagged_values_are_read_by_the_parameters_schema() -> None:
    """A tagged value is text where the parameter is a string (``"007"`` stays a string), JSON where not."""
    tools = [{"type": "function", "function": {"name": "book", "parameters": {"type": "object", "properties": {
        "code": {"type": "string"}, "seats": {"type": "integer"}, "tags": {"type": "array"}, "note": {}}}}}]
    reply = ("<tool_call>book<arg_key>code</arg_key><arg_value>007</arg_value><arg_key>seats</arg_key><arg_value>2"
             '</arg_value><arg_key>tags</arg_key><arg_value>["a", "b"]</arg_value><arg_key>note</arg_key>'
             "<arg_value>not json</arg_value></tool_call>")
    _, calls = parse_tool_calls(reply, tools)
    assert json.loads(calls[0]["function"]["arguments"]) == {"code": "007", "seats": 2, "tags": ["a", "b"],
                                                             "note": "not json"}


@pytest.mark.parametrize("text", [
    "Hello, world!",
    '{"name": "unknown_function", "arguments": {}}',  # not an offered tool
    "The JSON {\"a\": 1} is just data.",
])
def test_plain_replies_stay_text(text: str) -> None:
    assert parse_tool_calls(text, TOOLS) == (text, [])


@pytest.fixture(scope="module")
def smol(smollm2_model_path: Path):
    with Llama(str(smollm2_model_path), n_ctx=2048, n_threads=2, verbose=False) as llm:
        yield llm


MESSAGES = [{"role": "user", "content": "Call special_function with arg1 set to 42."}]


def test_forced_tool_call_matches_the_schema(smol: Llama) -> None:
    out = smol.create_chat_completion(MESSAGES, tools=TOOLS, temperature=0.0,
                                      tool_choice={"type": "function", "function": {"name": "special_function"}})
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]["function"]
    assert call["name"] == "special_function"
    jsonschema.validate(json.loads(call["arguments"]), TOOLS[0]["function"]["parameters"])


def test_required_tool_call_and_streamed_deltas(smol: Llama) -> None:
    chunks = list(smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice="required", temperature=0.0,
                                              stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    deltas = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    assert deltas and deltas[0]["index"] == 0 and deltas[0]["function"]["name"] in {"special_function",
                                                                                   "special_function_with_opt"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # the arguments arrive while they are generated, and add up to the non-streamed call
    assert len(deltas) > 3 and all("name" not in d["function"] for d in deltas[1:])
    reply = smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice="required", temperature=0.0)
    call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
    assert deltas[0]["function"]["name"] == call["name"]
    assert json.loads("".join(d["function"]["arguments"] for d in deltas)) == json.loads(call["arguments"])


def test_auto_replies_stream_text_at_once_and_tool_calls_parsed_at_the_end(smol: Llama) -> None:
    from llama_cpp_chat_formats.streaming import stream_auto_reply

    def completion_chunks(pieces):
        for i, piece in enumerate(pieces):
            yield {"id": "cmpl-1", "created": 0, "model": "m", "choices": [
                {"text": piece, "index": 0, "logprobs": None,
                 "finish_reason": "stop" if i == len(pieces) - 1 else None}]}

    def run(pieces):
        return list(stream_auto_reply(completion_chunks(pieces), lambda t: parse_tool_calls(t, TOOLS)))

    text_reply = run(["Hello", " there", ", <tool", " friend", ""])
    contents = [c["choices"][0]["delta"].get("content") for c in text_reply]
    assert contents[1:3] == ["Hello", " there"]  # sent as they come; "<tool" waits to see if it opens a call
    assert "".join(c or "" for c in contents) == "Hello there, <tool friend"
    assert text_reply[-1]["choices"][0]["finish_reason"] == "stop"

    call_reply = run(["Sure.", " <tool_call>", '{"name": "special_function", ', '"arguments": {"arg1": 3}}',
                      "</tool_call>"])
    deltas = [c["choices"][0]["delta"] for c in call_reply]
    assert deltas[1] == {"content": "Sure."}
    assert "".join(d.get("content") or "" for d in deltas) == "Sure. "
    assert not any("<tool_call>" in (d.get("content") or "") for d in deltas)
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("special_function", {"arg1": 3})]
    assert call_reply[-1]["choices"][0]["finish_reason"] == "tool_calls"

    llama3_reply = run(['{"name": "special_function",', ' "parameters": {"arg1": 5}}'])
    assert not any(c["choices"][0]["delta"].get("content") for c in llama3_reply)
    assert llama3_reply[-1]["choices"][0]["finish_reason"] == "tool_calls"

    # every style's opening holds the reply back, cut anywhere (DeepSeek's, in pieces of 3 characters)
    deepseek = RECORDED["deepseek-r1"][0]
    deepseek_reply = run([deepseek[i:i + 3] for i in range(0, len(deepseek), 3)])
    deltas = [c["choices"][0]["delta"] for c in deepseek_reply]
    assert "".join(d.get("content") or "" for d in deltas) == "Sure."
    assert [d["tool_calls"][0]["function"]["name"] for d in deltas if "tool_calls" in d] == ["special_function"]


def test_legacy_functions_and_bad_choices(smol: Llama) -> None:
    out = smol.create_chat_completion(MESSAGES, functions=[t["function"] for t in TOOLS],
                                      function_call={"name": "special_function"}, temperature=0.0)
    assert out["choices"][0]["message"]["function_call"]["name"] == "special_function"
    with pytest.raises(ValueError, match="not among the tools"):
        smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice={"type": "function",
                                                                        "function": {"name": "nope"}})
    with pytest.raises(ValueError, match="tool_choice must be"):
        smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice="sometimes")


TOOL_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<tool_response>{{ m.content }}</tool_response>\n"
    "{% elif m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function | tojson }}</tool_call>\n{% endfor %}"
    "{% else %}{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}"
    "{% if tools %}tools: {{ tools | map(attribute='function.name') | join(',') }}\n{% endif %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def test_tool_calls_and_results_are_rendered_back(tiny_model_factory) -> None:
    from llama_cpp_chat_formats.gguf_template import formatter_for

    messages = [*MESSAGES,
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "special_function", "arguments": '{"arg1": 42}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "the result is 7"}]
    with Llama(str(tiny_model_factory(chat_template=TOOL_TEMPLATE)), n_ctx=512, verbose=False) as llm:
        prompt = formatter_for(llm)(messages=messages, tools=TOOLS).prompt
        # the template writes the arguments with tojson: it gets them as an object, as llama.cpp gives them
        assert prompt == ("user: Call special_function with arg1 set to 42.\n"
                          '<tool_call>{"name": "special_function", "arguments": {"arg1": 42}}</tool_call>\n'
                          "<tool_response>the result is 7</tool_response>\n"
                          "tools: special_function,special_function_with_opt\nassistant:")
        out = llm.create_chat_completion(messages, tools=TOOLS, tool_choice="none", max_tokens=4, temperature=0.0)
        assert out["usage"]["prompt_tokens"] == len(llm.tokenize(prompt.encode(), special=True))


def test_seed_readme_function_calling_example(smollm2_model_path: Path) -> None:
    llm = Llama(model_path=str(smollm2_model_path), chat_format="chatml-function-calling", verbose=False)
    out = llm.create_chat_completion(
        messages=[
            {"role": "system", "content": "A chat between a curious user and an artificial intelligence assistant. "
             "The assistant gives helpful, detailed, and polite answers to the user's questions. The assistant "
             "calls functions with appropriate input when necessary"},
            {"role": "user", "content": "Extract Jason is 25 years old"},
        ],
        tools=[{
            "type": "function",
            "function": {
                "name": "UserDetail",
                "parameters": {
                    "type": "object",
                    "title": "UserDetail",
                    "properties": {
                        "name": {"title": "Name", "type": "string"},
                        "age": {"title": "Age", "type": "integer"},
                    },
                    "required": ["name", "age"],
                },
            },
        }],
        tool_choice={"type": "function", "function": {"name": "UserDetail"}},
    )
    call = out["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "UserDetail"
    args = json.loads(call["arguments"])
    assert set(args) >= {"name", "age"} and isinstance(args["age"], int)
    llm.close()


def test_chatml_function_calling_renders_tools_and_earlier_calls() -> None:
    from llama_cpp_chat_formats.function_calling import format_chatml_function_calling

    prompt = format_chatml_function_calling(messages=[
        {"role": "user", "content": "Call it."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "special_function", "arguments": '{"arg1": 1}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ], tools=TOOLS).prompt
    assert prompt.startswith("<|im_start|>system\nYou can call these functions:")
    assert "functions.special_function:\n{\"arg1\": 1}" in prompt and "done" in prompt
    content, calls = parse_tool_calls('functions.special_function:\n{"arg1": 3}', TOOLS)
    assert content is None and json.loads(calls[0]["function"]["arguments"]) == {"arg1": 3}


def test_auto_parses_a_real_reply_streamed_and_not(smol: Llama) -> None:
    """Drive SmolLM2 to answer in the Hermes style (with a grammar) and let "auto" find the call."""
    from llama_cpp import LlamaGrammar

    hermes = LlamaGrammar.from_string(
        'root ::= "Checking.\\n<tool_call>\\n{\\"name\\": \\"special_function\\", \\"arguments\\": {\\"arg1\\": " '
        '[1-9] [0-9]? "}}\\n</tool_call>"')
    out = smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice="auto", grammar=hermes, temperature=0.0)
    message = out["choices"][0]["message"]
    assert out["choices"][0]["finish_reason"] == "tool_calls" and message["content"] == "Checking."
    args = json.loads(message["tool_calls"][0]["function"]["arguments"])
    chunks = list(smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice="auto", grammar=hermes,
                                              temperature=0.0, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    texts = [d["content"] for d in deltas if d.get("content")]
    assert len(texts) > 1 and "".join(texts).strip() == "Checking."  # streamed token by token
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert json.loads(calls[0]["function"]["arguments"]) == args
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_forced_call_cut_short_by_max_tokens_is_reported_not_raised(smol: Llama) -> None:
    named = {"type": "function", "function": {"name": "special_function"}}
    out = smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice=named, temperature=0.0, max_tokens=3)
    assert out["choices"][0]["finish_reason"] == "length" and "tool_calls" not in out["choices"][0]["message"]
    chunks = list(smol.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice=named, temperature=0.0,
                                              max_tokens=3, stream=True))
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_streamed_tool_call_deltas_are_valid_openai_chunks(smol: Llama) -> None:
    chunks = list(smol.create_chat_completion_openai_v1(messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                                        temperature=0.0, stream=True))
    calls = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices[0].delta.tool_calls]
    assert calls[0].id and calls[0].type == "function" and calls[0].function.name in {t["function"]["name"]
                                                                                      for t in TOOLS}
    arguments = json.loads("".join(c.function.arguments or "" for c in calls))
    jsonschema.validate(arguments, next(t for t in TOOLS if t["function"]["name"] == calls[0].function.name)
                        ["function"]["parameters"])
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
