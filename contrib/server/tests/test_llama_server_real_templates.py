"""Every real chat template of the pinned llama.cpp source (``models/templates/``, 70 model families), given to
both servers with ``--chat-template-file``: ``/apply-template`` renders the same prompt as llama-server's for a
plain turn, a conversation with a system message, a request with tools, a two-call tool loop, text parts, an
earlier assistant turn with its thinking (``reasoning_content``), a ``developer`` message, and a trailing
assistant message continued (its content, its thinking, or both), or both refuse it; and ``/props`` reports the
same ``chat_template_caps``.

This found what the sandbox and the formatter did differently from llama.cpp: the BOS a template writes
first (llama.cpp takes it off when the tokenizer adds one), ``|safe`` (Jinja's ``Markup`` HTML-escaped what
functionary v3.1 adds to it), Apriel's tool-call arguments (a repr of the tool's parameters misled the probe
for object arguments), Gemma 2's system message (merged into the next message, as llama.cpp does for a
template that renders none), Kimi K2's queue of tool call ids (a list the template changes) and the
thinking of earlier turns, which llama-server keeps by default (``--reasoning-preserve``: the template
variables ``preserve_thinking``, ``clear_thinking``... that GLM 4.7, Nemotron 3 and DeepSeek V4 read), and
under the names LFM2, gpt-oss and Ministral 3 read it by; and how a thinking model's message is continued
(inside the thinking markers llama.cpp's parser generator finds in the template, or as the parser of the
template's family writes the turn).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_cpp_server import load_settings
from serving import llama_server, running

from llama_cpp.testing import llama_cpp_source_dir

TEMPLATES = sorted((llama_cpp_source_dir() / "models" / "templates").glob("*.jinja"))
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
BODIES: dict[str, dict[str, Any]] = {
    "plain": {"messages": [{"role": "user", "content": "Hello"}]},
    "system": {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]},
    "tools": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
    "tool loop": {"messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"},
        {"role": "tool", "tool_call_id": "call_2", "content": "21 degrees"},
        {"role": "user", "content": "Thanks"}], "tools": TOOLS},
    "text parts": {"messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                                {"role": "user", "content": [{"type": "text", "text": "Part one."},
                                                             {"type": "text", "text": "Part two."}]}]},
    "earlier thinking": {"messages": [{"role": "user", "content": "Hi"},
                                      {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting."},
                                      {"role": "user", "content": "Bye"}]},
    "developer": {"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
}
# a trailing assistant message continued: by llama-server's --prefill-assistant default, or asked for with
# continue_final_message (its content, its thinking, or what the message has)
HI = {"role": "user", "content": "Hi"}
CONTINUED: dict[str, dict[str, Any]] = {
    "prefill": {"messages": [HI, {"role": "assistant", "content": "Sure, here"}]},
    "prefill thinking": {"messages": [HI, {"role": "assistant", "content": "", "reasoning_content": "Let me see"}]},
    "prefill both": {"messages": [HI, {"role": "assistant", "content": "Answer:", "reasoning_content": "Thought."}]},
    "continue content": {"messages": [HI, {"role": "assistant", "content": "", "reasoning_content": "Thought."}],
                         "continue_final_message": "content", "add_generation_prompt": False},
    "continue thinking": {"messages": [HI, {"role": "assistant", "content": "Answer:",
                                            "reasoning_content": "Thought."}],
                          "continue_final_message": "reasoning_content", "add_generation_prompt": False},
    "continue": {"messages": [HI, {"role": "assistant", "content": "Answer:"}], "continue_final_message": True,
                 "add_generation_prompt": False},
}
BODIES |= CONTINUED
# where llama-server departs from rendering the template as it stands, for one model family's sake
LLAMA_SERVER_SPECIFIC = {
    # llama.cpp's parser generator finds no thinking markers in this template, so llama-server sets
    # enable_thinking false for it ("Deliberation: disabled"); the server here sets it true for every template
    ("Apertus-8B-Instruct", body): "enable_thinking false" for body in BODIES
} | {
    # llama.cpp's template engine reads `not add_generation_prompt is defined` as `(not ...) is defined`, so
    # this template always opens the assistant's turn there, also before a continued message
    ("llama-cpp-rwkv-world", body): "generation prompt always" for body in CONTINUED
} | {
    # llama.cpp rewrites tool results into the assistant turn for Gemma 4 templates older than the official one
    ("google-gemma-4-31B-it-interleaved", "tool loop"): "tool results moved into the model's turn",
    # llama.cpp hands this template a user's text parts joined by newlines, where the template would join them
    ("LFM2.5-8B-A1B", "text parts"): "text parts joined by newlines",
    # llama.cpp watches which values a template reads; LFM2.5's iterates the parts inside a macro, whose
    # copy of the content takes the reads: it counts no typed content there (and joins parts, above)
    ("LFM2.5-8B-A1B", "caps"): "supports_typed_content false",
}


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_a_real_template_renders_as_llama_server_renders_it(chat_model_path: Path, path: Path) -> None:
    flags = ["--chat-template-file", str(path)]
    settings = load_settings(["-m", str(chat_model_path), "-c", "2048", "-np", "1", "-t", "1", "-tb", "1", *flags])
    differences = []
    with running(settings) as ours, llama_server(chat_model_path, "-c", "2048", "-np", "1", *flags) as theirs:
        for name, body in BODIES.items():
            replies = [httpx.post(f"{base}/apply-template", json=body, timeout=60) for base in (ours, theirs)]
            mine, native = (r.json() for r in replies)
            if replies[0].status_code >= 400 and replies[1].status_code >= 400:
                continue  # both refuse it (the template's own raise_exception, here as there)
            if (replies[0].status_code, mine) != (replies[1].status_code, native):
                differences.append(name)
        caps = [httpx.get(f"{base}/props", timeout=60).json()["chat_template_caps"] for base in (ours, theirs)]
        if caps[0] != caps[1]:  # what clients read to know what to send (supports_tools...)
            differences.append("caps")
    expected = sorted(body for (stem, body) in LLAMA_SERVER_SPECIFIC if stem == path.stem)
    assert sorted(differences) == expected, f"{path.stem}: {differences}"


@pytest.mark.parametrize("flag", ["--reasoning-preserve", "--no-reasoning-preserve"])
def test_the_thinking_of_earlier_turns_is_kept_or_dropped_as_llama_server_does(chat_model_path: Path,
                                                                                flag: str) -> None:
    path = llama_cpp_source_dir() / "models" / "templates" / "GLM-4.7-Flash.jinja"
    flags = ["--chat-template-file", str(path), flag]
    settings = load_settings(["-m", str(chat_model_path), "-c", "2048", "-np", "1", "-t", "1", "-tb", "1", *flags])
    assert settings.reasoning_preserve is (flag == "--reasoning-preserve")
    body = BODIES["earlier thinking"]
    with running(settings) as ours, llama_server(chat_model_path, "-c", "2048", "-np", "1", *flags) as theirs:
        prompts = [httpx.post(f"{base}/apply-template", json=body, timeout=60).json()["prompt"]
                   for base in (ours, theirs)]
        asked = {**body, "chat_template_kwargs": {"preserve_reasoning": flag != "--reasoning-preserve"}}
        overridden = [httpx.post(f"{base}/apply-template", json=asked, timeout=60).json()["prompt"]
                      for base in (ours, theirs)]
    assert prompts[0] == prompts[1] and overridden[0] == overridden[1]  # a request's own switch wins
    kept = [prompts[0], overridden[0]][flag != "--reasoning-preserve"]
    assert "<think>A greeting.</think>Hello!" in kept
    assert "A greeting." not in [prompts[0], overridden[0]][flag == "--reasoning-preserve"]
