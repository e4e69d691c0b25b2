"""The 24 named chat formats: llama.cpp's text where llama.cpp knows the format, the model cards' otherwise.

llama.cpp's ``llama_chat_apply_template`` (through the native layer's cffi
binding) is the oracle for the formats it knows by name; the others are held
to literal strings written out here, so that a change to a format shows up
as a diff of its text.
"""

from __future__ import annotations

from typing import Any

import pytest
from llama_cpp_chat_formats.formats import NAMED_FORMATS
from llama_cpp_native import ffi, lib

NAMES = ("llama-2", "llama-3", "llama-4", "alpaca", "qwen", "vicuna", "oasst_llama", "baichuan-2", "baichuan",
         "openbuddy", "redpajama-incite", "snoozy", "phind", "intel", "open-orca", "mistrallite", "zephyr",
         "pygmalion", "chatml", "mistral-instruct", "chatglm3", "openchat", "saiga", "gemma")

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi. What do you need?"},
    {"role": "user", "content": "A colour."},
]

# The llama.cpp template each format equals.  llama-2 is "llama2-sys-bos", Meta's own variant (BOS before every
# later exchange); mistral-instruct is "mistral-v1", the format of Mistral-7B-Instruct v0.1/v0.2 (see formats.py);
# qwen is ChatML.
LLAMA_CPP_NAMES = {
    "chatml": "chatml", "qwen": "chatml", "llama-2": "llama2-sys-bos", "llama-3": "llama3", "llama-4": "llama4",
    "gemma": "gemma", "zephyr": "zephyr", "vicuna": "vicuna", "openchat": "openchat", "chatglm3": "chatglm3",
    "mistral-instruct": "mistral-v1",
}

# The formats llama.cpp does not know: CONVERSATION as their model cards write it.
EXPECTED = {
    "alpaca": "You are terse.\n\n### Instruction:\nHello!\n\n### Response:\nHi. What do you need?\n\n"
              "### Instruction:\nA colour.\n\n### Response:\n",
    "oasst_llama": "<|system|>You are terse.</s><|prompter|>Hello!</s><|assistant|>Hi. What do you need?</s>"
                   "<|prompter|>A colour.</s><|assistant|>",
    "mistrallite": "<|system|>You are terse.</s><|prompter|>Hello!</s><|assistant|>Hi. What do you need?</s>"
                   "<|prompter|>A colour.</s><|assistant|>",
    "baichuan-2": "You are terse.<reserved_106>Hello!<reserved_107>Hi. What do you need?<reserved_106>A colour."
                  "<reserved_107>",
    "baichuan": "You are terse.<reserved_102>Hello!<reserved_103>Hi. What do you need?<reserved_102>A colour."
                "<reserved_103>",
    "openbuddy": "You are terse.\n\nUser: Hello!\nAssistant: Hi. What do you need?\nUser: A colour.\nAssistant:",
    "redpajama-incite": "You are terse.\n<human>: Hello!\n<bot>: Hi. What do you need?\n<human>: A colour.\n<bot>:",
    "snoozy": "### Instruction:\nYou are terse.\n### Prompt:\nHello!\n### Response:\nHi. What do you need?\n"
              "### Prompt:\nA colour.\n### Response:\n",
    "phind": "### System Prompt\nYou are terse.\n\n### User Message\nHello!\n\n### Assistant\nHi. What do you need?\n\n"
             "### User Message\nA colour.\n\n### Assistant\n",
    "intel": "### System:\nYou are terse.\n### User:\nHello!\n### Assistant:\nHi. What do you need?\n"
             "### User:\nA colour.\n### Assistant:\n",
    "open-orca": "You are terse. User: Hello!<|end_of_turn|>Assistant: Hi. What do you need?<|end_of_turn|>"
                 "User: A colour.<|end_of_turn|>Assistant:",
    "pygmalion": "<|system|>You are terse.<|user|>Hello!<|model|>Hi. What do you need?<|user|>A colour.<|model|>",
    "saiga": "<s>system\nYou are terse.</s><s>user\nHello!</s><s>bot\nHi. What do you need?</s><s>user\nA colour.</s>"
             "<s>bot\n",
}

# What add_generation_prompt appends.  In llama-2 and mistral-instruct "[/INST]" both ends the user's turn and
# opens the assistant's, so there is nothing to append (llama.cpp's templates ignore add_ass there too).
OPENERS = {
    "llama-2": "", "mistral-instruct": "",
    "chatml": "<|im_start|>assistant\n", "qwen": "<|im_start|>assistant\n",
    "llama-3": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "llama-4": "<|header_start|>assistant<|header_end|>\n\n",
    "gemma": "<start_of_turn>model\n", "zephyr": "<|assistant|>\n", "vicuna": "ASSISTANT:",
    "openchat": "GPT4 Correct Assistant:", "chatglm3": "<|assistant|>", "alpaca": "### Response:\n",
    "oasst_llama": "<|assistant|>", "mistrallite": "<|assistant|>", "baichuan-2": "<reserved_107>",
    "baichuan": "<reserved_103>", "openbuddy": "Assistant:", "redpajama-incite": "<bot>:",
    "snoozy": "### Response:\n", "phind": "### Assistant\n", "intel": "### Assistant:\n", "open-orca": "Assistant:",
    "pygmalion": "<|model|>", "saiga": "<s>bot\n",
}

# More conversations for the llama.cpp comparison: whitespace that some formats trim, no system message, a
# conversation that ends with the assistant.
PADDED = [{"role": "system", "content": " \n You are terse.\n"}, {"role": "user", "content": "  Hello!\t"},
          {"role": "assistant", "content": "\nHi. \n"}, {"role": "user", "content": " A colour. "}]
