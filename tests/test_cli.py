"""python -m llama_cpp: the main job on the default model, and llama.cpp's flags."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llama_cpp import Llama
from llama_cpp.__main__ import main
from llama_cpp_native import ffi, lib


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llama_cpp", *args], input=stdin, capture_output=True,
                          text=True, timeout=300)


def test_complete_runs_on_the_default_model(smollm2_model_path: Path) -> None:
    proc = _cli("complete", "The capital of France is", "-n", "12", "--temperature", "0")
    assert proc.returncode == 0, proc.stderr
    with Llama(str(smollm2_model_path), n_ctx=2048, verbose=False) as llm:
        expected = llm.create_completion("The capital of France is", max_tokens=12, temperature=0.0)
    assert proc.stdout == expected["choices"][0]["text"] + "\n"


def test_chat_one_shot_and_interactive(smollm2_model_path: Path) -> None:
    # SmolLM2's own template adds a default system message ("You are a helpful AI assistant named
    # SmolLM...") when none is given; with it this 135M model answers off the point, so give one.
    system = ("--system", "You are a helpful assistant.")
    one = _cli("chat", "What is the capital of France?", "--temp", "0", "-n", "24", *system,
               "--model", str(smollm2_model_path))
    assert one.returncode == 0, one.stderr
    assert "Paris" in one.stdout
    chat = _cli("chat", "--temp", "0", "-n", "16", *system, stdin="Hello!\nWhat is the capital of France?\n/exit\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.count("> ") >= 2 and "Paris" in chat.stdout


def test_info_and_plugins() -> None:
    info = _cli("info")
    assert info.returncode == 0 and '"general.architecture": "llama"' in info.stdout
    build = json.loads(info.stdout)["build"]
    assert build["llama.cpp"] and "CPU" in build["system_info"]
    plugins = _cli("plugins")
    assert plugins.returncode == 0 and "llama-cpp-samplers" in plugins.stdout


# A template llama.cpp's built-in matcher (llama_chat_apply_template) does not know.
ODD_TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                "{% if add_generation_prompt %}[assistant] {% endif %}")


def _odd_render(messages: list[dict[str, str]]) -> str:
    return "".join(f"[{m['role']}] {m['content']}\n" for m in messages) + "[assistant] "


class _Spy:
    """Records what the chat command asks of the Llama: the messages, the keywords and the prompt tokens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[dict[str, Any]] = []
        self.prompts: list[list[int]] = []
        self.llamas: list[Llama] = []
        chat, completion = Llama.create_chat_completion, Llama.create_completion

        def spy_chat(llm: Llama, messages: list[dict[str, str]], **kw: Any) -> Any:
            self.calls.append({"messages": [dict(m) for m in messages], **kw})
            self.llamas.append(llm)
            return chat(llm, messages, **kw)

        def spy_completion(llm: Llama, prompt: Any, *args: Any, **kw: Any) -> Any:
            self.prompts.append(list(prompt))
            return completion(llm, prompt, *args, **kw)

        monkeypatch.setattr(Llama, "create_chat_completion", spy_chat)
        monkeypatch.setattr(Llama, "create_completion", spy_completion)


def test_chat_renders_with_the_models_own_template_and_keeps_history(
        tiny_model_factory, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    model = tiny_model_factory(chat_template=ODD_TEMPLATE)
    chat = ffi.new("struct llama_chat_message[]", 1)
    keep = [ffi.new("char[]", b"user"), ffi.new("char[]", b"hi")]  # alive as long as chat points at them
    chat[0].role, chat[0].content = keep
    assert lib.llama_chat_apply_template(ODD_TEMPLATE.encode(), chat, 1, True, ffi.NULL, 0) < 0, \
        "llama.cpp's matcher knows this template: the test would prove nothing"
    spy = _Spy(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello there\nSecond question\n/reset\nThird\n/exit\nnever\n"))
    assert main(["chat", "-m", str(model), "-n", "4", "--temp", "0", "--system", "Be brief"]) == 0
    assert [c["messages"][-1]["content"] for c in spy.calls] == ["Hello there", "Second question", "Third"]
    first, second, third = (c["messages"] for c in spy.calls)
    assert second[:2] == first[:2] and second[2]["role"] == "assistant" and second[3]["role"] == "user"
    assert third == [first[0], {"role": "user", "content": "Third"}]  # /reset keeps only the system message
    printed = capsys.readouterr().out
    assert second[2]["content"] in printed  # the history holds the reply that was streamed
    with Llama(str(model), vocab_only=True, verbose=False) as vocab:
        for messages, prompt in zip((first, second, third), spy.prompts):
            assert prompt == vocab.tokenize(_odd_render(messages).encode(), add_bos=True, special=True)


def test_flags_reach_the_llama_over_the_config_file(
        tiny_model_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model_factory(chat_template=ODD_TEMPLATE)
    config = tmp_path / "llama.toml"
    config.write_text(f'model_path = "{model.name}"\nn_ctx = 256\nn_threads = 1\nchat_format = "chatml"\n')
    (tmp_path / model.name).symlink_to(model)
    monkeypatch.chdir("/")  # a relative model_path is relative to the config file, not to the working directory
    spy = _Spy(monkeypatch)
    assert main(["chat", "hi", "--config", str(config), "-c", "512", "-n", "3", "--temp", "0.5", "--top-k", "7",
                 "--top-p", "0.8", "--min-p", "0.1", "--seed", "42"]) == 0
    llm, call = spy.llamas[0], spy.calls[0]
    assert llm.context_params.n_ctx == 512  # -c over the file's n_ctx
    assert llm.context_params.n_threads == 1  # from the file
    assert llm.chat_format == "chatml"
    assert {k: call[k] for k in ("temperature", "top_k", "top_p", "min_p", "seed", "max_tokens")} == \
        dict(temperature=0.5, top_k=7, top_p=0.8, min_p=0.1, seed=42, max_tokens=3)
    assert main(["chat", "hi", "--config", str(config), "-t", "2", "-ngl", "0", "--chat-format", "llama-2",
                 "-n", "2"]) == 0
    llm = spy.llamas[1]
    assert llm.context_params.n_ctx == 256 and llm.context_params.n_threads == 2 and llm.chat_format == "llama-2"
    assert llm.model_params.n_gpu_layers == 0


def test_speculative_flags(tiny_model_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp's flags: --spec-type, -md (draft-simple when alone), --spec-draft-n-max/-n-min/-p-min."""
    model = str(tiny_model_factory(chat_template=ODD_TEMPLATE))
    spy = _Spy(monkeypatch)
    assert main(["chat", "Hello", "-m", model, "-n", "4", "--temp", "0", "--spec-type", "ngram-mod"]) == 0
    assert spy.llamas[0].speculative_engine.name == "ngram-mod"
    assert main(["chat", "Hello", "-m", model, "-n", "4", "--temp", "0", "-md", model, "--spec-draft-n-max", "2",
                 "--spec-draft-p-min", "0.5"]) == 0
    engine = spy.llamas[1].speculative_engine
    assert engine.name == "draft-simple" and engine.config.draft_n_max == 2 and engine.config.draft_p_min == 0.5
    with pytest.raises(SystemExit, match="need --spec-type"):
        main(["chat", "Hello", "-m", model, "--spec-draft-n-max", "2"])
