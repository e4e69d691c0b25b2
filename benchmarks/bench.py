"""Speed of llama_cpp against llama.cpp's own tools, in one run, with the same threads.

Prints one table of ratios (ours / native); higher is better, 1.0 is parity.

(a) tiny model, streamed greedy generation of 1024 tokens vs llama-completion
(b) the same with temperature 0.8, top_k 40, top_p 0.95, min_p 0.05
(c) SmolLM2 generation vs llama-bench tg128, prompt processing vs pp512

Run with ``nox -s bench``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import llama_cpp_native

from llama_cpp import Llama
from llama_cpp.default_model import cache_dir
from llama_cpp.testing import TinyLlamaSpec, smollm2_path, write_tiny_llama

THREADS = 2
REPEATS = 3


def _tool(name: str) -> str:
    folder = llama_cpp_native.tools_dir()
    if folder is None:
        sys.exit("llama.cpp's tools are not built: python -m llama_cpp_native build-tools")
    return str(folder / name)


def _tiny_model() -> Path:
    path = cache_dir() / "tiny-models" / TinyLlamaSpec().file_name()
    return path if path.exists() else write_tiny_llama(path)


def native_completion_tps(model: Path, n: int, sampling: list[str]) -> float:
    """llama-completion's own generation rate (its "eval time" line), best of REPEATS."""
    best = 0.0
    for _ in range(REPEATS):
        proc = subprocess.run(
            [_tool("llama-completion"), "-m", str(model), "-p", "Once upon a time", "-n", str(n), "-c", "2048",
             "-t", str(THREADS), "-tb", str(THREADS), "--ignore-eos", "-no-cnv", "--no-display-prompt", "-s", "1",
             *sampling],
            capture_output=True, text=True, errors="replace", timeout=600,
        )
        match = re.search(r"eval time =.*?/\s*(\d+) runs.*?([\d.]+) tokens per second", proc.stderr)
        if not match:
            sys.exit(f"could not read llama-completion's timings:\n{proc.stderr[-2000:]}")
        best = max(best, float(match.group(2)))
    return best


def ours_stream_tps(llm: Llama, n: int, **sampling: float) -> float:
    """Tokens per second of a streamed completion, from the first token to the last."""
    best = 0.0
    for _ in range(REPEATS):
        llm.reset()
        stream = llm.create_completion("Once upon a time", max_tokens=n, stream=True, ignore_eos=True, seed=1,
                                       **sampling)
        first = next(stream)
        t0 = time.perf_counter()
        count = 1 if first["choices"][0]["finish_reason"] is None else 0
        for chunk in stream:
            if chunk["choices"][0]["finish_reason"] is None:
                count += 1
        elapsed = time.perf_counter() - t0
        # chunks carry text; n tokens were generated (ignore_eos, max_tokens); the first one before t0
        best = max(best, (n - 1) / elapsed)
    return best


def llama_bench(model: Path) -> dict[str, float]:
    proc = subprocess.run(
        [_tool("llama-bench"), "-m", str(model), "-t", str(THREADS), "-p", "512", "-n", "128",
         "-r", str(REPEATS), "-o", "json"],
        capture_output=True, text=True, timeout=900,
    )
    rows = json.loads(proc.stdout)
    out = {}
    for row in rows:
        key = "pp512" if row["n_prompt"] else "tg128"
        out[key] = float(row["avg_ts"])
    return out


def ours_pp_tg(llm: Llama) -> dict[str, float]:
    """pp512: one 512-token prompt evaluation; tg128: 128 greedy tokens one by one."""
    rng_tokens = [(i * 7919) % (llm.n_vocab() - 10) + 5 for i in range(512)]
    pp = tg = 0.0
    for _ in range(REPEATS):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(rng_tokens)
        pp = max(pp, 512 / (time.perf_counter() - t0))
        llm.reset()
        gen = llm.generate(rng_tokens[:1], temperature=0.0, ignore_eos=True)
        next(gen)
        t0 = time.perf_counter()
        for i, _ in enumerate(gen, start=1):
            if i >= 128:
                break
        tg = max(tg, 128 / (time.perf_counter() - t0))
        gen.close()
    return {"pp512": pp, "tg128": tg}


def main() -> None:
    tiny = _tiny_model()
    smol = smollm2_path(quiet=True)
    rows = []
    sampled = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
    with Llama(str(tiny), n_ctx=2048, n_threads=THREADS, n_threads_batch=THREADS, verbose=False) as llm:
        ours = ours_stream_tps(llm, 1024, temperature=0.0)
        native = native_completion_tps(tiny, 1024, ["--temp", "0"])
        rows.append(("(a) tiny, streamed greedy, 1024 tokens", ours, native, 0.90))
        ours = ours_stream_tps(llm, 1024, **sampled)
        native = native_completion_tps(tiny, 1024, ["--temp", "0.8", "--top-k", "40", "--top-p", "0.95",
                                                    "--min-p", "0.05"])
        rows.append(("(b) tiny, streamed sampled, 1024 tokens", ours, native, 0.85))
    with Llama(str(smol), n_ctx=1024, n_threads=THREADS, n_threads_batch=THREADS, verbose=False) as llm:
        ours_pt = ours_pp_tg(llm)
    native_pt = llama_bench(smol)
    rows.append(("(c) SmolLM2 tg128 vs llama-bench", ours_pt["tg128"], native_pt["tg128"], 0.97))
    rows.append(("(c) SmolLM2 pp512 vs llama-bench", ours_pt["pp512"], native_pt["pp512"], 0.97))

    print(f"{'case':44} {'ours t/s':>10} {'native t/s':>11} {'ratio':>7} {'bar':>5}")
    for name, ours, native, bar in rows:
        ratio = ours / native
        flag = "ok" if ratio >= bar else "LOW"
        print(f"{name:44} {ours:10.1f} {native:11.1f} {ratio:7.3f} {bar:5.2f} {flag}")


if __name__ == "__main__":
    main()
