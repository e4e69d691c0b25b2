"""Every real chat template of the pinned llama.cpp source renders in our sandbox.

models/templates/ holds the templates of 70 model families (Llama 3.x, Qwen,
Mistral, Gemma, DeepSeek, functionary, Hermes, gpt-oss...).  Each renders a
multi-turn conversation with a system message, with and without tools.  None
refuses it: Gemma 2's, which raises "System role not supported", gets the
system message's text in front of the first user message, as llama.cpp does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_cpp.testing import llama_cpp_source_dir
from llama_cpp_chat_formats.jinja import Jinja2ChatFormatter

TEMPLATES = sorted((llama_cpp_source_dir() / "models" / "templates").glob("*.jinja"))

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "Let me check that for you."},
    {"role": "user", "content": "Thanks, and in Rome?"},
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]



def test_the_pinned_source_has_the_templates() -> None:
    assert len(TEMPLATES) >= 70


@pytest.mark.parametrize("with_tools", [False, True], ids=["plain", "tools"])
@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_real_template_renders(path: Path, with_tools: bool) -> None:
    formatter = Jinja2ChatFormatter(path.read_text(encoding="utf-8"), eos_token="</s>", bos_token="<s>")
    prompt = formatter(messages=CONVERSATION, tools=TOOLS if with_tools else None).prompt
    assert "Thanks, and in Rome?" in prompt and "What is the weather in Paris?" in prompt
    assert "You are a helpful assistant." in prompt


def test_a_system_message_goes_in_front_of_the_next_where_the_template_renders_none() -> None:
    """Gemma 2's template raises "System role not supported"; llama.cpp merges the system message's text into
    the next message for such a template (``system_message_not_supported``), and so does the formatter."""
    path = llama_cpp_source_dir() / "models" / "templates" / "google-gemma-2-2b-it.jinja"
    formatter = Jinja2ChatFormatter(path.read_text(encoding="utf-8"), eos_token="<eos>", bos_token="<bos>")
    assert not formatter.takes_system_role()
    prompt = formatter(messages=[{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Hi"}]).prompt
    assert prompt == "<bos><start_of_turn>user\nBe brief.\nHi<end_of_turn>\n<start_of_turn>model\n"
    alone = formatter(messages=[{"role": "system", "content": "Be brief."}]).prompt  # dropped, as llama.cpp does
    assert "Be brief." not in alone
