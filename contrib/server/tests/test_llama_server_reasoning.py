"""reasoning_format against llama-server itself: the same forced reply (a grammar) on a tiny model with
Qwen3's template is split alike, whole and streamed (thinking deltas, then answer deltas), for each
format; the format's bad values are a 422 naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving import assert_error, llama_server, running, tiny_settings

from llama_cpp.testing import TinyLlamaSpec, llama_cpp_source_dir, write_tiny_llama


REPLIES = ["<think>abc</think>answer", "<think>\n abc \n</think>\n\nanswer ", "answer <think>x</think>",
           '<think>abc</think><tool_call>\n{"name": "get", "arguments": {"a": 1}}\n</tool_call>']


@pytest.fixture(scope="module")
def both(reasoning_model_path: Path) -> Iterator[tuple[str, str]]:
    model = reasoning_model_path
    with running(tiny_settings(model, n_seq_max=1, n_ctx=1024)) as ours, \
            llama_server(model, "-c", "1024", "-np", "1") as theirs:
        yield ours, theirs


def chat(base: str, reply: str, fmt: str | None, stream: bool, template_kwargs: dict[str, Any] | None = None) -> Any:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0, "max_tokens": 64,
                            "grammar": "root ::= " + json.dumps(reply), "stream": stream,
                            "chat_template_kwargs": template_kwargs or {}}
    if fmt is not None:
        body["reasoning_format"] = fmt
    response = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    if not stream:
        return response.json()["choices"][0]["message"]
    events = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    kinds: list[str] = []
    text = {"reasoning_content": "", "content": ""}
    for event in events:
        delta = event["choices"][0]["delta"] if event["choices"] else {}
        for key in text:
            if delta.get(key):
                text[key] += delta[key]
                if not kinds or kinds[-1] != key:
                    kinds.append(key)
    return text, kinds


@pytest.mark.parametrize("reply", REPLIES)
@pytest.mark.parametrize("fmt", [None, "none", "deepseek", "deepseek-legacy", "auto"])
def test_the_split_is_llama_servers(both: tuple[str, str], reply: str, fmt: str | None) -> None:
    ours, theirs = (chat(base, reply, fmt, stream=False) for base in both)
    assert ours == theirs
    ours, theirs = (chat(base, reply, fmt, stream=True) for base in both)
    assert ours == theirs
    if fmt != "none" and reply == "<think>abc</think>answer":
        assert ours == ({"reasoning_content": "abc", "content": "answer"}, ["reasoning_content", "content"])


@pytest.mark.parametrize("bad", ["think", 3, ""])
def test_a_bad_reasoning_format_is_refused_naming_the_field(both: tuple[str, str], bad: Any) -> None:
    response = httpx.post(both[0] + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "reasoning_format": bad}, timeout=30)
    assert_error(response, 422, param="reasoning_format")


def test_the_reasoning_flags_reach_their_settings() -> None:
    from llama_cpp_server import load_settings

    settings = load_settings(["-m", "m.gguf", "--reasoning-format", "none", "--reasoning-budget", "0"])
    assert (settings.reasoning_format, settings.default_reasoning_budget) == ("none", 0)
    assert load_settings(["-m", "m.gguf"]).reasoning_format == "auto"  # llama-server's default
    with pytest.raises(ValueError, match="reasoning_format"):
        load_settings(["-m", "m.gguf", "--reasoning-format", "think"])


# real templates of the pinned source, each with a reply in its model's markers and the thinking llama-server
# finds in it: the families that split them here (Seed-OSS's and MiniMax-M3's markers; Kimi K2's <think>,
# which its templates do not write; the answers Cohere's and Kimi K3's formats mark too), and the whitespace
# the template writes with its markers (a block its generation prompt opens with "<think>\n" begins after the
# newline; QwQ's, which llama.cpp knows as "<think>", with it)
REAL_REPLIES = {
    "ByteDance-Seed-OSS": ("<seed:think>abc</seed:think>\nanswer", "abc"),
    "MiniMax-M3": ("<mm:think>abc</mm:think>answer", "abc"),
    "Kimi-K2-Instruct": ("<think>abc</think>answer", "abc"),
    "moonshotai-Kimi-K2": ("<think>abc</think>answer", "abc"),
    "HuggingFaceTB-SmolLM3-3B": ("<think>abc</think>answer", "abc"),
    "openai-gpt-oss-120b": ("<|channel|>analysis<|message|>abc<|end|><|start|>assistant<|channel|>final<|message|>"
                            "answer", "abc"),
    "Qwen3.5-4B": ("abc\n</think>\n\nanswer", "abc\n"),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("abc\n</think>\n\nanswer", "abc\n"),
    "MiniMax-M2": ("abc\n</think>\n\nanswer", "abc\n"),
    "GLM-4.6": ("<think>abc</think>\nanswer", "abc"),
    "Qwen-QwQ-32B": ("abc</think>answer", "\nabc"),
    "Cohere2MoE": ("abc<|END_THINKING|><|START_TEXT|>answer<|END_TEXT|>", "abc"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": (
        "<|START_THINKING|>abc<|END_THINKING|><|START_RESPONSE|>answer<|END_RESPONSE|>", "abc"),
    "Kimi-K3": ("abc<|close|>think<|sep|><|open|>response<|sep|>answer<|close|>response<|sep|>", "abc"),
    # the turn is the thinking, its generation prompt's preamble included
    "Apriel-1.6-15b-Thinker-fixed": ("abc\n[BEGIN FINAL RESPONSE]\nanswer", "Here are my reasoning steps:\nabc\n"),
}
# and a reply that answers at once, in the answer's markers (with thinking turned off where the template's
# generation prompt would open it): the template variables, the reply
ANSWERS_FIRST = {
    "openai-gpt-oss-120b": ({}, "<|channel|>final<|message|>answer"),
    "Cohere2MoE": ({"reasoning": False}, "<|START_TEXT|>answer<|END_TEXT|>"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ({}, "<|START_RESPONSE|>answer<|END_RESPONSE|>"),
    "Kimi-K3": ({"thinking": False}, "answer<|close|>response<|sep|>"),
}


@pytest.mark.parametrize("stem", REAL_REPLIES)
def test_a_real_templates_reply_is_split_as_llama_server_splits_it(tmp_path: Path, stem: str) -> None:
    template = (llama_cpp_source_dir() / "models" / "templates" / f"{stem}.jinja").read_text()
    model = write_tiny_llama(tmp_path / "model.gguf", TinyLlamaSpec(chat_template=template))
    reply, thinking = REAL_REPLIES[stem]
    with running(tiny_settings(model, n_seq_max=1, n_ctx=1024)) as ours, \
            llama_server(model, "-c", "1024", "-np", "1") as theirs:
        for stream in (False, True):
            mine, native = (chat(base, reply, None, stream) for base in (ours, theirs))
            assert mine == native
        assert mine[0]["reasoning_content"] == thinking  # (the content may be cut by max_tokens, alike)
        if stem in ANSWERS_FIRST:
            template_kwargs, answer = ANSWERS_FIRST[stem]
            for stream in (False, True):
                mine, native = (chat(base, answer, None, stream, template_kwargs) for base in (ours, theirs))
                assert mine == native
            assert mine == ({"reasoning_content": "", "content": "answer"}, ["content"])
