"""Chat messages in every shape OpenAI's clients send render on every chat format and template.

The second turn of an OpenAI tool loop carries ``{"role": "assistant", "content": null, "tool_calls": [...]}``;
SmolLM2's own template failed on it ("can only concatenate str (not "NoneType") to str").  The shapes here
(null content with tool_calls, lists of text parts in every role, ``developer``, ``name`` fields, the nulls the
openai package writes for unset fields) go through ``create_chat_completion`` on every registered chat format
and on the test models' own chat paths, and through every real template of the pinned llama.cpp source.
Prompts are rendered, not generated: the completion step is replaced by one that records the prompt, except
in the one end-to-end tool loop on SmolLM2.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterator

import pytest

from llama_cpp import Llama
from llama_cpp.chat_messages import normalize_messages
from llama_cpp.engine.normalize import text_prompt_tokens
from llama_cpp.plugins import ChatFormat, get_host
from llama_cpp.testing import llama_cpp_source_dir
from llama_cpp_chat_formats.jinja import Jinja2ChatFormatter, TemplateError
from llama_cpp_native import ffi, lib


def parts(*texts: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": t} for t in texts]


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CALL = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}

# the request of a tool loop's second turn, in the shapes clients send
SECOND_TURN = [
    {"role": "developer", "content": parts("Answer in one sentence.")},
    {"role": "user", "content": parts("What is the weather", "in Paris?"), "name": "alice"},
    {"role": "assistant", "content": None, "tool_calls": [CALL], "refusal": None, "function_call": None},
    {"role": "tool", "content": parts("18 degrees and sunny"), "tool_call_id": "call00001", "name": "get_weather"},
]
# the loop carried on: the answer (as the openai package dumps it, nulls included) and the next question
FULL_LOOP = [*SECOND_TURN,
             {"role": "assistant", "content": "Mild and bright.", "tool_calls": None, "refusal": None},
             {"role": "user", "content": "Thanks!", "name": "alice"}]
# what a format that renders strings shows of SECOND_TURN
SECOND_TURN_TEXTS = ("Answer in one sentence.", "What is the weather\nin Paris?", "18 degrees and sunny")
# SECOND_TURN with every content a string and no optional field: what llama.cpp's server renders it as
SECOND_TURN_AS_STRINGS = [
    {"role": "system", "content": "Answer in one sentence."},
    {"role": "user", "content": "What is the weather\nin Paris?"},
    {"role": "assistant", "content": ""},
    {"role": "tool", "content": "18 degrees and sunny"},
]
# the built-in formats that write earlier tool calls into the prompt (the others render the turn's text only)
RENDERS_TOOL_CALLS = {"chatml-function-calling", "functionary", "functionary-v1", "functionary-v2"}


def _completion(prompt_tokens: list[int]) -> dict[str, Any]:
    return {"id": "cmpl-shapes", "object": "text_completion", "created": 0, "model": "shapes",
            "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(prompt_tokens), "completion_tokens": 0,
                      "total_tokens": len(prompt_tokens)}}


class Recorder:
    """Stands in for ``llm.create_completion``: keeps the prompt tokens a chat handler completes."""

    def __init__(self, llm: Llama, monkeypatch: pytest.MonkeyPatch) -> None:
        self.llm = llm
        self.tokens: list[list[int]] = []
        monkeypatch.setattr(llm, "create_completion", self)

    def __call__(self, prompt: list[int], **kwargs: Any) -> dict[str, Any]:
        self.tokens.append(list(prompt))
        return _completion(prompt)

    def prompt(self, **request: Any) -> str:
        """The prompt text ``create_chat_completion(**request)`` completes."""
        self.llm.create_chat_completion(**request)
        return self.llm.detokenize(self.tokens[-1], special=True).decode("utf-8")


def _vocab(path: Path) -> Iterator[Llama]:
    with Llama(str(path), vocab_only=True, verbose=False) as llm:
        yield llm


@pytest.fixture(scope="module")
def tiny_vocab(tiny_model_path: Path) -> Iterator[Llama]:
    yield from _vocab(tiny_model_path)


@pytest.fixture(scope="module")
def smol_vocab(smollm2_model_path: Path) -> Iterator[Llama]:
    yield from _vocab(smollm2_model_path)


@pytest.fixture(scope="module")
def gemma3_vocab(gemma3_model_path: Path) -> Iterator[Llama]:
    yield from _vocab(gemma3_model_path)


# -- what each shape becomes -------------------------------------------------------------------

def test_each_shape_becomes_what_llama_cpp_renders() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    sent = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"}, image], "name": "alice"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": "é"}}}],
         "refusal": None, "function_call": None},
        {"role": "assistant", "tool_calls": [CALL]},
        {"role": "tool", "content": [], "tool_call_id": "c1", "name": None},
        {"role": "user", "content": None, "tool_calls": []},
    ]
    before = copy.deepcopy(sent)
    assert normalize_messages(sent) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"}, image], "name": "alice"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": "é"}'}}]},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": "", "tool_call_id": "c1"},
        {"role": "user", "content": ""},
    ]
    assert sent == before  # the caller's messages are not changed


@pytest.mark.parametrize("messages, says", [
    ([{"content": "hi"}], "messages[0].role must be a non-empty string"),
    ([{"role": "user", "content": "hi"}, {"role": "user"}], "messages[1].content is required"),
    ([{"role": "user", "content": {"text": "hi"}}], "messages[0].content must be a string, a list of content"),
    ([{"role": "user", "content": ["hi"]}], "messages[0].content[0] must be a dict with a string 'type'"),
    ([{"role": "user", "content": [{"type": "text", "text": None}]}], "messages[0].content[0].text must be a string"),
    ([{"role": "user", "content": "hi", "name": 7}], "messages[0].name must be a string"),
    ([{"role": "tool", "content": "18", "tool_call_id": 1}], "messages[0].tool_call_id must be a string"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}],
     "messages[1].tool_calls[0].function must be a dict with a non-empty string 'name'"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"type": "custom", "function": CALL["function"]}]}],
     "messages[0].tool_calls[0].type must be 'function'"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}],
     "messages[0].tool_calls[0].function.arguments must be a JSON string or an object"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"s": {1}}}}]}],
     "messages[0].tool_calls[0].function.arguments cannot be written as JSON"),
])
def test_a_message_that_cannot_be_rendered_is_named(tiny_vocab: Llama, messages: list, says: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError) as caught:
        normalize_messages(messages)
    assert says in str(caught.value)
    Recorder(tiny_vocab, monkeypatch)
    with pytest.raises(ValueError) as through_llama:
        tiny_vocab.create_chat_completion(messages, max_tokens=1)
    assert says in str(through_llama.value)


@pytest.mark.parametrize("name", ["chatml", "functionary-v2"])
def test_a_media_part_is_refused_by_a_text_format(tiny_vocab: Llama, name: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(tiny_vocab, monkeypatch)
    monkeypatch.setattr(tiny_vocab, "chat_format", name)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with pytest.raises(ValueError, match=r"messages\[1\]\.content\[1\] is a 'image_url' part, which this chat format "
                                         r"cannot render .* mmproj_path"):
        tiny_vocab.create_chat_completion([{"role": "system", "content": "x"},
                                           {"role": "user", "content": [*parts("Look:"), image]}])
    assert not recorder.tokens  # refused before anything was completed


def test_arguments_that_are_not_an_object_are_named_for_a_template_that_takes_objects() -> None:
    template = ("{% for m in messages %}{% for c in m.tool_calls or [] %}"
                "{% for k, v in c.function.arguments | items %}{{ k }}={{ v }};{% endfor %}{% endfor %}"
                "{{ m.content }}\n{% endfor %}")
    formatter = Jinja2ChatFormatter(template, eos_token="", bos_token="")
    assert formatter.takes_object_arguments()
    good = normalize_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None,
                                                                   "tool_calls": [CALL]}])
    assert formatter(messages=good).prompt == "hi\ncity=Paris;\n"
    bad = normalize_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None,
                                                                  "tool_calls": [{"function": {"name": "f", "arguments": '{"cut'}}]}])
    with pytest.raises(ValueError, match=r"messages\[1\]\.tool_calls\[0\]\.function\.arguments must be a JSON object"):
        formatter(messages=bad)


# -- every built-in chat format -----------------------------------------------------------------

BUILT_IN = sorted(get_host().records(ChatFormat))


def test_the_registry_has_the_built_in_formats() -> None:
    assert {"chat_template", "chatml", "llama-2", "gemma", "functionary-v2", "chatml-function-calling"} <= set(BUILT_IN)


@pytest.mark.parametrize("with_tools", [False, True], ids=["plain", "tools"])
@pytest.mark.parametrize("name", BUILT_IN)
def test_every_chat_format_renders_every_shape(name: str, with_tools: bool, tiny_vocab: Llama, smol_vocab: Llama,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    llm = smol_vocab if name == "chat_template" else tiny_vocab  # the GGUF template needs a model that has one
    monkeypatch.setattr(llm, "chat_format", name)
    prompt = Recorder(llm, monkeypatch).prompt(messages=SECOND_TURN, tools=TOOLS if with_tools else None)
    for text in SECOND_TURN_TEXTS:
        assert text in prompt, (text, prompt)
    assert "None" not in prompt
    if name in RENDERS_TOOL_CALLS:
        assert '{"city": "Paris"}' in prompt


# -- the test models' own chat paths ------------------------------------------------------------

def llama_cpp_rendering(llm: Llama, messages: list[dict[str, str]]) -> str:
    """llama.cpp's own rendering of string messages with the model's template (llama_chat_apply_template)."""
    template = ffi.new("char[]", llm.metadata["tokenizer.chat_template"].encode())
    keep = [(ffi.new("char[]", m["role"].encode()), ffi.new("char[]", m["content"].encode())) for m in messages]
    chat = ffi.new("struct llama_chat_message[]", len(keep))
    for item, (role, content) in zip(chat, keep):
        item.role, item.content = role, content
    buf = ffi.new("char[]", 65536)
    n = lib.llama_chat_apply_template(template, chat, len(keep), True, buf, 65536)
    assert n >= 0
    return ffi.buffer(buf, n)[:].decode()


def test_smollm2_template_renders_every_shape_as_llama_cpp_does(smol_vocab: Llama,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert smol_vocab.chat_format is None and "tokenizer.chat_template" in smol_vocab.metadata
    recorder = Recorder(smol_vocab, monkeypatch)
    recorder.prompt(messages=SECOND_TURN, tools=TOOLS)
    expected = llama_cpp_rendering(smol_vocab, SECOND_TURN_AS_STRINGS)
    assert recorder.tokens[-1] == text_prompt_tokens(smol_vocab, expected)
    prompt = recorder.prompt(messages=FULL_LOOP, tools=TOOLS)
    assert "Thanks!" in prompt and "Mild and bright." in prompt and "None" not in prompt


@pytest.mark.parametrize("model", ["tiny_vocab", "gemma3_vocab"])
def test_models_without_a_template_render_every_shape(model: str, request: pytest.FixtureRequest,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    llm = request.getfixturevalue(model)
    assert "tokenizer.chat_template" not in llm.metadata and llm.chat_format is None  # the llama-2 default
    prompt = Recorder(llm, monkeypatch).prompt(messages=FULL_LOOP, tools=TOOLS)
    for text in (*SECOND_TURN_TEXTS, "Mild and bright.", "Thanks!"):
        assert text in prompt
    assert "None" not in prompt


# -- every real template of the pinned llama.cpp source -----------------------------------------

TEMPLATES = sorted((llama_cpp_source_dir() / "models" / "templates").glob("*.jinja"))
# templates that refuse a conversation by design (their own raise_exception): Gemma 2 has no tool role (its
# system message is merged into the next one, as llama.cpp does; llama-server refuses this loop too)
REFUSED = {"google-gemma-2-2b-it": "Conversation roles must alternate"}
# templates that render no tool results at all
NO_TOOL_RESULTS = {"llama-cpp-rwkv-world", "microsoft-Phi-3.5-mini-instruct"}


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_every_real_template_renders_every_shape(path: Path) -> None:
    """Kimi K2's templates included: they queue tool call ids in a list of their own, which the sandbox lets
    a template change (the values it is given stay unchangeable)."""
    formatter = Jinja2ChatFormatter(path.read_text(encoding="utf-8"), eos_token="</s>", bos_token="<s>")
    try:
        prompt = formatter(messages=normalize_messages(FULL_LOOP), tools=TOOLS).prompt
    except TemplateError as exc:
        if path.stem not in REFUSED:
            raise
        assert REFUSED[path.stem] in str(exc), str(exc)
        return
    assert path.stem not in REFUSED
    texts = ["Answer in one sentence.", "What is the weather", "in Paris?", "Mild and bright.", "Thanks!"]
    if path.stem not in NO_TOOL_RESULTS:
        texts.append("18 degrees and sunny")
    for text in texts:
        assert text in prompt, text
    assert "None" not in prompt


# -- end to end: a two-turn tool loop on SmolLM2 ------------------------------------------------

def test_smollm2_tool_loop_second_turn_completes(smollm2_model_path: Path) -> None:
    """The request that failed: the first turn's reply sent back as the openai package sends it (content null,
    the calls, the unset fields as nulls), then the tool's result.  The first turn's reply is written out
    rather than generated: SmolLM2 135M does not write a reliable call."""
    question = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the weather in Paris?"}]
    reply = {"role": "assistant", "content": None, "tool_calls": [CALL], "function_call": None, "refusal": None}
    result = {"role": "tool", "tool_call_id": CALL["id"], "content": parts("18 degrees and sunny")}
    with Llama(str(smollm2_model_path), n_ctx=1024, n_threads=2, verbose=False) as llm:
        out = llm.create_chat_completion([*question, reply, result], tools=TOOLS, temperature=0.0, max_tokens=8)
        streamed = list(llm.create_chat_completion([*question, reply, result], temperature=0.0, max_tokens=8,
                                                   stream=True))
    assert out["object"] == "chat.completion" and out["choices"][0]["message"]["role"] == "assistant"
    assert out["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")
    assert out["usage"]["completion_tokens"] >= 1
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in streamed)
    assert streamed[-1]["choices"][0]["finish_reason"] in ("stop", "length") and text