NO_SYSTEM = CONVERSATION[1:]
ENDS_WITH_ASSISTANT = CONVERSATION[:3]


def llama_cpp_render(template_name: str, messages: list[dict[str, Any]], add_ass: bool) -> str:
    """llama.cpp's own rendering of ``messages`` with the built-in template ``template_name``."""
    keep = [(ffi.new("char[]", m["role"].encode()), ffi.new("char[]", m["content"].encode())) for m in messages]
    chat = ffi.new("struct llama_chat_message[]", len(keep))
    for item, (role, content) in zip(chat, keep, strict=True):
        item.role, item.content = role, content
    buf = ffi.new("char[]", 65536)
    n = lib.llama_chat_apply_template(template_name.encode(), chat, len(keep), add_ass, buf, 65536)
    assert n >= 0, f"llama.cpp does not know the template {template_name!r}"
    return ffi.buffer(buf, n)[:].decode()


def render(name: str, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    return NAMED_FORMATS[name](messages=messages, add_generation_prompt=add_generation_prompt).prompt


def test_all_24_names_are_registered() -> None:
    assert sorted(NAMED_FORMATS) == sorted(NAMES)

def test_every_format_is_held_to_llama_cpp_or_to_a_written_expectation() -> None:
    assert not set(LLAMA_CPP_NAMES) & set(EXPECTED)
    assert set(LLAMA_CPP_NAMES) | set(EXPECTED) == set(NAMES) == set(OPENERS)


@pytest.mark.parametrize("messages", [CONVERSATION, PADDED, NO_SYSTEM, ENDS_WITH_ASSISTANT],
                         ids=["conversation", "padded", "no-system", "ends-with-assistant"])
@pytest.mark.parametrize("add_generation_prompt", [True, False], ids=["opener", "no-opener"])
@pytest.mark.parametrize("name", sorted(LLAMA_CPP_NAMES))
def test_equals_llama_cpp(name: str, messages: list[dict[str, Any]], add_generation_prompt: bool) -> None:
    expected = llama_cpp_render(LLAMA_CPP_NAMES[name], messages, add_generation_prompt)
    assert render(name, messages, add_generation_prompt) == expected


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_model_card_formats_render_the_conversation(name: str) -> None:
    assert render(name, CONVERSATION) == EXPECTED[name]


@pytest.mark.parametrize("name", NAMES)
def test_without_generation_prompt_the_opener_is_omitted(name: str) -> None:
    without = render(name, CONVERSATION, add_generation_prompt=False)
    assert render(name, CONVERSATION) == without + OPENERS[name]


@pytest.mark.parametrize("name", NAMES)
def test_content_parts_are_joined_text(name: str) -> None:
    parts = [{"type": "text", "text": "A"}, {"type": "image_url", "image_url": {"url": "data:,"}},
             {"type": "text", "text": "colour."}]
    as_parts = [*CONVERSATION[:3], {"role": "user", "content": parts}]
    as_text = [*CONVERSATION[:3], {"role": "user", "content": "A\ncolour."}]
    assert render(name, as_parts) == render(name, as_text)


@pytest.mark.parametrize("name", NAMES)
def test_none_content_is_empty_text_and_extra_keywords_are_ignored(name: str) -> None:
    called_a_tool = {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function"}]}
    response = NAMED_FORMATS[name](messages=[CONVERSATION[1], called_a_tool], tools=[], temperature=0.2)
    empty = NAMED_FORMATS[name](messages=[CONVERSATION[1], {"role": "assistant", "content": ""}])
    assert response.prompt == empty.prompt


@pytest.mark.parametrize("name", NAMES)
def test_stops_are_given_and_only_saiga_starts_with_bos(name: str) -> None:
    response = NAMED_FORMATS[name](messages=CONVERSATION)
    assert response.stop and all(response.stop)
    assert response.added_special is (name == "saiga")
    assert response.added_special is response.prompt.startswith("<s>")


@pytest.mark.parametrize(("name", "turn"), [
    ("chatml", "<|im_start|>tool\n42<|im_end|>\n"),
    ("llama-3", "<|start_header_id|>ipython<|end_header_id|>\n\n42<|eot_id|>"),
    ("llama-4", "<|header_start|>ipython<|header_end|>\n\n42<|eot|>"),
    ("chatglm3", "<|observation|>\n 42"),
    ("vicuna", "USER: 42\n"),  # no tool role: the result is user input
    ("gemma", "<start_of_turn>user\n42<end_of_turn>\n"),
    ("llama-2", "<s>[INST] 42 [/INST]"),
])
@pytest.mark.parametrize("role", ["tool", "function"])
def test_tool_results_take_the_tool_role_or_a_user_turn(name: str, turn: str, role: str) -> None:
    messages = [*CONVERSATION[1:3], {"role": role, "content": "42", "tool_call_id": "1"}]
    assert render(name, messages, add_generation_prompt=False).endswith(turn)


def test_developer_is_system() -> None:
    developer = [{"role": "developer", "content": "You are terse."}, *NO_SYSTEM]
    assert render("chatml", developer) == render("chatml", CONVERSATION)


def test_an_unknown_role_is_an_error() -> None:
    with pytest.raises(ValueError, match="narrator"):
        render("chatml", [{"role": "narrator", "content": "Once upon a time"}])


def test_gemma_keeps_a_system_message_that_no_user_turn_follows() -> None:
    """The one documented difference from llama.cpp, which drops such a system message."""
    messages = [*CONVERSATION[1:3], CONVERSATION[0]]
    dropped = llama_cpp_render("gemma", messages, add_ass=True)
    assert "You are terse." not in dropped
    kept = "<start_of_turn>user\nYou are terse.<end_of_turn>\n<start_of_turn>model\n"
    assert render("gemma", messages) == dropped.removesuffix("<start_of_turn>model\n") + kept
