"""Running llama.cpp's own tools as oracles."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import llama_cpp_native
import numpy as np
import pytest


def tool(name: str) -> Path:
    folder = llama_cpp_native.tools_dir()
    if folder is None or not (folder / name).exists():
        pytest.fail(f"{name} is not built: run `python -m llama_cpp_native build-tools` (the nox tests session does)")
    return folder / name


# llama.cpp's tools print through common_log's background thread, which the process does not wait for at
# exit; while OpenMP's threads spin after each decode that thread gets no core on a two-core machine and
# the output's end is lost more often.  Sleeping idle threads change no result.
TOOL_ENV = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}


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
        proc = subprocess.run(cmd, capture_output=True, timeout=300, env=TOOL_ENV)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
        out = proc.stdout
        if out.endswith(b"\n\n"):
            break
    assert out.endswith(b"\n\n"), out[-40:]
    out = out[:-2]
    if out.endswith(b" [end of text]\n"):
        out = out[: -len(b" [end of text]\n")]
    return out


EMBD_SEPARATOR = "<#embd-sep#>"


def llama_embedding(model: Path, prompts: list[str], *, normalize: int, pooling: str | None = None,
                    n_rows: int | None = None, n_ctx: int = 512, batch: int = 512, threads: int = 2,
                    extra: list[str] | None = None) -> np.ndarray:
    """The rows llama-embedding prints for ``prompts`` (``--embd-output-format raw``): one per prompt when
    the context pools (the classifier's outputs under rank pooling), one per token (``n_rows`` in all)
    without pooling.  The prompts go through a file split on a separator no prompt contains, so a prompt
    may hold newlines; a rank prompt is ``query\\tdocument``.  Values are printed with 7 decimals (as
    integers with ``normalize=0``)."""
    assert not any(EMBD_SEPARATOR in p for p in prompts)
    expected = len(prompts) if n_rows is None else n_rows
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = Path(tmp) / "prompts.txt"
        prompt_file.write_text(EMBD_SEPARATOR.join(prompts), encoding="utf-8")
        cmd = [str(tool("llama-embedding")), "-m", str(model), "-f", str(prompt_file),
               "--embd-separator", EMBD_SEPARATOR, "--embd-normalize", str(normalize),
               "--embd-output-format", "raw", "-c", str(n_ctx), "-b", str(batch), "-ub", str(batch),
               "-t", str(threads), "-tb", str(threads), "--no-warmup", *(["--pooling", pooling] if pooling else []),
               *(extra or [])]
        # as llama-completion (above), llama-embedding logs through a background thread that can lose its
        # last lines at exit, or the end of its last line: a run with rows missing or cut is run again
        for _attempt in range(6):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=TOOL_ENV)
            assert proc.returncode == 0, proc.stderr[-2000:]
            rows = [line.split() for line in proc.stdout.splitlines() if line.strip()]
            whole = proc.stdout.endswith("\n") and len({len(row) for row in rows}) == 1
            if len(rows) == expected and whole:
                break
        assert len(rows) == expected and whole, f"llama-embedding printed {len(rows)} rows (whole: {whole}), " \
                                                f"expected {expected}"
    return np.asarray(rows, dtype=np.float64)


MTMD_RESPONSE_MARKER = "<#mtmd-response#>"
MTMD_SPARE_TOKENS = 16


def assert_llama_mtmd_cli_begins_with(ours: bytes, n_tokens: int, model: Path, mmproj: Path, media: list[Path],
                                      prompt: str, *, n_ctx: int = 4096, threads: int = 2,
                                      extra: list[str] | None = None) -> None:
    """llama-mtmd-cli, generating greedily for ``prompt`` with ``media`` (images or audio, in the order of
    the prompt's ``<__media__>`` markers; without a marker the tool puts one per file in front), begins
    with ``ours``: the pieces of our first ``n_tokens`` greedy tokens.

    The tool always renders the prompt through the model's chat template as one user message (the tiny
    mtmd models' template renders the content unchanged), tokenizes it with ``mtmd_tokenize_from_parts``
    (special tokens parsed, BOS added as the vocabulary says), decodes text chunks with
    ``mtmd_helper_eval_chunk_single`` and media chunks with ``mtmd_helper_decode_image_chunk`` in
    batches of ``-b`` (2048), then one token per decode.  It prints each token's piece (special tokens
    rendered) after the response marker line (``MTMD_TEST_RESPONSE_MARKER``) and the newline printed
    once the prompt is decoded.

    It prints through common_log's background thread, which the process does not wait for at exit: the
    end of the output is often lost (here, 12 of 20 unloaded runs of a 12-token answer printed nothing
    after the marker with spinning OpenMP threads, 10 of 20 lost the final blank line without).  So the
    tool is asked for ``MTMD_SPARE_TOKENS`` more tokens than we compare (``--ignore-eos``), and a run is
    decisive once it printed more bytes than ``ours``: a lost tail only ever shortens the output."""
    cmd = [str(tool("llama-mtmd-cli")), "-m", str(model), "--mmproj", str(mmproj),
           "--image", ",".join(str(m) for m in media), "-p", prompt, "-n", str(n_tokens + MTMD_SPARE_TOKENS),
           "-c", str(n_ctx), "-t", str(threads), "-tb", str(threads), "--temp", "0", "-s", "0", "--jinja",
           "--no-warmup", "--ignore-eos", *(extra or [])]
    env = {**TOOL_ENV, "MTMD_TEST_RESPONSE_MARKER": MTMD_RESPONSE_MARKER}
    head = MTMD_RESPONSE_MARKER.encode() + b"\n\n"
    theirs = b""
    for _attempt in range(8):
        proc = subprocess.run(cmd, capture_output=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
        if head in proc.stdout:
            theirs = max(theirs, proc.stdout.split(head, 1)[1], key=len)
        if len(theirs) > len(ours):
            break
    assert len(theirs) > len(ours), f"llama-mtmd-cli printed {len(theirs)} bytes in its longest of 8 runs, " \
                                    f"fewer than our {len(ours)}"
    assert theirs[:len(ours)] == ours, (theirs, ours)
