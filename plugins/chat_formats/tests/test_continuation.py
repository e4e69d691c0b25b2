"""Continuing a trailing assistant message: the thinking markers a template shows, found as llama.cpp's parser
generator finds them, and the prompt each continuation mode writes (the oracle comparison over the pinned
source's 70 templates is contrib/server/tests/test_llama_server_real_templates.py)."""

from __future__ import annotations

import pytest

from llama_cpp_chat_formats import Jinja2ChatFormatter
from llama_cpp_chat_formats.continuation import (ThinkingMarkers, continue_message, resolve_mode,
                                                 thinking_markers)
from llama_cpp_chat_formats.continuation import _difference as difference
from llama_cpp_chat_formats.handler import continue_mode

# Qwen3's shape: earlier thinking rendered inside <think>, an empty block closed when thinking is off
QWEN3 = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n"
    "{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
# the generation prompt opens the block when thinking is on, earlier thinking is dropped
OPENS = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking %}<think>{% endif %}{% endif %}"
)
PLAIN = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}" \
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
# R1 distills: earlier thinking cut off the content, no reasoning_content, no switch (llama.cpp names them)
DISTILL = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content.split('</think>')[-1] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}"
)
USER = {"role": "user", "content": "Hi"}


def formatter(template: str) -> Jinja2ChatFormatter:
    return Jinja2ChatFormatter(template=template, eos_token="</s>", bos_token="<s>")


@pytest.mark.parametrize(("template", "markers"), [
    (QWEN3, ThinkingMarkers("<think>\n", "\n</think>\n\n")),
    (OPENS, ThinkingMarkers("<think>", "")),
    (PLAIN, ThinkingMarkers()),
    (DISTILL, ThinkingMarkers("<think>", "</think>")),
], ids=["around earlier thinking", "opened by the switch", "none", "named family"])
def test_the_markers_are_the_ones_the_template_writes(template: str, markers: ThinkingMarkers) -> None:
    assert thinking_markers(formatter(template)) == markers


def test_a_template_that_fails_on_every_probe_has_no_markers() -> None:
    assert thinking_markers(formatter("{{ raise_exception('no') }}")) == ThinkingMarkers()


@pytest.mark.parametrize(("message", "mode", "ending"), [
    ({"role": "assistant", "content": "Sure, "}, "auto", "<|im_start|>assistant\n<think>\n\n</think>\n\nSure, "),
    ({"role": "assistant", "content": "", "reasoning_content": "Hmm"}, "auto", "<|im_start|>assistant\n<think>\nHmm"),
    ({"role": "assistant", "content": "So", "reasoning_content": "Hmm"}, "auto",
     "<think>\nHmm\n</think>\n\nSo"),
    ({"role": "assistant", "content": "So", "reasoning_content": "Hmm"}, "reasoning_content", "<think>\nHmm"),
    ({"role": "assistant", "content": "", "reasoning_content": "Hmm"}, "content", "<think>\nHmm\n</think>\n\n"),
    ({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "content",
     "</think>\n\na\n\nb"),
], ids=["content", "thinking", "both", "thinking asked", "content asked", "text parts"])
def test_a_continuation_writes_the_thinking_inside_the_markers(message: dict, mode: str, ending: str) -> None:
    out = continue_message(formatter(QWEN3), [USER], message, mode)  # type: ignore[arg-type]
    assert out.prompt.startswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert out.prompt.endswith(ending)
    assert "<|im_end|>" not in out.prompt[len("<|im_start|>user\nHi<|im_end|>"):]


def test_a_generation_prompt_that_opens_the_block_is_cut_where_it_opens() -> None:
    message = {"role": "assistant", "content": "Answer:"}
    assert continue_message(formatter(OPENS), [USER], message, "auto", enable_thinking=True).prompt == \
        "<|user|>Hi<|assistant|><think>Answer:"  # no end marker found: llama.cpp writes none either
    assert continue_message(formatter(DISTILL), [USER], message, "auto").prompt == \
        "<|user|>Hi<|assistant|><think></think>Answer:"


def test_without_markers_the_content_follows_the_generation_prompt_and_thinking_is_not_written() -> None:
    message = {"role": "assistant", "content": "", "reasoning_content": "Hmm"}
    assert continue_message(formatter(PLAIN), [USER], message, "auto").prompt == "<|user|>Hi<|end|><|assistant|>"
    message = {"role": "assistant", "content": "Sure", "reasoning_content": "Hmm"}
    assert continue_message(formatter(PLAIN), [USER], message, "auto").prompt == \
        "<|user|>Hi<|end|><|assistant|>Sure"


def test_the_mode_a_message_asks_for() -> None:
    assert resolve_mode({"content": "x", "reasoning_content": "y"}, "auto") == "content"
    assert resolve_mode({"content": "", "reasoning_content": "y"}, "auto") == "reasoning_content"
    assert resolve_mode({"content": None}, "auto") == "content"
    assert resolve_mode({"content": "", "reasoning_content": "y"}, "content") == "content"


def test_assistant_prefill_values() -> None:
    assert [continue_mode(v) for v in (None, False, True, "content", "reasoning_content")] == \
        [None, None, "auto", "content", "reasoning_content"]
    for bad in ("yes", 1, "auto"):
        with pytest.raises(ValueError, match="assistant_prefill must be a bool, 'content' or 'reasoning_content'"):
            continue_mode(bad)


@pytest.mark.parametrize(("left", "right", "only_left", "only_right"), [
    ("<a>x<b>", "<a>x<b><think>\n", "", "<think>\n"),
    ("<a>x<b><think>\n\n</think>\n\n", "<a>x<b>", "<think>\n\n</think>\n\n", ""),
    ("<a>one<b>", "<a>two<b>", "one", "two"),
    ("<a>same text<b>", "<a>same text<b>", "", ""),
    ("", "<x>", "", "<x>"),
    ("<s>sys A<e><u>", "<s>sys B<e><u><t></t>", "A<e><u>", "B<e><u><t></t>"),
])
def test_the_difference_of_two_renderings(left: str, right: str, only_left: str, only_right: str) -> None:
    assert difference(left, right) == (only_left, only_right)


def test_a_template_is_claimed_by_the_first_family_in_llama_cpps_order() -> None:
    from llama_cpp_chat_formats.template_families import family_of

    assert family_of("[SYSTEM_PROMPT] [TOOL_CALLS] [ARGS] <|channel|>") == "ministral-3"
    assert family_of("[SYSTEM_PROMPT] [TOOL_CALLS] [ARGS] [CALL_ID] <|channel|>") == "gpt-oss"
    assert family_of("<tool_call> <function= <parameter=") == "qwen3-coder"
    assert family_of("'<tool_call><function=' ~ tool_call.name ~ '>' <parameter=") is None
    assert family_of("{{ messages }}") is None


def test_a_family_is_continued_as_its_llama_cpp_parser_continues_it() -> None:
    gpt_oss = formatter("<|channel|>{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
                        "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}")
    message = {"role": "assistant", "content": "Answer:", "reasoning_content": "Thought."}
    assert continue_message(gpt_oss, [USER], message, "auto").prompt == (
        "<|channel|><|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|>Thought."
        "<|end|><|start|>assistant<|channel|>final<|message|>Answer:")
    v4 = formatter("dsml_token DSML tool_calls{% for m in messages %}<\uff5cUser\uff5c>{{ m.content }}{% endfor %}")
    assert continue_message(v4, [USER], {"role": "assistant", "content": "So"}, "auto").prompt.endswith(
        "<\uff5cUser\uff5c>Hi<\uff5cAssistant\uff5c></think>So")
