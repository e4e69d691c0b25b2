"""An "auto" reply's calls, constrained from their opening marker on (llama-server's lazy grammar): which
templates get the grammar, and on a tiny random model (whose text after a marker is otherwise noise) a reply
that opens a call writes a whole call of an offered tool, as the template writes calls, whole and streamed,
while a reply that opens none is the text it would have been without the grammar."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from llama_cpp import Llama
from llama_cpp_chat_formats import Jinja2ChatFormatter
from llama_cpp_chat_formats.lazy_calls import lazy_calls
from llama_cpp_chat_formats.tool_calls import parse_tool_calls
from test_forced_calls import ASKED, TEMPLATES, TOOLS, Prefix, raw_text

FUNCTIONS = [tool["function"] for tool in TOOLS]


def lazy_for(template: str, parallel_tool_calls: bool | None = None, **variables: Any) -> Any:
    formatter = Jinja2ChatFormatter(template=(TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8"),
                                    eos_token="</s>", bos_token="<s>")
    prompt = formatter(messages=ASKED, tools=TOOLS, **variables).prompt
    return lazy_calls(formatter, variables, FUNCTIONS, parallel_tool_calls, prompt)


def test_the_grammar_starts_at_the_frames_marker_and_links_calls_unless_told_not_to() -> None:
    lazy = lazy_for("Qwen-Qwen2.5-7B-Instruct")
    assert lazy.trigger == "<tool_call>"
    assert 'root ::= "<tool_call>\\n{\\"name\\": \\"" one-call (' in lazy.grammar.grammar  # linked calls
    assert "one-call)*" not in lazy_for("Qwen-Qwen2.5-7B-Instruct", parallel_tool_calls=False).grammar.grammar
    assert lazy_for("Mistral-Small-3.2-24B-Instruct-2506").trigger == "[TOOL_CALLS]"
    assert lazy_for("Qwen3-Coder").trigger == "<tool_call>"


def test_a_reply_that_may_think_gets_the_grammar_after_its_thinking() -> None:
    lazy = lazy_for("Qwen-Qwen3-0.6B")
    assert lazy.trigger == "<tool_call>"
    assert lazy.thinking == {"reasoning_start": "<think>", "reasoning_end": "</think>",
                             "reasoning_start_in_prompt": False}
    assert lazy_for("llama-cpp-deepseek-r1").thinking["reasoning_start_in_prompt"]  # its prompt opens the block
    assert lazy_for("Qwen-Qwen2.5-7B-Instruct").thinking == {}  # no thinking in the template


def test_no_grammar_where_the_template_has_no_marked_frame() -> None:
    assert lazy_for("meta-llama-Llama-3.1-8B-Instruct") is None  # a bare {"name": ...} call: no marker
    assert lazy_for("google-gemma-2-2b-it") is None  # no call syntax at all


def test_no_grammar_of_one_call_where_the_reply_may_make_several_the_frame_cannot_link() -> None:
    assert lazy_for("Kimi-K2-Instruct") is None  # it numbers its calls (functions.NAME:0, :1...)
    assert lazy_for("Kimi-K2-Instruct", parallel_tool_calls=False).trigger == "<|tool_calls_section_begin|>"


@pytest.fixture(scope="module")
def qwen25(tiny_model_factory: Callable[..., Path]) -> Iterator[Llama]:
    path = tiny_model_factory(chat_template=(TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8"))
    with Llama(str(path), n_ctx=1024, verbose=False) as llm:
        yield llm


AUTO = dict(tools=TOOLS, temperature=0, max_tokens=160)
OPENS_A_CALL = "Sure.\n<tool_call>"


def test_a_call_opened_in_an_auto_reply_is_a_whole_call_of_an_offered_tool(qwen25: Llama) -> None:
    out = qwen25.create_chat_completion(ASKED, logits_processor=[Prefix(qwen25, OPENS_A_CALL)], logprobs=True,
                                        **AUTO)
    text = raw_text(out)  # (the random model links a second call: parallel_tool_calls is on by default)
    assert text.startswith('Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {') and \
        text.endswith('}\n</tool_call>\n<tool_call>\n{"name": "get", "arguments": { }}\n</tool_call>')
    message = out["choices"][0]["message"]
    assert out["choices"][0]["finish_reason"] == "tool_calls" and message["content"] == "Sure."
    assert [c["function"] for c in message["tool_calls"]] == [c["function"] for c in parse_tool_calls(text, TOOLS)[1]]
    city = json.loads(message["tool_calls"][0]["function"]["arguments"])["city"]
    assert isinstance(city, str) and len(city) <= 12  # the schema's maxLength
    chunks = list(qwen25.create_chat_completion(ASKED, stream=True, logits_processor=[Prefix(qwen25, OPENS_A_CALL)],
                                                **AUTO))
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks).strip() == "Sure."
    calls, fragments = streamed_calls(chunks)
    assert calls == [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]
    assert fragments[0] > 2  # the first call's arguments streamed as they were sampled, not at the end


def streamed_calls(chunks: list[dict[str, Any]]) -> tuple[list[tuple[str, Any]], list[int]]:
    """The (name, arguments) of each streamed call, by index, and how many argument fragments each had."""
    calls: dict[int, list[Any]] = {}
    for chunk in chunks:
        for call in chunk["choices"][0]["delta"].get("tool_calls") or ():
            entry = calls.setdefault(call["index"], ["", "", 0])
            entry[0] += call["function"].get("name") or ""
            entry[1] += call["function"]["arguments"]
            entry[2] += bool(call["function"]["arguments"])
    return [(name, json.loads(arguments)) for name, arguments, _ in calls.values()], [n for *_, n in calls.values()]


def test_parallel_tool_calls_false_ends_the_reply_after_one_call(qwen25: Llama) -> None:
    out = qwen25.create_chat_completion(ASKED, logits_processor=[Prefix(qwen25, OPENS_A_CALL)], logprobs=True,
                                        parallel_tool_calls=False, **AUTO)
    assert raw_text(out).endswith("}}\n</tool_call>") and raw_text(out).count("<tool_call>") == 1
    assert [c["function"]["name"] for c in out["choices"][0]["message"]["tool_calls"]] == ["get_weather"]


def test_a_reply_that_opens_no_call_is_the_text_it_would_have_been(qwen25: Llama) -> None:
    auto = qwen25.create_chat_completion(ASKED, logprobs=True, **AUTO)
    plain = qwen25.create_chat_completion(ASKED, tool_choice="none", logprobs=True, **AUTO)
    assert "<tool_call>" not in raw_text(plain)
    assert auto["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]


def test_a_tagged_call_opened_in_an_auto_reply_follows_the_schema(tiny_model_factory: Callable[..., Path]) -> None:
    path = tiny_model_factory(chat_template=(TEMPLATES / "Qwen3-Coder.jinja").read_text(encoding="utf-8"))
    with Llama(str(path), n_ctx=1024, verbose=False) as llm:
        out = llm.create_chat_completion(ASKED, logits_processor=[Prefix(llm, "<tool_call>")], logprobs=True,
                                         **AUTO)
    text = raw_text(out)
    assert text.startswith("<tool_call>\n<function=get") and text.endswith("</function>\n</tool_call>")
    calls = out["choices"][0]["message"]["tool_calls"]
    assert calls and all(c["function"]["name"] in {"get", "get_weather"} for c in calls)
    assert len(calls) == text.count("<function=")


def test_a_marker_written_while_thinking_is_thought_and_a_call_after_it_is_constrained(
        tiny_model_factory: Callable[..., Path]) -> None:
    path = tiny_model_factory(chat_template=(TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8"))
    thought = "<think>\nI could write <tool_call> now.\n</think>\n\n"
    with Llama(str(path), n_ctx=1024, verbose=False) as llm:
        out = llm.create_chat_completion(ASKED, logits_processor=[Prefix(llm, thought + "<tool_call>")],
                                         logprobs=True, reasoning_format="auto", parallel_tool_calls=False, **AUTO)
        chunks = list(llm.create_chat_completion(ASKED, logits_processor=[Prefix(llm, thought + "<tool_call>")],
                                                 stream=True, reasoning_format="auto", parallel_tool_calls=False,
                                                 **AUTO))
    text = raw_text(out)  # (had the first marker started the grammar, the forced thought could not go on)
    assert text.startswith(thought + '<tool_call>\n{"name": "get') and text.endswith("}\n</tool_call>")
    message = out["choices"][0]["message"]
    assert message["reasoning_content"].strip() == "I could write <tool_call> now."
    assert [c["function"]["name"] for c in message["tool_calls"]] in (["get"], ["get_weather"])
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == message["reasoning_content"]
    assert not "".join(d.get("content") or "" for d in deltas).strip()
    assert streamed_calls(chunks)[0] == [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                                         for c in message["tool_calls"]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
