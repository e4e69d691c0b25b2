"""llama-server's ``--chat-template`` and ``--chat-template-file``: a Jinja template's text renders in place of
the model's (the same prompt as llama-server's, by ``/apply-template``, and the chat generates from it); a
built-in template's name is the chat format of that name here; other names are refused with the valid ones."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from llama_cpp_server import load_settings
from llama_cpp_server.llama_server_flags import CHAT_TEMPLATE_NAMES
from serving import llama_server, running

from llama_cpp.plugins import ChatFormat, get_host

TEMPLATE = ("{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}{{ eos_token }}\n{% endfor %}"
            "{% if add_generation_prompt %}[ASSISTANT] {% endif %}")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_every_mapped_name_is_a_chat_format_here() -> None:
    formats = get_host().records(ChatFormat)
    assert all(ours in formats for ours in CHAT_TEMPLATE_NAMES.values())


@pytest.mark.parametrize("spelling", ["text", "file"])
def test_a_template_renders_in_place_of_the_models_as_llama_servers(chat_model_path: Path, tmp_path: Path,
                                                                    spelling: str) -> None:
    if spelling == "text":
        flags = ["--chat-template", TEMPLATE]
    else:
        (tmp_path / "t.jinja").write_text(TEMPLATE)
        flags = ["--chat-template-file", str(tmp_path / "t.jinja")]
    settings = load_settings(["-m", str(chat_model_path), "-c", "1024", "-np", "1", "-t", "1", "-tb", "1", *flags])
    assert settings.chat_template == TEMPLATE and settings.chat_format is None
    with running(settings) as ours, llama_server(chat_model_path, "-c", "1024", "-np", "1", *flags) as theirs:
        prompts = [httpx.post(f"{base}/apply-template", json={"messages": MESSAGES}, timeout=30).json()["prompt"]
                   for base in (ours, theirs)]
        assert prompts[0] == prompts[1] and prompts[0].startswith("[SYSTEM] Be brief.")
        counts = [httpx.post(f"{base}/chat/completions/input_tokens", json={"messages": MESSAGES},
                             timeout=30).json()["input_tokens"] for base in (ours, theirs)]
        assert counts[0] == counts[1]
        chat = httpx.post(f"{ours}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2}, timeout=60)
        assert chat.status_code == 200 and chat.json()["usage"]["prompt_tokens"] == counts[0]
        assert httpx.get(f"{ours}/props", timeout=10).json()["chat_template"] == TEMPLATE


def test_a_built_in_name_is_the_chat_format_of_that_name() -> None:
    assert load_settings(["--chat-template", "llama3"]).chat_format == "llama-3"
    assert load_settings(["--chat-template", "chatml"]).chat_format == "chatml"


@pytest.mark.parametrize("value", ["deepseek3", "no such template"])
def test_other_names_are_refused_with_the_valid_ones(value: str) -> None:
    with pytest.raises(SystemExit, match="names: chatglm3, chatml"):
        load_settings(["--chat-template", value])


def test_a_template_with_another_chat_choice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="chat_template and chat_format"):
        load_settings(["--chat-template", TEMPLATE, "--chat_format", "chatml"])
    with pytest.raises(SystemExit, match="cannot read"):
        load_settings(["--chat-template-file", str(tmp_path / "missing.jinja")])

