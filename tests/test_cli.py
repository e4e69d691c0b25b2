"""python -m llama_cpp: the main job on the default model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llama_cpp import Llama


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
    one = _cli("chat", "What is the capital of France?", "--temperature", "0", "-n", "24",
               "--model", str(smollm2_model_path))
    assert one.returncode == 0, one.stderr
    assert "Paris" in one.stdout
    chat = _cli("chat", "--temperature", "0", "-n", "16", stdin="Hello!\nWhat is the capital of France?\n\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.count("> ") >= 2 and "Paris" in chat.stdout


def test_info_and_plugins() -> None:
    info = _cli("info")
    assert info.returncode == 0 and '"general.architecture": "llama"' in info.stdout
    plugins = _cli("plugins")
    assert plugins.returncode == 0 and "llama-cpp-samplers" in plugins.stdout
