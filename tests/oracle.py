"""Running llama.cpp's own tools as oracles."""

from __future__ import annotations

import subprocess
from pathlib import Path

import llama_cpp_native
import pytest


def tool(name: str) -> Path:
    folder = llama_cpp_native.tools_dir()
    if folder is None or not (folder / name).exists():
        pytest.fail(f"{name} is not built: run `python -m llama_cpp_native build-tools` (the nox tests session does)")
    return folder / name


def llama_completion(model: Path, prompt: str, n_predict: int, *, n_ctx: int = 512, threads: int = 2,
                     extra: list[str] | None = None) -> bytes:
    """The bytes llama-completion generates (greedy unless ``extra`` says otherwise)."""
    cmd = [str(tool("llama-completion")), "-m", str(model), "-p", prompt, "-n", str(n_predict),
           "-c", str(n_ctx), "-t", str(threads), "-tb", str(threads), "--temp", "0", "-s", "0",
           "-no-cnv", "--no-display-prompt", "--no-warmup", *(extra or [])]
    # llama-completion ends its output with "\n\n" (after " [end of text]\n" when it met EOG). It
    # prints through common_log's background thread, which once in a few hundred runs here
    # exits before writing the last lines (exit status 0): such a cut-off output is run again.
    for _attempt in range(3):
        proc = subprocess.run(cmd, capture_output=True, timeout=300)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
        out = proc.stdout
        if out.endswith(b"\n\n"):
            break
    assert out.endswith(b"\n\n"), out[-40:]
    out = out[:-2]
    if out.endswith(b" [end of text]\n"):
        out = out[: -len(b" [end of text]\n")]
    return out
