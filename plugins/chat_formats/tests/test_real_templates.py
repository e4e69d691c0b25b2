"""Every real chat template of the pinned llama.cpp source renders in our sandbox.

models/templates/ holds the templates of 70 model families (Llama 3.x, Qwen,
Mistral, Gemma, DeepSeek, functionary, Hermes, gpt-oss...).  Each renders a
multi-turn conversation with a system message, with and without tools.  The
only failures allowed are a template's own raise_exception (listed in
ALLOWED_REFUSALS and in docs/chat.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_cpp.testing import llama_cpp_source_dir
from llama_cpp_chat_formats.jinja import Jinja2ChatFormatter, TemplateError

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

# template -> what its own raise_exception says (the template refuses, by design)
ALLOWED_REFUSALS = {
    "google-gemma-2-2b-it.jinja": "System role not supported",
}


def test_the_pinned_source_has_the_templates() -> None:
    assert len(TEMPLATES) >= 70


@pytest.mark.parametrize("with_tools", [False, True], ids=["plain", "tools"])
@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_real_template_renders(path: Path, with_tools: bool) -> None:
    formatter = Jinja2ChatFormatter(path.read_text(encoding="utf-8"), eos_token="</s>", bos_token="<s>")
    try:
        prompt = formatter(messages=CONVERSATION, tools=TOOLS if with_tools else None).prompt
    except TemplateError as exc:
        expected = ALLOWED_REFUSALS.get(path.name)
        assert expected and "refused the conversation" in str(exc) and expected in str(exc), str(exc)
        return
    assert path.name not in ALLOWED_REFUSALS
    assert "Thanks, and in Rome?" in prompt and "What is the weather in Paris?" in prompt
