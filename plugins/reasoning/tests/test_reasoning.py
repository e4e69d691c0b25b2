"""Reasoning content on tiny models with each family's real template (the pinned source's), the reply
forced by a grammar: the thinking in reasoning_content, the answer in content, streamed and not; a tool
call after the thinking; reasoning_format="none" leaves everything in content."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import attrs
import pytest

from llama_cpp import Llama
from llama_cpp.llama_grammar import LlamaGrammar
from llama_cpp.reasoning import TemplateFacts, detect_family
from llama_cpp.reasoning_split import Markers, ReasoningSplitter, split_reasoning
from llama_cpp.testing import llama_cpp_source_dir

# family -> (template file of the pinned source, the forced reply)
FAMILIES = {
    "think": ("Qwen-Qwen3-0.6B.jinja", "<think>abc</think>answer"),
    "gpt-oss": ("openai-gpt-oss-120b.jinja",
                "<|channel|>analysis<|message|>abc<|end|><|start|>assistant<|channel|>final<|message|>answer"),
    "gemma4": ("google-gemma-4-31B-it.jinja", "<|channel>thought\nabc<channel|>answer"),
    "mistral": ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "[THINK]abc[/THINK]answer"),
    # the answer in markers of its own (the generation prompts of Cohere2 MoE and Kimi K3 open the block)
    "cohere2-moe": ("Cohere2MoE.jinja", "abc<|END_THINKING|><|START_TEXT|>answer<|END_TEXT|>"),
    "command-r7b": ("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
                    "<|START_THINKING|>abc<|END_THINKING|><|START_RESPONSE|>answer<|END_RESPONSE|>"),
    "kimi-k3": ("Kimi-K3.jinja", "abc<|close|>think<|sep|><|open|>response<|sep|>answer<|close|>response<|sep|>"),
}
HI = [{"role": "user", "content": "hi"}]
# tokens enough for every forced reply however the random model spells it (a character a token on one
# machine's float results, longer pieces on another's: 64 were too few for gpt-oss's 90 characters on one)
LIMIT = 256


def template(name: str) -> str:
    return (llama_cpp_source_dir() / "models" / "templates" / name).read_text()


@pytest.fixture(scope="module")
def model_of(tiny_model_factory: Callable[..., Path]) -> Callable[[str], Llama]:
    made: dict[str, Llama] = {}

    def get(family: str) -> Llama:
        if family not in made:
            path = tiny_model_factory(chat_template=template(FAMILIES[family][0]))
            made[family] = Llama(str(path), n_ctx=1024, verbose=False)  # (Command R7B's preamble: 650 tokens)
        return made[family]

    yield get
    for llm in made.values():
        llm.close()


def forced(text: str) -> LlamaGrammar:
    return LlamaGrammar.from_string("root ::= " + json.dumps(text), verbose=False)


def streamed(chunks: Any) -> tuple[str, str, list[str]]:
    """(reasoning, content, the order of the delta kinds) of a stream."""
    reasoning, content, order = "", "", []
    for chunk in chunks:
        delta = chunk["choices"][0]["delta"]
        for key in ("reasoning_content", "content"):
            if delta.get(key):
                if not order or order[-1] != key:
                    order.append(key)
        reasoning += delta.get("reasoning_content") or ""
        content += delta.get("content") or ""
    return reasoning, content, order


@pytest.mark.parametrize("family", FAMILIES)
def test_the_family_is_detected_from_its_template(family: str) -> None:
    found = detect_family(TemplateFacts(template=template(FAMILIES[family][0])))
    assert found is not None and found.name == family


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("fmt", ["deepseek", "auto", "deepseek-legacy"])
def test_thinking_goes_to_reasoning_content(model_of: Callable[[str], Llama], family: str, fmt: str) -> None:
    llm, reply = model_of(family), FAMILIES[family][1]
    out = llm.create_chat_completion(HI, grammar=forced(reply), temperature=0, max_tokens=LIMIT, reasoning_format=fmt)
    message = out["choices"][0]["message"]
    assert message["reasoning_content"] == "abc" and message["content"] == "answer"
    chunks = llm.create_chat_completion(HI, grammar=forced(reply), temperature=0, max_tokens=LIMIT,
                                        reasoning_format=fmt, stream=True)
    assert streamed(chunks) == ("abc", "answer", ["reasoning_content", "content"])


@pytest.mark.parametrize("family", FAMILIES)
def test_none_leaves_everything_in_content(model_of: Callable[[str], Llama], family: str) -> None:
    llm, reply = model_of(family), FAMILIES[family][1]
    out = llm.create_chat_completion(HI, grammar=forced(reply), temperature=0, max_tokens=LIMIT, reasoning_format="none")
    assert out["choices"][0]["message"] == {"role": "assistant", "content": reply}
    chunks = llm.create_chat_completion(HI, grammar=forced(reply), temperature=0, max_tokens=LIMIT, stream=True)
    assert streamed(chunks) == ("", reply, ["content"])  # the library's default is none


# how each family's reply goes on after a continued message's thinking ("Let me"), and ends it
GOES_ON = {"think": " see</think>answer",
           "gpt-oss": " see<|end|><|start|>assistant<|channel|>final<|message|>answer",
           "gemma4": " see<channel|>answer", "mistral": " see[/THINK]answer",
           "cohere2-moe": " see<|END_THINKING|><|START_TEXT|>answer<|END_TEXT|>",
           "command-r7b": " see<|END_THINKING|><|START_RESPONSE|>answer<|END_RESPONSE|>",
           "kimi-k3": " see<|close|>think<|sep|><|open|>response<|sep|>answer<|close|>response<|sep|>"}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stream", [False, True])
def test_a_continued_thinking_goes_on_in_reasoning_content(model_of: Callable[[str], Llama], family: str,
                                                            stream: bool) -> None:
    """The prompt ends inside the block the continued message's thinking opened: the reply's thinking is its
    own part of it (the caller's is the caller's), then the answer."""
    llm = model_of(family)
    messages = [*HI, {"role": "assistant", "content": "", "reasoning_content": "Let me"}]
    prompt = llm.render_chat_prompt(messages, assistant_prefill=True).prompt
    assert prompt.endswith("Let me")
    out = llm.create_chat_completion(messages, assistant_prefill=True, grammar=forced(GOES_ON[family]),
                                     temperature=0, max_tokens=LIMIT, reasoning_format="auto", stream=stream)
    if stream:
        assert streamed(out) == (" see", "answer", ["reasoning_content", "content"])
    else:
        message = out["choices"][0]["message"]
        assert (message["reasoning_content"], message["content"]) == (" see", "answer")


# family -> the template variables and a reply that answers at once, in the family's answer markers
ANSWERS_FIRST = {"gpt-oss": ({}, "<|channel|>final<|message|>answer"),
                 "cohere2-moe": ({"reasoning": False}, "<|START_TEXT|>answer<|END_TEXT|>"),
                 "command-r7b": ({}, "<|START_RESPONSE|>answer<|END_RESPONSE|>"),
                 "kimi-k3": ({"thinking": False}, "answer<|close|>response<|sep|>")}


@pytest.mark.parametrize("family", ANSWERS_FIRST)
@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_without_thinking_loses_its_markers(model_of: Callable[[str], Llama], family: str,
                                                     stream: bool) -> None:
    """A reply that begins with its answer's marker (or, where the generation prompt wrote it, with the
    answer): the answer alone, as llama-server gives it."""
    template_kwargs, reply = ANSWERS_FIRST[family]
    out = model_of(family).create_chat_completion(HI, grammar=forced(reply), temperature=0, max_tokens=LIMIT,
                                                  reasoning_format="auto", chat_template_kwargs=template_kwargs,
                                                  stream=stream)
    if stream:
        assert streamed(out) == ("", "answer", ["content"])
    else:
        assert out["choices"][0]["message"] == {"role": "assistant", "content": "answer"}


def test_a_continued_answer_goes_on_in_content(model_of: Callable[[str], Llama]) -> None:
    llm = model_of("think")
    messages = [*HI, {"role": "assistant", "content": "The ans", "reasoning_content": "Easy."}]
    out = llm.create_chat_completion(messages, assistant_prefill=True, grammar=forced("wer"), temperature=0,
                                     max_tokens=LIMIT, reasoning_format="auto")
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "wer"}


TOOLS = [{"type": "function", "function": {"name": "get", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}}}}]


# family -> a reply that thinks "abc" and then calls get(a=1), in the family's own call syntax
CALLS = {
    "think": '<think>abc</think><tool_call>\n{"name": "get", "arguments": {"a": 1}}\n</tool_call>',
    "gpt-oss": ('<|channel|>analysis<|message|>abc<|end|><|start|>assistant<|channel|>commentary to=functions.get '
                '<|constrain|>json<|message|>{"a": 1}'),
    "gemma4": "<|channel>thought\nabc<channel|><|tool_call>call:get{a:1}<tool_call|>",
    "mistral": '[THINK]abc[/THINK][TOOL_CALLS]get[ARGS]{"a": 1}',
    "cohere2-moe": 'abc<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get", "parameters": {"a": 1}}]'
                   "<|END_ACTION|>",
    "kimi-k3": ('abc<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="get" index="1"<|sep|><|open|>argument '
                'key="a" type="number"<|sep|>1<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>'),
}


def called(chunks: list[Any]) -> list[tuple[str, Any]]:
    """The tool calls of a stream: (name, arguments) each."""
    calls: dict[int, list[str]] = {}
    for chunk in chunks:
        for call in chunk["choices"][0]["delta"].get("tool_calls") or []:
            entry = calls.setdefault(call["index"], ["", ""])
            entry[0] += call["function"].get("name") or ""
            entry[1] += call["function"].get("arguments") or ""
    return [(name, json.loads(arguments)) for name, arguments in calls.values()]


@pytest.mark.parametrize("family", CALLS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_call_after_the_thinking_is_parsed(model_of: Callable[[str], Llama], family: str, stream: bool) -> None:
    out = model_of(family).create_chat_completion(HI, tools=TOOLS, grammar=forced(CALLS[family]), temperature=0,
                                                  max_tokens=LIMIT, reasoning_format="auto", stream=stream)
    if not stream:
        message = out["choices"][0]["message"]
        assert message["reasoning_content"] == "abc" and not message["content"]
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == \
            [("get", {"a": 1})]
        assert out["choices"][0]["finish_reason"] == "tool_calls"
        return
    chunks = list(out)
    assert streamed(chunks)[:2] == ("abc", "")  # no header of the call leaks into the content
    assert called(chunks) == [("get", {"a": 1})]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_without_the_split_the_thinking_stays_in_the_content_before_the_call(model_of: Callable[[str], Llama]) -> None:
    out = model_of("gpt-oss").create_chat_completion(HI, tools=TOOLS, grammar=forced(CALLS["gpt-oss"]), temperature=0,
                                                     max_tokens=LIMIT, reasoning_format="none")
    message = out["choices"][0]["message"]
    # llama-server's split with reasoning_format none: the analysis message is content
    assert message["content"] == "<|channel|>analysis<|message|>abc<|end|>"
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get"]


def test_gemma4_calls_in_its_real_vocabulary(tiny_model_factory: Callable[..., Path]) -> None:
    """Gemma 4's markers and its string quote are tokens of its vocabulary (user-defined ones: their text is
    in the reply whatever is preserved): a call with a quoted string, after the thought."""
    path = tiny_model_factory(vocab="gemma-4", n_embd=32, n_ff=64, chat_template=template(FAMILIES["gemma4"][0]))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
    reply = '<|channel>thought\nabc<channel|><|tool_call>call:get_weather{city:<|"|>Paris, FR<|"|>,days:2}<tool_call|>'
    with Llama(str(path), n_ctx=512, verbose=False) as llm:
        assert len(llm.tokenize(b'<|tool_call><|"|>', add_bos=False, special=True)) == 2
        for stream in (False, True):
            out = llm.create_chat_completion(HI, tools=tools, grammar=forced(reply), temperature=0, max_tokens=LIMIT,
                                             reasoning_format="auto", stream=stream)
            if stream:
                chunks = list(out)
                assert streamed(chunks)[:2] == ("abc", "")
                assert called(chunks) == [("get_weather", {"city": "Paris, FR", "days": 2})]
            else:
                message = out["choices"][0]["message"]
                assert message["reasoning_content"] == "abc"
                assert [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                        for c in message["tool_calls"]] == [("get_weather", {"city": "Paris, FR", "days": 2})]


def test_a_json_response_format_comes_after_the_thinking(model_of: Callable[[str], Llama]) -> None:
    out = model_of("think").create_chat_completion(HI, response_format={"type": "json_object"}, temperature=0,
                                                   max_tokens=40, reasoning_format="auto")
    content = out["choices"][0]["message"]["content"]
    assert content.lstrip().startswith("{")


def test_a_bad_reasoning_format_names_the_allowed_values(model_of: Callable[[str], Llama]) -> None:
    with pytest.raises(ValueError, match="reasoning_format must be one of 'none', 'deepseek', 'deepseek-legacy'"):
        model_of("think").create_chat_completion(HI, max_tokens=1, reasoning_format="think")


def test_reasoning_effort_reaches_the_template(model_of: Callable[[str], Llama]) -> None:
    llm = model_of("gpt-oss")
    prompt = llm.render_chat_prompt(HI, chat_template_kwargs={"reasoning_effort": "high"}).prompt
    assert "Reasoning: high" in prompt


MARKERS = Markers(start="<think>", end="</think>", start_space="\n", end_space="\n\n")


@pytest.mark.parametrize("text, expected", [
    ("<think>\n abc \n</think>\n\nanswer ", (" abc \n", "answer ")),  # as llama-server splits Qwen3's
    ("answer <think>x</think>", ("", "answer <think>x</think>")),  # only a block at the start
    ("<think>abc", ("abc", "")),
    ("abc</think>answer", ("", "abc</think>answer")),
    ("<think>a</think>b<think>c</think>", ("a", "b<think>c</think>")),  # only the first block
])
def test_split(text: str, expected: tuple[str, str]) -> None:
    assert split_reasoning(text, MARKERS) == expected


@pytest.mark.parametrize("size", [1, 3, 100])
def test_where_the_answer_begins_in_the_text_fed(size: int) -> None:
    """(How a reply's tool calls are looked for after its thinking only: a marker in the thought is thought.)"""
    reply = "<think>\nI may write <tool_call>\n</think>\n\n<tool_call>x"
    splitter = ReasoningSplitter(MARKERS)
    for at in range(0, len(reply), size):
        splitter.feed(reply[at:at + size])
    assert reply[splitter.answer_at:] == "<tool_call>x" and not splitter.thinking
    plain = ReasoningSplitter(MARKERS)
    plain.feed("  <tool_call>x")
    assert plain.answer_at == 0 and not plain.thinking
    opened = ReasoningSplitter(attrs.evolve(MARKERS, opened=True))
    opened.feed("abc")
    assert opened.answer_at is None and opened.thinking


def test_an_opened_block_and_pieces_that_cut_the_markers() -> None:
    markers = Markers(start="<think>", end="</think>", opened=True, opened_with="\n")
    splitter = ReasoningSplitter(markers)
    pieces = [p for piece in ["ab", "c</", "thi", "nk>an", "swer"] for p in splitter.feed(piece)]
    pieces += splitter.finish()
    assert "".join(t for k, t in pieces if k == "reasoning") == "\nabc"
    assert "".join(t for k, t in pieces if k == "content") == "answer"
    assert all("<" not in t for _, t in pieces)


def test_the_answers_markers_and_what_follows_its_end_are_dropped_whatever_the_pieces() -> None:
    """Cohere2 MoE's answer ends at ``<|END_TEXT|>``: the turn's closing markers may follow, never answer text
    (llama.cpp's parser allows only them); no piece carries part of a marker."""
    markers = Markers(start="<|START_THINKING|>", end="<|END_THINKING|>", content_start="<|START_TEXT|>",
                      content_end="<|END_TEXT|>", leading_content_start="<|START_TEXT|>", opened=True)
    reply = "abc<|END_THINKING|><|START_TEXT|>ans<wer><|END_TEXT|><|END_OF_TURN_TOKEN|>"
    assert split_reasoning(reply, markers) == ("abc", "ans<wer>")
    for size in (1, 2, 3, 5, 7):
        splitter = ReasoningSplitter(markers)
        pieces = [p for at in range(0, len(reply), size) for p in splitter.feed(reply[at:at + size])]
        pieces += splitter.finish()
        assert "".join(t for k, t in pieces if k == "reasoning") == "abc"
        assert "".join(t for k, t in pieces if k == "content") == "ans<wer>"
        assert not any("|" in t for _, t in pieces)
    assert split_reasoning("<|START_TEXT|>answer", attrs.evolve(markers, opened=False)) == ("", "answer")
    assert split_reasoning("<|START_TEXT", attrs.evolve(markers, opened=False)) == ("", "<|START_TEXT")


def test_a_plugin_adds_a_family(tiny_model_factory: Callable[..., Path]) -> None:
    from llama_cpp.plugins import ReasoningFamily, hookimpl
    from llama_cpp.testing import registered_plugin

    class Reasons:
        @hookimpl
        def llama_cpp_reasoning_families(self) -> list[ReasoningFamily]:
            return [ReasoningFamily(name="reason-tags", start="<reason>", end="</reason>", order=0,
                                    detect=lambda facts: facts.mentions("<reason>"))]

    path = tiny_model_factory(chat_template="{% for m in messages %}{{ m.content }}{% endfor %}<reason>")
    with registered_plugin(Reasons(), name="reasons"), Llama(str(path), n_ctx=256, verbose=False) as llm:
        out = llm.create_chat_completion(HI, grammar=forced("abc</reason>answer"), temperature=0, max_tokens=32,
                                         reasoning_format="auto")
        message = out["choices"][0]["message"]
        assert (message["reasoning_content"], message["content"]) == ("abc", "answer")  # opened by the prompt


def test_a_reasoning_budget_counts_the_familys_block() -> None:
    from llama_cpp._chat_reasoning import budget_markers

    markers = Markers(start="[THINK]", end="[/THINK]", opened=True)
    request: dict[str, Any] = {"reasoning_budget": 8}
    budget_markers(request, markers)
    assert (request["reasoning_start"], request["reasoning_end"], request["reasoning_start_in_prompt"]) == (
        "[THINK]", "[/THINK]", True)
    mine: dict[str, Any] = {"reasoning_budget": 8, "reasoning_end": "</r>"}
    budget_markers(mine, markers)
    assert mine["reasoning_end"] == "</r>"  # the call's own marker wins
    untouched: dict[str, Any] = {}
    budget_markers(untouched, markers)
    assert untouched == {}  # no budget: nothing to count


def test_a_familys_control_token_markers_are_kept_for_the_split(tiny_model_factory: Callable[..., Path]) -> None:
    """Markers that are control tokens of the vocabulary (gpt-oss's ``<|channel|>``, Mistral's ``[THINK]`` in
    their real vocabularies; here two of Llama 3's reserved tokens): the reply keeps their text only while a
    split needs it, as llama-server keeps its preserved tokens."""
    from llama_cpp.plugins import ReasoningFamily, hookimpl
    from llama_cpp.testing import registered_plugin

    start, end = "<|reserved_special_token_0|>", "<|reserved_special_token_1|>"

    class ControlMarkers:
        @hookimpl
        def llama_cpp_reasoning_families(self) -> list[ReasoningFamily]:
            return [ReasoningFamily(name="control-markers", start=start, end=end, order=0,
                                    detect=lambda facts: facts.mentions(start))]

    template = "{% for m in messages %}{{ m.content }}{% endfor %}{# thinks in " + start + " ... " + end + " #}"
    path = tiny_model_factory(vocab="llama-bpe", chat_template=template)
    with registered_plugin(ControlMarkers(), name="control-markers"), \
            Llama(str(path), n_ctx=256, verbose=False) as llm:
        first, last = (llm.tokenize(marker.encode(), add_bos=False, special=True) for marker in (start, end))
        assert llm.detokenize(first, special=False) == b""  # a control token: no text of its own
        grammar = LlamaGrammar.from_string(f'root ::= <[{first[0]}]> "abc" <[{last[0]}]> "answer"')
        asked = dict(grammar=grammar, temperature=0, max_tokens=16)
        message = llm.create_chat_completion(HI, reasoning_format="auto", **asked)["choices"][0]["message"]
        assert (message["reasoning_content"], message["content"]) == ("abc", "answer")
        streamed = {"reasoning_content": "", "content": ""}
        for chunk in llm.create_chat_completion(HI, reasoning_format="auto", stream=True, **asked):
            for key in streamed:
                streamed[key] += chunk["choices"][0]["delta"].get(key) or "" if chunk["choices"] else ""
        assert streamed == {"reasoning_content": "abc", "content": "answer"}
        # no split asked, or no chat: control tokens stay out of the text, as the detokenizer leaves them
        plain = llm.create_chat_completion(HI, reasoning_format="none", **asked)["choices"][0]["message"]
        assert plain["content"] == "abcanswer" and "reasoning_content" not in plain
        assert llm.create_completion("hi", **asked)["choices"][0]["text"] == "abcanswer"
