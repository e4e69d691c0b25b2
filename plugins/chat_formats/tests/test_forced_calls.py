"""A forced tool call in the syntax the model's template writes calls in, after the thinking where the request
splits it.  The oracle is the template (llama-server, whose required-call grammar comes from the same
template, cannot serve one on a tiny vocabulary: its sampler setup fails there): the frame found in each
template is read back by the family's own reader, and a forced reply on a tiny model with Qwen3's template
is that template's call, whole and streamed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from llama_cpp import Llama
from llama_cpp.reasoning_split import Markers
from llama_cpp.testing import llama_cpp_source_dir
from llama_cpp_chat_formats import Jinja2ChatFormatter
from llama_cpp_chat_formats.call_frames import ID_SLOT, JSON_FRAME, CallFrame, TaggedFrame
from llama_cpp_chat_formats.forced_calls import ForcedReply, calls_of, frame_for, read_forced_reply, template_frame
from llama_cpp_chat_formats.tool_calls import parse_tool_calls

TEMPLATES = llama_cpp_source_dir() / "models" / "templates"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer"}},
    "required": ["city"]}}},
    {"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {}}}}]
ARGUMENTS = {"city": "Nice", "days": 2}

# template -> (what it writes before get_weather's arguments, and after them)
FRAMES = {
    "Qwen-Qwen3-0.6B": ('<tool_call>\n{"name": "get_weather", "arguments": ', "}\n</tool_call>"),
    "Qwen-Qwen2.5-7B-Instruct": ('<tool_call>\n{"name": "get_weather", "arguments": ', "}\n</tool_call>"),
    "meta-llama-Llama-3.1-8B-Instruct": ('{"name": "get_weather", "parameters": ', "}"),
    "mistralai-Mistral-Nemo-Instruct-2407": ('[TOOL_CALLS][{"name": "get_weather", "arguments": ',
                                             f', "id": "{ID_SLOT}"}}]'),
    "Mistral-Small-3.2-24B-Instruct-2506": (f"[TOOL_CALLS]get_weather[CALL_ID]{ID_SLOT}[ARGS]", ""),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("[TOOL_CALLS]get_weather[ARGS]", ""),
    "meetkai-functionary-medium-v3.1": ("<function=get_weather>", ""),
    "fireworks-ai-llama-3-firefunction-v2": (' functools[{"name": "get_weather", "arguments": ', "}]"),
    "deepseek-ai-DeepSeek-V3.1": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>", ""),
}
# template -> how it writes get_weather(city="Nice", days=2), its arguments tag by tag
TAGGED = {
    "Qwen3-Coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nNice\n</parameter>\n<parameter=days>\n2\n"
                   "</parameter>\n</function>\n</tool_call>",
    "Qwen3.5-4B": "<tool_call>\n<function=get_weather>\n<parameter=city>\nNice\n</parameter>\n<parameter=days>\n2\n"
                  "</parameter>\n</function>\n</tool_call>",
    "GLM-4.6": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Nice</arg_value>\n<arg_key>days</arg_key>\n"
               "<arg_value>2</arg_value>\n</tool_call>",
    "MiniMax-M2": '\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Nice</parameter>\n'
                  '<parameter name="days">2</parameter>\n</invoke>',
    "openbmb-MiniCPM5-1B": '<function name="get_weather"><param name="city">Nice</param><param name="days">2</param>'
                           '</function>',
}
# templates that keep the JSON frame, and why
JSON_KEPT = {
    "LFM2-8B-A1B": "it writes Python calls",
    "google-gemma-4-31B-it": "its values have a syntax of their own",
}
QWEN3_THINKING = Markers(start="<think>", end="</think>", start_space="\n", end_space="\n\n")


def formatter(stem: str) -> Jinja2ChatFormatter:
    return Jinja2ChatFormatter((TEMPLATES / f"{stem}.jinja").read_text(encoding="utf-8"), eos_token="</s>",
                               bos_token="<s>")


def framed_templates() -> list[str]:
    return [p.stem for p in sorted(TEMPLATES.glob("*.jinja")) if template_frame(formatter(p.stem), {}) != JSON_FRAME]


@pytest.mark.parametrize("stem", FRAMES)
def test_the_frame_is_the_templates_own(stem: str) -> None:
    frame = template_frame(formatter(stem), {})
    assert (frame.head("get_weather"), frame.closing) == FRAMES[stem]


@pytest.mark.parametrize("stem", TAGGED)
def test_a_tagged_frame_is_the_templates_own(stem: str) -> None:
    frame = template_frame(formatter(stem), {})
    assert isinstance(frame, TaggedFrame) and frame.write("get_weather", frame.tagged(ARGUMENTS)) == TAGGED[stem]


def test_a_frame_written_otherwise_after_a_thought_is_not_used_after_the_thinking() -> None:
    """The grammar lets the thinking's end marker (and the family's answer marker) in before the call, nothing
    else: gpt-oss writes a new message header there, so a reply that may think gets the JSON object."""
    gpt_oss = formatter("openai-gpt-oss-120b")
    harmony = Markers(start="<|channel|>analysis<|message|>", end="<|end|>",
                      content_start="<|start|>assistant<|channel|>final<|message|>")
    assert template_frame(gpt_oss, {}).after_thought == "<|end|><|start|>assistant"
    assert frame_for(gpt_oss, {}, harmony) is JSON_FRAME
    assert frame_for(gpt_oss, {}, None).head("get") == " to=functions.get<|channel|>commentary json<|message|>"
    assert frame_for(formatter("Qwen-Qwen3-0.6B"), {}, QWEN3_THINKING) == template_frame(formatter("Qwen-Qwen3-0.6B"),
                                                                                          {})
    cohere = formatter("Cohere2MoE")  # the action follows the thinking's end, without the answer's marker
    assert frame_for(cohere, {}, Markers(start="<|START_THINKING|>", end="<|END_THINKING|>")) != JSON_FRAME


@pytest.mark.parametrize("stem", JSON_KEPT)
def test_templates_without_a_json_frame_keep_the_json_object(stem: str) -> None:
    assert template_frame(formatter(stem), {}) is JSON_FRAME


def test_a_formatter_that_is_not_a_template_keeps_the_json_object() -> None:
    from llama_cpp_chat_formats.formats import format_chatml

    assert template_frame(format_chatml, {}) is JSON_FRAME


def pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def read_in_pieces(text: str, frame: CallFrame, markers: Markers | None, size: int) -> tuple[str, str, str]:
    """(thinking, name, arguments) of a forced reply fed ``size`` characters at a time."""
    reply = ForcedReply(frame, [t["function"] for t in TOOLS], markers)
    events = [e for piece in pieces(text, size) for e in reply.feed(piece)] + reply.finish()
    names = [t for kind, t in events if kind == "name"]
    assert len(names) == 1 and not [t for kind, t in events if kind == "content"]
    return ("".join(t for kind, t in events if kind == "reasoning"), names[0],
            "".join(t for kind, t in events if kind == "arguments"))


def test_every_frame_is_read_back_by_its_familys_reader_and_by_the_forced_reader() -> None:
    framed = framed_templates()
    assert len(framed) >= 45, framed  # most of the pinned source's templates
    for stem in framed:
        frame = template_frame(formatter(stem), {})
        frame.grammar([t["function"] for t in TOOLS])  # llama.cpp's parser takes it
        arguments = frame.tagged(ARGUMENTS) if isinstance(frame, TaggedFrame) else json.dumps(ARGUMENTS)
        text = frame.write("get_weather", arguments).replace(ID_SLOT, "a1B2c3D4e")
        content, calls = parse_tool_calls(text, TOOLS)
        assert not content and [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
            ("get_weather", ARGUMENTS)], (stem, text)
        for size in (1, 2, 3, 7, len(text)):
            thinking, name, arguments = read_in_pieces(text, frame, None, size)
            assert (thinking, name, json.loads(arguments)) == ("", "get_weather", ARGUMENTS), (stem, size)
            thinking, name, arguments = read_in_pieces(f"<think>\nweighing it</think>\n\n{text}", frame,
                                                       QWEN3_THINKING, size)
            assert (thinking, name, json.loads(arguments)) == ("weighing it", "get_weather", ARGUMENTS), (stem, size)


def test_the_json_frame_reads_the_whitespace_its_grammar_allows() -> None:
    text = '{\n  "name" : "get_weather",\n  "arguments": {"city": "Nice", "days": 2}\n}'
    for size in (1, 4, len(text)):
        _, name, arguments = read_in_pieces(text, JSON_FRAME, None, size)
        assert (name, json.loads(arguments)) == ("get_weather", ARGUMENTS) and arguments.startswith("{")


def test_a_reply_cut_short_is_no_call_and_its_text_stays() -> None:
    frame = template_frame(formatter("Qwen-Qwen3-0.6B"), {})
    reply = ForcedReply(frame, [TOOLS[0]["function"]], None)
    assert read_forced_reply('<tool_call>\n{"na', reply) == ("", [])
    reply = ForcedReply(frame, [TOOLS[0]["function"]], None)
    assert read_forced_reply('<tool_call>\n{"name": "get_weather", "arguments": {"ci', reply) == ("", [])


# --- on a model: a tiny random llama with Qwen3's template --------------------------------------------------

@pytest.fixture(scope="module")
def qwen3(tiny_model_factory: Callable[..., Path]) -> Iterator[Llama]:
    path = tiny_model_factory(chat_template=(TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8"))
    with Llama(str(path), n_ctx=1024, verbose=False) as llm:
        yield llm


ASKED = [{"role": "user", "content": "Weather in Nice?"}]
FORCED = dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0,
              max_tokens=192)


class Prefix:
    """A logits processor that makes the reply begin with ``text`` (then leaves it to the grammar)."""

    def __init__(self, llm: Llama, text: str, then_end: bool = False) -> None:
        # after a word, so that the tokenizer adds no space in front of the text (SentencePiece's "▁")
        tokens = llm.tokenize(b"a" + text.encode(), add_bos=False)
        assert llm.detokenize(tokens[:1]).strip() == b"a"
        self.tokens = tokens[1:] + ([llm.token_eos()] if then_end else [])
        self.start: int | None = None

    def __call__(self, input_ids: Any, scores: np.ndarray) -> np.ndarray:
        if self.start is None:
            self.start = len(input_ids)
        at = len(input_ids) - self.start
        if at < len(self.tokens):
            scores[:] = -np.inf
            scores[self.tokens[at]] = 0.0
        return scores


def raw_text(out: dict[str, Any]) -> str:
    return "".join(t["token"] for t in out["choices"][0]["logprobs"]["content"])


def streamed_call(chunks: Iterator[dict[str, Any]]) -> tuple[str, str, str, list[str]]:
    """(thinking, name, arguments, the order of the delta kinds) of a streamed forced reply."""
    thinking, name, arguments, order = "", "", "", []
    for chunk in chunks:
        delta = chunk["choices"][0]["delta"]
        for key in ("reasoning_content", "content", "tool_calls"):
            if delta.get(key) and (not order or order[-1] != key):
                order.append(key)
        thinking += delta.get("reasoning_content") or ""
        for call in delta.get("tool_calls") or ():
            name += call["function"].get("name") or ""
            arguments += call["function"]["arguments"]
    return thinking, name, arguments, order


def test_a_forced_call_is_written_as_the_template_writes_calls(qwen3: Llama) -> None:
    out = qwen3.create_chat_completion(ASKED, logprobs=True, reasoning_format="none", **FORCED)
    text = raw_text(out)
    assert text.startswith('<tool_call>\n{"name": "get_weather", "arguments": {') and text.endswith("}\n</tool_call>")
    message = out["choices"][0]["message"]
    assert out["choices"][0]["finish_reason"] == "tool_calls" and message["content"] is None
    assert [c["function"] for c in message["tool_calls"]] == [c["function"] for c in parse_tool_calls(text, TOOLS)[1]]
    thinking, name, arguments, _ = streamed_call(qwen3.create_chat_completion(ASKED, stream=True, **FORCED))
    assert (thinking, name, json.loads(arguments)) == ("", "get_weather",
                                                        json.loads(message["tool_calls"][0]["function"]["arguments"]))


def test_a_reasoning_model_thinks_before_its_forced_call(qwen3: Llama) -> None:
    out = qwen3.create_chat_completion(ASKED, logprobs=True, reasoning_format="auto",
                                       logits_processor=[Prefix(qwen3, "<think>\nhmm\n</think>\n\n")], **FORCED)
    text = raw_text(out)  # (the random model writes some of the whitespace the grammar allows before the call)
    assert text.startswith("<think>\nhmm\n</think>\n\n") and text.endswith("}\n</tool_call>")
    assert text[len("<think>\nhmm\n</think>"):].lstrip().startswith('<tool_call>\n{"name": "get_weather"')
    message = out["choices"][0]["message"]
    assert message["reasoning_content"].strip() == "hmm" and message["content"] is None
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    written = text[text.index('"arguments": ') + len('"arguments": '):-len("}\n</tool_call>")]
    assert json.loads(call["function"]["arguments"]) == json.loads(written)
    thinking, name, arguments, order = streamed_call(qwen3.create_chat_completion(
        ASKED, stream=True, reasoning_format="auto", logits_processor=[Prefix(qwen3, "<think>\nhmm\n</think>\n\n")],
        **FORCED))
    assert order == ["reasoning_content", "tool_calls"]
    assert (thinking, name, json.loads(arguments)) == (message["reasoning_content"], "get_weather",
                                                        json.loads(call["function"]["arguments"]))


def test_a_grammar_built_for_every_chosen_tool(qwen3: Llama) -> None:
    out = qwen3.create_chat_completion(ASKED, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=96,
                                       logprobs=True, reasoning_format="none")
    (call,) = out["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] in {"get", "get_weather"}
    assert raw_text(out).startswith(f'<tool_call>\n{{"name": "{call["function"]["name"]}", "arguments": ')


@pytest.fixture(scope="module")
def qwen3_coder(tiny_model_factory: Callable[..., Path]) -> Iterator[Llama]:
    path = tiny_model_factory(chat_template=(TEMPLATES / "Qwen3-Coder.jinja").read_text(encoding="utf-8"))
    with Llama(str(path), n_ctx=1024, verbose=False) as llm:
        yield llm


def test_a_forced_call_with_tagged_arguments_reads_them_by_the_schema(qwen3_coder: Llama) -> None:
    out = qwen3_coder.create_chat_completion(ASKED, logprobs=True, **FORCED)
    text = raw_text(out)
    assert text.startswith("<tool_call>\n<function=get_weather>\n<parameter=city>\n")
    assert text.endswith("</parameter>\n</function>\n</tool_call>")
    (call,) = out["choices"][0]["message"]["tool_calls"]
    arguments = json.loads(call["function"]["arguments"])
    assert isinstance(arguments["city"], str) and isinstance(arguments.get("days", 0), int)
    assert text.count("<parameter=") == len(arguments)
    thinking, name, streamed, order = streamed_call(qwen3_coder.create_chat_completion(ASKED, stream=True, **FORCED))
    assert (thinking, name, json.loads(streamed), order) == ("", "get_weather", arguments, ["tool_calls"])


def test_tagged_arguments_follow_every_kind_of_parameter() -> None:
    """Enums, bounded and free strings, numbers, $ref'd objects and lists: the grammar builds (llama.cpp's
    parser takes it) and a call written in the frame is read back by the schema."""
    frame = template_frame(formatter("Qwen3-Coder"), {})
    assert isinstance(frame, TaggedFrame)
    schema = {"type": "object", "$defs": {"Place": {"type": "object", "properties": {"lat": {"type": "number"}}}},
              "properties": {"unit": {"type": "string", "enum": ["C", "F"]}, "code": {"type": "string",
                             "maxLength": 5}, "note": {"type": "string"}, "n": {"type": "integer"},
                             "place": {"$ref": "#/$defs/Place"}, "tags": {"type": "array", "items": {"type": "string"}}},
              "required": ["unit", "code"]}
    function = {"name": "f", "parameters": schema}
    grammar = frame.grammar([function]).grammar
    assert 'call0-value0 ::= "C" | "F"' in grammar and "[^\\n]{0,5}" in grammar
    arguments = {"unit": "C", "code": "007", "note": "two\nlines", "n": 3, "place": {"lat": 1.5}, "tags": ["a"]}
    head = frame.head("f")
    assert frame.read_arguments(frame.write("f", frame.tagged(arguments))[len(head):], function) == arguments
    assert frame.read_arguments(frame.write("f", frame.tagged(arguments))[len(head):-3], function) is None  # cut


# --- several calls in one reply (tool_choice "required", parallel_tool_calls) -------------------------------

# template -> what it writes between a call's arguments and the next call's name (None: one call a reply here)
LINKS = {
    "Qwen-Qwen3-0.6B": '}\n</tool_call>\n<tool_call>\n{"name": "',
    "Mistral-Small-3.2-24B-Instruct-2506": "[TOOL_CALLS]",
    "mistralai-Mistral-Nemo-Instruct-2407": f', "id": "{ID_SLOT}"}}, {{"name": "',
    "Qwen3-Coder": ">\n</function>\n</tool_call>\n<tool_call>\n<function=",
    "GLM-4.6": "\n</tool_call>\n<tool_call>",
    "meta-llama-Llama-3.1-8B-Instruct": None,  # its template refuses a second call
    "Kimi-K2-Instruct": None,  # its calls' ids count (functions.NAME:0, :1...), which one frame cannot write
    "Cohere2MoE": None,  # so do its tool_call_id values
}
SECOND = {"city": "Oslo"}


@pytest.mark.parametrize("stem", LINKS)
def test_the_link_between_calls_is_the_templates_own(stem: str) -> None:
    assert template_frame(formatter(stem), {}).link == LINKS[stem]


def read_calls_in_pieces(text: str, frame: CallFrame, size: int, parallel: bool = True) -> list[tuple[str, Any]]:
    """The (name, arguments) of the calls of a forced reply fed ``size`` characters at a time."""
    reply = ForcedReply(frame, [t["function"] for t in TOOLS], None, parallel)
    events = [e for piece in pieces(text, size) for e in reply.feed(piece)] + reply.finish()
    assert not [t for kind, t in events if kind == "content"]
    return [(name, json.loads(arguments)) for name, arguments in calls_of(events)]


def test_linked_calls_are_read_back_by_the_familys_reader_and_by_the_forced_reader() -> None:
    linked = [stem for stem in framed_templates() if template_frame(formatter(stem), {}).link]
    assert len(linked) >= 30, linked
    expected = [("get_weather", ARGUMENTS), ("get", {}), ("get_weather", SECOND)]
    for stem in linked:
        frame = template_frame(formatter(stem), {})
        grammar = frame.grammar([t["function"] for t in TOOLS], parallel=True).grammar  # llama.cpp's parser takes it
        assert "one-call)*" in grammar
        written = [(name, frame.tagged(args) if isinstance(frame, TaggedFrame) else json.dumps(args))
                   for name, args in expected]
        text = frame.write_calls(written).replace(ID_SLOT, "a1B2c3D4e")
        content, calls = parse_tool_calls(text, TOOLS)
        assert not content and [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
            expected, (stem, text)
        for size in (1, 3, len(text)):
            assert read_calls_in_pieces(text, frame, size) == expected, (stem, size)


@pytest.mark.parametrize("stem", ["Qwen3-Coder", "GLM-4.6", "MiniMax-M2"])
def test_a_tagged_calls_arguments_stream_once_the_next_call_has_begun(stem: str) -> None:
    """Tagged arguments are JSON only once the call is whole: a call's come out when the next call's head
    is complete, not at the end of the reply."""
    frame = template_frame(formatter(stem), {})
    assert isinstance(frame, TaggedFrame) and frame.link
    text = frame.write_calls([("get_weather", frame.tagged(ARGUMENTS)), ("get", frame.tagged({}))])
    # the second call's head, and one character more: with no text after the name (Qwen3-Coder's), "get" is
    # whole only once what follows cannot continue it into "get_weather"
    second = text.index(frame.link) + len(frame.link) + len("get" + frame.after_name) + 1
    reply = ForcedReply(frame, [t["function"] for t in TOOLS], None, parallel=True)
    events = [event for at in range(0, second, 4) for event in reply.feed(text[at:min(at + 4, second)])]
    assert events == [("name", "get_weather"), ("arguments", json.dumps(ARGUMENTS)), ("name", "get")]
    assert reply.feed(text[second:]) == [] and reply.finish() == [("arguments", "{}")]


def test_a_links_text_inside_a_string_argument_is_part_of_the_argument() -> None:
    frame = template_frame(formatter("Mistral-Small-3.2-24B-Instruct-2506"), {})
    text = frame.write_calls([("get_weather", json.dumps({"city": "[TOOL_CALLS]get[ARGS]{}"})),
                              ("get", "{}")]).replace(ID_SLOT, "a1B2c3D4e")
    for size in (1, 5, len(text)):
        assert read_calls_in_pieces(text, frame, size) == [("get_weather", {"city": "[TOOL_CALLS]get[ARGS]{}"}),
                                                           ("get", {})]


def test_one_call_without_parallel_or_a_link() -> None:
    functions = [t["function"] for t in TOOLS]
    assert "one-call)*" not in template_frame(formatter("Qwen-Qwen3-0.6B"), {}).grammar(functions).grammar
    assert "one-call)*" not in template_frame(formatter("meta-llama-Llama-3.1-8B-Instruct"), {}).grammar(
        functions, parallel=True).grammar


PARALLEL = dict(tools=TOOLS, tool_choice="required", temperature=0, max_tokens=160, reasoning_format="none")
LINKED_START = '<tool_call>\n{"name": "get", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "get_weather"'


def streamed_calls(chunks: Iterator[dict[str, Any]]) -> list[tuple[str, str]]:
    """(name, arguments) of each streamed call, by its index."""
    calls: dict[int, tuple[str, str]] = {}
    for chunk in chunks:
        for call in chunk["choices"][0]["delta"].get("tool_calls") or ():
            name, arguments = calls.get(call["index"], ("", ""))
            calls[call["index"]] = (name + (call["function"].get("name") or ""),
                                    arguments + call["function"]["arguments"])
    return [calls[i] for i in sorted(calls)]


def test_a_required_reply_may_call_several_tools(qwen3: Llama) -> None:
    """Two calls linked as the template links them, then the end: the grammar lets them through (a token it
    refused would be an error), and both are read back, whole and streamed, as the template's reader reads
    them.  (Left to itself, the random model goes on calling until max_tokens.)"""
    two = LINKED_START + ', "arguments": {"city": "Nice"}}\n</tool_call>'
    out = qwen3.create_chat_completion(ASKED, logprobs=True, logits_processor=[Prefix(qwen3, two, then_end=True)],
                                       **PARALLEL)
    assert raw_text(out) == two
    calls = out["choices"][0]["message"]["tool_calls"]
    assert [c["function"] for c in calls] == [c["function"] for c in parse_tool_calls(two, TOOLS)[1]]
    assert [c["function"]["name"] for c in calls] == ["get", "get_weather"]
    assert out["choices"][0]["finish_reason"] == "tool_calls" and "function_call" not in out["choices"][0]["message"]
    streamed = streamed_calls(qwen3.create_chat_completion(ASKED, stream=True, logits_processor=[
        Prefix(qwen3, two, then_end=True)], **PARALLEL))
    assert [(name, json.loads(arguments)) for name, arguments in streamed] == [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def test_parallel_tool_calls_false_keeps_a_required_reply_to_one_call(qwen3: Llama) -> None:
    with pytest.raises(ValueError, match="left no token"):  # the link is not in its grammar
        qwen3.create_chat_completion(ASKED, parallel_tool_calls=False, logits_processor=[
            Prefix(qwen3, LINKED_START)], **PARALLEL)
    out = qwen3.create_chat_completion(ASKED, parallel_tool_calls=False, logprobs=True, logits_processor=[
        Prefix(qwen3, '<tool_call>\n{"name": "get", "arguments": {}}')], **PARALLEL)
    assert raw_text(out) == '<tool_call>\n{"name": "get", "arguments": {}}\n</tool_call>'
    assert [c["function"]["name"] for c in out["choices"][0]["message"]["tool_calls"]] == ["get"]


def test_parallel_tool_calls_false_ends_an_auto_reply_after_its_first_call(qwen3: Llama) -> None:
    """An "auto" reply's call is constrained once it begins (:mod:`.lazy_calls`): two linked calls are read
    back; with parallel_tool_calls false the grammar ends the reply after the first, as llama-server's does,
    so a logits processor that forces a second leaves no token."""
    two = Prefix(qwen3, LINKED_START + ', "arguments": {"city": "Nice"}}\n</tool_call>', then_end=True)
    auto = dict(tools=TOOLS, tool_choice="auto", temperature=0, max_tokens=160, reasoning_format="none")
    both = qwen3.create_chat_completion(ASKED, logits_processor=[two], **auto)["choices"][0]["message"]
    assert [c["function"]["name"] for c in both["tool_calls"]] == ["get", "get_weather"]
    streamed = streamed_calls(qwen3.create_chat_completion(ASKED, stream=True, logits_processor=[Prefix(
        qwen3, LINKED_START + ', "arguments": {"city": "Nice"}}\n</tool_call>', then_end=True)], **auto))
    assert [name for name, _ in streamed] == ["get", "get_weather"]
    with pytest.raises(ValueError, match="left no token"):
        qwen3.create_chat_completion(ASKED, parallel_tool_calls=False, logits_processor=[Prefix(
            qwen3, LINKED_START + ', "arguments": {"city": "Nice"}}\n</tool_call>', then_end=True)], **auto)


def test_the_json_frame_keeps_the_parameters_local_refs() -> None:
    """pydantic's schemas keep nested models and enums in ``$defs`` and point at them with ``#/$defs/...``:
    the frame puts the parameters inside its own object, and their refs follow them there."""
    unit = {"type": "string", "enum": ["C", "F"]}
    weather = {"name": "get_weather", "parameters": {"$defs": {"Unit": unit}, "type": "object",
                                                     "properties": {"unit": {"$ref": "#/$defs/Unit"}},
                                                     "required": ["unit"]}}
    legacy = {"name": "get", "parameters": {"definitions": {"N": {"type": "integer"}}, "type": "object",
                                            "properties": {"n": {"$ref": "#/definitions/N"}}, "required": ["n"]}}
    for functions in ([weather], [weather, legacy]):
        grammar = JSON_FRAME.grammar(functions).grammar
        assert '"\\"C\\""' in grammar, grammar  # the enum the ref points at, in GBNF
