"""llama.cpp's capabilities of a chat template (common/jinja/caps.cpp), found by rendering its probe
conversations: a few templates whose capabilities llama-server reports (all 70 of the pinned source are
compared with llama-server's ``/props`` in contrib/server/tests/test_llama_server_real_templates.py)."""

from __future__ import annotations

import pytest

from llama_cpp.testing import llama_cpp_source_dir
from llama_cpp_chat_formats import Jinja2ChatFormatter

TEMPLATES = llama_cpp_source_dir() / "models" / "templates"
KEYS = ("object_arguments", "parallel_tool_calls", "preserve_reasoning", "reasoning_effort", "string_content",
        "system_role", "tool_calls", "tools", "typed_content")
# llama-server's chat_template_caps of each, in the order of KEYS
EXPECTED = {
    "Qwen-Qwen3-0.6B": (1, 1, 0, 0, 1, 1, 1, 1, 0),
    "google-gemma-2-2b-it": (0, 0, 0, 0, 1, 0, 0, 0, 0),  # no system role, no tools
    "meta-llama-Llama-3.1-8B-Instruct": (1, 0, 0, 0, 1, 1, 1, 1, 0),  # one call a turn
    "deepseek-ai-DeepSeek-V4": (1, 1, 1, 1, 1, 1, 1, 1, 0),  # keeps thinking; tests for effort "max" alone
}


@pytest.mark.parametrize("stem", EXPECTED)
def test_the_capabilities_are_llama_servers(stem: str) -> None:
    formatter = Jinja2ChatFormatter(template=(TEMPLATES / f"{stem}.jinja").read_text(encoding="utf-8"),
                                    eos_token="</s>", bos_token="<s>")
    caps = formatter.capabilities()
    assert list(caps) == [f"supports_{key}" for key in KEYS]  # llama.cpp's map: by name
    assert tuple(int(value) for value in caps.values()) == EXPECTED[stem]


def test_a_template_that_iterates_content_parts_takes_typed_content() -> None:
    formatter = Jinja2ChatFormatter(template=(TEMPLATES / "google-gemma-4-31B-it.jinja").read_text(encoding="utf-8"),
                                    eos_token="<eos>", bos_token="<bos>")
    assert formatter.capabilities()["supports_typed_content"]
