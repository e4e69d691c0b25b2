"""create_chat_completion through the chat-formats plugin, on SmolLM2 and tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from llama_cpp import Llama
from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerNotFoundException
from llama_cpp_native import ffi, lib

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hi! What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And of Italy?"},
]


@pytest.fixture(scope="module")
def smol(smollm2_model_path: Path):
    with Llama(str(smollm2_model_path), n_ctx=2048, n_threads=2, verbose=False) as llm:
        yield llm


def llama_cpp_apply_template(llm: Llama, messages: list[dict], add_ass: bool = True) -> str:
    """llama.cpp's own rendering with the model's template (llama_chat_apply_template)."""
    template = lib.llama_model_chat_template(ffi.cast("struct llama_model *", llm.model), ffi.NULL)
    keep = [(ffi.new("char[]", m["role"].encode()), ffi.new("char[]", m["content"].encode())) for m in messages]
    chat = ffi.new("struct llama_chat_message[]", len(keep))
    for item, (role, content) in zip(chat, keep):
        item.role, item.content = role, content
    buf = ffi.new("char[]", 65536)
    n = lib.llama_chat_apply_template(template, chat, len(keep), add_ass, buf, 65536)
    assert n >= 0
    return ffi.buffer(buf, n)[:].decode()


def rendered(llm: Llama, messages: list[dict], **kw) -> str:
    from llama_cpp_chat_formats.gguf_template import formatter_for

    return formatter_for(llm).__call__(messages=messages, **kw).prompt


def test_smollm2_gguf_template_equals_llama_cpp(smol: Llama) -> None:
    assert smol.chat_format is None  # nothing claimed it: the GGUF template is used
    assert rendered(smol, CONVERSATION) == llama_cpp_apply_template(smol, CONVERSATION)
    assert rendered(smol, CONVERSATION, add_generation_prompt=False) == \
        llama_cpp_apply_template(smol, CONVERSATION, add_ass=False)


def test_chat_completion_shape(smol: Llama) -> None:
    out = smol.create_chat_completion(CONVERSATION[:2], max_tokens=16, temperature=0.0)
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    choice = out["choices"][0]
    assert choice["message"]["role"] == "assistant" and "Paris" in choice["message"]["content"]
    assert choice["finish_reason"] in {"stop", "length"}
    assert out["usage"]["total_tokens"] == out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"]
    assert "<|im_end|>" not in choice["message"]["content"]


def test_streaming_chunks(smol: Llama) -> None:
    chunks = list(smol.create_chat_completion(CONVERSATION[:2], max_tokens=16, temperature=0.0, stream=True))
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["delta"] == {} and chunks[-1]["choices"][0]["finish_reason"] is not None
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    full = smol.create_chat_completion(CONVERSATION[:2], max_tokens=16, temperature=0.0)
    assert text == full["choices"][0]["message"]["content"]


def test_logprobs_true_alone_returns_logprobs(smol: Llama) -> None:
    out = smol.create_chat_completion(CONVERSATION[:2], max_tokens=4, temperature=0.0, logprobs=True)
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"] and all(c["logprob"] <= 0 for c in content)
    out = smol.create_chat_completion(CONVERSATION[:2], max_tokens=4, temperature=0.0, logprobs=True, top_logprobs=3)
    assert all(len(c["top_logprobs"]) == 3 for c in out["choices"][0]["logprobs"]["content"])


def test_assistant_prefill_continues_the_message(smol: Llama) -> None:
    messages = [{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "A red fruit is the"}]
    out = smol.create_chat_completion(messages, max_tokens=8, temperature=0.0, assistant_prefill=True)
    prompt = rendered(smol, messages[:1]) + "A red fruit is the"
    expected = smol.create_completion(smol.tokenize(prompt.encode(), add_bos=False, special=True), max_tokens=8,
                                      temperature=0.0, stop=["<|im_end|>"])
    assert out["choices"][0]["message"]["content"] == expected["choices"][0]["text"]


def test_named_format_and_unknown_format(smollm2_model_path: Path) -> None:
    with Llama(str(smollm2_model_path), n_ctx=512, verbose=False, chat_format="chatml") as llm:
        out = llm.create_chat_completion(CONVERSATION[:2], max_tokens=8, temperature=0.0)
        assert out["choices"][0]["message"]["content"]
    with Llama(str(smollm2_model_path), n_ctx=512, verbose=False, chat_format="no-such-format") as llm:
        with pytest.raises(LlamaChatCompletionHandlerNotFoundException, match="valid names: .*chatml"):
            llm.create_chat_completion(CONVERSATION[:2])


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
     "required": ["name", "age"]},
    {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 2, "maxItems": 4},
    {"type": "string", "enum": ["red", "green", "blue"]},
    {"type": "object", "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 10},
                                      "ratio": {"type": "number"}}, "required": ["score", "ratio"]},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["n"]},
    {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                         "required": ["x", "y"]}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
     "required": ["a", "b"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"},
                                      "tags": {"type": "array", "items": {"type": "string", "maxLength": 10},
                                               "maxItems": 3}},
     "required": ["ok", "tags"], "additionalProperties": False},
    {"anyOf": [{"type": "integer"},
               {"type": "object", "properties": {"v": {"type": "string", "maxLength": 10}}, "required": ["v"]}]},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
     "required": ["code"]},
    {"type": "object", "properties": {"kind": {"const": "fruit"}, "name": {"type": "string", "minLength": 2,
                                                                        "maxLength": 12}},
     "required": ["kind", "name"]},
    {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
     "minItems": 1, "maxItems": 3},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[str(i) for i in range(len(SCHEMAS))])
def test_response_format_json_schema_validates(smol: Llama, schema: dict) -> None:
    out = smol.create_chat_completion(
        [{"role": "user", "content": "Answer with JSON only. Give an example value."}], max_tokens=200,
        temperature=0.0, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    )
    value = json.loads(out["choices"][0]["message"]["content"])
    jsonschema.validate(value, schema)


def _closers(text: str) -> str | None:
    """The brackets that close ``text``, or None while it is inside a string."""
    stack, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}" and stack:
            stack.pop()
    return None if in_string else "".join(reversed(stack))


def is_json_prefix(text: str) -> bool:
    """Whether ``text`` can be completed into valid JSON (tries the few ways a cut can end)."""
    for string_end in ("", '"'):
        for value_end in ("", ":null", "null", '"k":null', "0"):
            candidate = text + string_end + value_end
            closers = _closers(candidate)
            if closers is None:
                continue
            try:
                json.loads(candidate + closers)
                return True
            except json.JSONDecodeError:
                continue
    return False


def test_json_object_mode_always_parses(smol: Llama) -> None:
    """Finished answers parse; answers cut by max_tokens are a prefix of valid JSON (this 135M
    model often rambles inside a JSON string until the limit)."""
    for question in ("Describe a cat in JSON.", "List three colors.", "What is 2+2? Answer in JSON."):
        out = smol.create_chat_completion([{"role": "user", "content": question}], max_tokens=120,
                                          temperature=0.0, response_format={"type": "json_object"})
        content = out["choices"][0]["message"]["content"]
        if out["choices"][0]["finish_reason"] == "stop":
            assert isinstance(json.loads(content), dict)
        else:
            assert is_json_prefix(content), content
        assert not is_json_prefix("}" + content)  # the check itself can fail


def test_invalid_schema_is_a_value_error(smol: Llama) -> None:
    with pytest.raises(ValueError, match="invalid JSON schema"):
        smol.create_chat_completion(CONVERSATION[:2], response_format={
            "type": "json_schema", "json_schema": {"schema": {"$ref": "#/$defs/missing"}}})


PAYLOADS = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('touch {marker}').read() }}",
    "{{ self._TemplateReference__context.cycler.__init__.__globals__.os.system('touch {marker}') }}",
    "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
    "{{ messages.append({'role': 'x'}) }}",
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=[str(i) for i in range(len(PAYLOADS))])
def test_a_template_that_tries_to_run_code_is_refused(tiny_model_factory, tmp_path: Path, payload: str) -> None:
    marker = tmp_path / "pwned"
    model = tiny_model_factory(chat_template=payload.replace("{marker}", str(marker)))
    with Llama(str(model), n_ctx=256, verbose=False) as llm:  # loading works
        with pytest.raises(ValueError, match="chat template"):
            llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2)
    assert not marker.exists()


def test_template_kwargs_reach_the_template(tiny_model_factory) -> None:
    template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                "{% if enable_thinking %}<think>{% endif %}{{ strftime_now('%Y') | length }}{{ {'a': 'é'} | tojson }}")
    with Llama(str(tiny_model_factory(chat_template=template)), n_ctx=256, verbose=False,
               chat_template_kwargs={"enable_thinking": True}) as llm:
        from llama_cpp_chat_formats.gguf_template import formatter_for

        prompt = formatter_for(llm)(messages=[{"role": "user", "content": "hi"}], enable_thinking=True).prompt
        assert prompt == 'user: hi\n<think>4{"a": "é"}'
        out = llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2,
                                         chat_template_kwargs={"enable_thinking": False})
        assert out["usage"]["prompt_tokens"] == len(llm.tokenize(b'user: hi\n4{"a": "\xc3\xa9"}', special=True))


def test_seed_readme_chat_examples_run(smollm2_model_path: Path) -> None:
    llm = Llama(model_path=str(smollm2_model_path), chat_format="chatml", verbose=False)
    out = llm.create_chat_completion(
        messages=[
            {"role": "system", "content": "You are a helpful assistant that outputs in JSON."},
            {"role": "user", "content": "Who won the world series in 2020"},
        ],
        response_format={
            "type": "json_object",
            "schema": {
                "type": "object",
                "properties": {"team_name": {"type": "string"}},
                "required": ["team_name"],
            },
        },
        temperature=0.7,
    )
    assert out["object"] == "chat.completion"
    content = out["choices"][0]["message"]["content"]
    assert content.lstrip().startswith("{")  # constrained from the first token
    if out["choices"][0]["finish_reason"] == "stop":  # sampled at 0.7, the 135M model may ramble to n_ctx
        assert "team_name" in json.loads(content)
    llm.close()


def test_seed_readme_prefill_example(smollm2_model_path: Path) -> None:
    llm = Llama(model_path=str(smollm2_model_path), verbose=False)
    messages = [
        {"role": "user", "content": "What are the first 5 planets in the solar system?"},
        {"role": "assistant", "content": "The first 5 planets in our solar system are:\n1. Mercury\n2."},
    ]
    response = llm.create_chat_completion(messages=messages, max_tokens=50, assistant_prefill=True)
    prefilled_text = messages[-1]["content"]
    generated_text = response["choices"][0]["message"]["content"]
    # the reply continues the partial message: the prompt ends with its text, not with a new assistant turn
    from llama_cpp_chat_formats.gguf_template import formatter_for

    prompt = formatter_for(llm)(messages=messages[:1]).prompt + prefilled_text
    assert generated_text
    assert response["usage"]["prompt_tokens"] == len(llm.tokenize(prompt.encode(), add_bos=False, special=True))
    llm.close()


def test_openai_v1_objects(smol: Llama) -> None:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    out = smol.create_chat_completion_openai_v1(messages=CONVERSATION[:2], max_tokens=6, temperature=0.0)
    assert isinstance(out, ChatCompletion) and out.choices[0].message.role == "assistant"
    chunks = list(smol.create_chat_completion_openai_v1(messages=CONVERSATION[:2], max_tokens=6, temperature=0.0,
                                                        stream=True))
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == out.choices[0].message.content


@pytest.mark.parametrize("tags", [{}, {"reasoning_start": "[THINK]", "reasoning_end": "[/THINK]"},
                                  {"reasoning_start": "<|channel>", "reasoning_end": "<channel|>"},
                                  {"reasoning_start": "<think>", "reasoning_end": "</think>",
                                   "reasoning_start_in_prompt": True}])
def test_seed_readme_reasoning_budget_examples_run(smol: Llama, tags: dict) -> None:
    response = smol.create_chat_completion(
        messages=[{"role": "user", "content": "Solve this carefully."}],
        max_tokens=24,  # the README uses 1024; a 135M model needs no more to show the mechanism
        reasoning_budget=4,
        reasoning_budget_message="\n[reasoning budget exhausted]\n",
        **tags,
    )
    content = response["choices"][0]["message"]["content"]
    if tags.get("reasoning_start_in_prompt"):
        # counting starts at once: after 4 tokens the message and the end tag are forced
        assert "[reasoning budget exhausted]" in content and "</think>" in content
    assert response["object"] == "chat.completion"


def test_chat_template_name_selects_a_named_template(tiny_model_factory) -> None:
    default = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tool_use = "{% for m in messages %}<tool-use {{ m['role'] }}>{{ m['content'] }}</tool-use>{% endfor %}"
    model = tiny_model_factory(chat_template=default,
                               extra_metadata=(("tokenizer.chat_template.tool_use", tool_use),))
    messages = [{"role": "user", "content": "hi"}]
    with Llama(str(model), n_ctx=256, verbose=False, chat_template_name="tool_use") as llm:
        assert llm.chat_format == "chat_template.tool_use"
        out = llm.create_chat_completion(messages, max_tokens=2)
        assert out["usage"]["prompt_tokens"] == len(llm.tokenize(b"<tool-use user>hi</tool-use>", special=True))
    with Llama(str(model), n_ctx=256, verbose=False, chat_template_name="default") as llm:
        out = llm.create_chat_completion(messages, max_tokens=2)
        assert out["usage"]["prompt_tokens"] == len(llm.tokenize(b"hi", special=True))
    with pytest.raises(ValueError, match=r"no chat template of that name; it has: default, tool_use"):
        Llama(str(model), n_ctx=256, verbose=False, chat_template_name="rag")
    with pytest.raises(ValueError, match="pass one of them"):
        Llama(str(model), n_ctx=256, verbose=False, chat_template_name="tool_use", chat_format="chatml")
    with pytest.warns(UserWarning, match="without mmproj_path they are not used"):
        Llama(str(model), n_ctx=256, verbose=False, chat_handler_kwargs={"verbose": False}).close()
