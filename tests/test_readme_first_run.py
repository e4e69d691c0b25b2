"""The README's first command, as a newcomer types it, answers correctly on the default model.

The command is read from the README itself, so the README and this test cannot
drift apart: changing the example question means changing the answer here too.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"

# The answer the README's example question has; it must be in what the command prints.
ANSWER = "Tokyo"


def _first_command() -> list[str]:
    """The arguments after ``python -m llama_cpp`` of the first such command in the README."""
    match = re.search(r"python -m llama_cpp (chat [^\n]*)", README.read_text(encoding="utf-8"))
    assert match, "the README shows no `python -m llama_cpp chat ...` command"
    return shlex.split(match.group(1))


def test_the_readme_command_answers_on_the_default_model(smollm2_model_path: Path) -> None:
    # As written: the default model (the fixture has fetched it), the CLI's default sampling (temperature
    # 0.2, any seed).  At that temperature each of the tokens up to " Tokyo" leads its runner-up by a
    # probability ratio above 10**5, so the answer is the greedy one whatever the seed.
    args = _first_command()
    assert "-m" not in args and "--model" not in args, "the first command is meant for the default model"
    proc = subprocess.run([sys.executable, "-m", "llama_cpp", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert ANSWER in proc.stdout, proc.stdout
