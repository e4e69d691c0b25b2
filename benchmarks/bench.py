"""Speed of llama_cpp against llama.cpp's own tools, in one run, with the same threads.

Prints one table of ratios (ours / native); higher is better, 1.0 is parity.

(a) tiny model, streamed greedy generation of 1024 tokens vs llama-completion
(b) the same with temperature 0.8, top_k 40, top_p 0.95, min_p 0.05
(c) SmolLM2 generation vs llama-bench tg128, prompt processing vs pp512
(d) tiny model, penalties + DRY + typical + XTC + top-n-sigma + dynamic temperature on top of (b)
(e) SmolLM2, 8 concurrent streamed greedy requests (64-token prompts, 128 tokens each) on one Llama
    with n_seq_max=8, aggregate generation rate vs llama-batched-bench -npl 8 -npp 64 -ntg 128
(f) SmolLM2 served: the load test of llama_cpp_server.loadtest (64 streamed chat requests, 8 at a time,
    128 tokens each) against our server (n_seq_max=8) and llama-server (-np 8), each in its own process
    with the same threads and context: aggregate generation rate (completion tokens over the run's time);
    (f2) the same load through llama-server's own /completion (the same prompts as plain text), on both
(g) all-MiniLM-L6-v2, 512 short sentences embedded (LlamaEmbedding.embed, unit length) vs
    llama-embedding on the same file of sentences, same threads and batch (512): sentences per second
(i) SmolLM2, greedy, 256 tokens of a prompt whose answer copies code it contains: every n-gram
    engine vs our plain decoding (speedup), and vs llama-speculative-simple with the same engine
    and settings (ratio); plain llama-completion on the same prompt for llama.cpp's own speedup.
    Then the model drafters on their tiny random-weight models (acceptance near 0: below 1x).
(h) SmolLM2, time to first token of a 1500-token prompt: a prompt cache hit (RAM, and disk read by a
    fresh cache object, as a new process would) against evaluating it cold; the bar is 10x.
(k) SmolLM2, the fair-share workload (three tenants sending 24, 4 and 4 streamed greedy requests of 64
    tokens at once, n_seq_max=4): aggregate generation rate under fair-share against fcfs on the same
    workload, both ours (fairness, preemption included, must not cost throughput; the bar is 0.95).

(j) SmolLM2 on 3 Ray Serve replicas sharing this machine's cores (1 thread each), behind the routing ingress:
    48 chats of 3 turns over 6 shared system prompts of about 400 tokens, 6 chats at a time, routed by prefix
    against Serve's power of two choices: time to first token p50 (the bar: prefix <= 0.6x pow2), aggregate
    tokens/s, and the prompt tokens the replicas evaluated.

Run with ``nox -s bench``; ``nox -s bench -- f h`` runs those cases alone (any of a b c d e f f2 g h i j k).
``--gpu-layers N`` offloads N layers on both sides (llama.cpp built with a GPU backend, docs/performance.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import llama_cpp_native

from llama_cpp import Llama
from llama_cpp.default_model import cache_dir
from llama_cpp.testing import TinyLlamaSpec, smollm2_path, write_tiny_llama
from llama_cpp.testing.tiny_spec_models import spec_model_path

THREADS = 2
ROUNDS = 5
# Layers both sides offload to the GPU (``--gpu-layers``); None leaves each side its own default, which is the
# same "auto" on both, so a CPU build's runs are unchanged.
GPU_LAYERS: int | None = None


def ours_settings(**kw: object) -> dict[str, object]:
    """The keyword arguments of every ``Llama`` of the bench: the native side's threads and offload, plus ``kw``."""
    offload = {} if GPU_LAYERS is None else {"n_gpu_layers": GPU_LAYERS}
    return dict(n_threads=THREADS, n_threads_batch=THREADS, verbose=False, **offload, **kw)


def offload_flags() -> list[str]:
    """llama.cpp's tools' flag for the same offload as ``ours_settings``."""
    return [] if GPU_LAYERS is None else ["-ngl", str(GPU_LAYERS)]


def native_threads() -> list[str]:
    """The thread and offload flags of the llama.cpp tools that take both thread counts."""
    return ["-t", str(THREADS), "-tb", str(THREADS), *offload_flags()]


def _tool(name: str) -> str:
    folder = llama_cpp_native.tools_dir()
    if folder is None:
        sys.exit("llama.cpp's tools are not built: python -m llama_cpp_native build-tools")
    if not (folder / name).exists():
        sys.exit(f"{name} is not built: python -m llama_cpp_native build-tools --server")
    return str(folder / name)


def _tiny_model() -> Path:
    path = cache_dir() / "tiny-models" / TinyLlamaSpec().file_name()
    return path if path.exists() else write_tiny_llama(path)


def native_completion_tps(model: Path, n: int, sampling: list[str]) -> tuple[float, float]:
    """llama-completion's generation rate from its own counters: (decode only, decode + sampling).

    llama.cpp logs from a background thread and now and then loses the last
    lines at exit, so a run whose counters are missing is repeated.
    """
    for _ in range(5):
        proc = subprocess.run(
            [_tool("llama-completion"), "-m", str(model), "-p", "Once upon a time", "-n", str(n), "-c", "2048",
             *native_threads(), "--ignore-eos", "-no-cnv", "--no-display-prompt", "-s", "1",
             *sampling],
            capture_output=True, text=True, errors="replace", timeout=600,
        )
        evals = re.search(r" eval time =\s*([\d.]+) ms /\s*(\d+) runs", proc.stderr)
        sampling_ms = re.search(r"sampling time =\s*([\d.]+) ms", proc.stderr)
        if evals and sampling_ms:
            eval_ms, runs = float(evals.group(1)), int(evals.group(2))
            return runs / (eval_ms / 1000), runs / ((eval_ms + float(sampling_ms.group(1))) / 1000)
    sys.exit(f"could not read llama-completion's timings:\n{proc.stderr[-2000:]}")


def ours_stream_tps(llm: Llama, n: int, **sampling: float) -> float:
    """Tokens per second of a streamed completion, from the first token to the last.

    With ignore_eos and max_tokens, exactly n tokens are generated; the first
    arrives before the clock starts (it includes the prompt).
    """
    llm.reset()
    stream = llm.create_completion("Once upon a time", max_tokens=n, stream=True, ignore_eos=True, seed=1,
                                   **sampling)
    next(stream)
    t0 = time.perf_counter()
    for _ in stream:
        pass
    return (n - 1) / (time.perf_counter() - t0)


def llama_bench(model: Path) -> dict[str, float]:
    proc = subprocess.run(
        [_tool("llama-bench"), "-m", str(model), "-t", str(THREADS), *offload_flags(), "-p", "512", "-n", "128",
         "-r", "1", "-o", "json"],
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
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(rng_tokens)
    _ = llm.scores  # a GPU decode returns before its graph has run: the logits wait for it, as llama-bench waits
    pp = 512 / (time.perf_counter() - t0)
    llm.reset()
    gen = llm.generate(rng_tokens[:1], temperature=0.0, ignore_eos=True)
    next(gen)
    t0 = time.perf_counter()
    for i, _ in enumerate(gen, start=1):
        if i >= 128:
            break
    tg = 128 / (time.perf_counter() - t0)
    gen.close()
    return {"pp512": pp, "tg128": tg}


PARALLEL, PARALLEL_PROMPT, PARALLEL_GEN = 8, 64, 128


def batched_bench_tg(model: Path) -> float:
    """llama-batched-bench's generation rate (S_TG) with 8 sequences, each 64 prompt and 128 new tokens."""
    proc = subprocess.run(
        [_tool("llama-batched-bench"), "-m", str(model), "-c", "2048", "-b", "2048", "-ub", "512",
         *native_threads(), "-npp", str(PARALLEL_PROMPT), "-ntg", str(PARALLEL_GEN),
         "-npl", str(PARALLEL), "--output-format", "jsonl"],
        capture_output=True, text=True, timeout=900,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            return float(json.loads(line)["speed_tg"])
    sys.exit(f"could not read llama-batched-bench's output:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")


def ours_parallel_tg(llm: Llama) -> float:
    """8 threads stream 128 greedy tokens each; the aggregate rate from the moment every stream has its
    first token (the prompts are done) to the last token."""
    prompts = [[(i * 7919 + j * 104729) % (llm.n_vocab() - 10) + 5 for i in range(PARALLEL_PROMPT)]
               for j in range(PARALLEL)]
    llm.reset()
    firsts: list[float] = []
    ends: list[float] = []
    barrier = threading.Barrier(PARALLEL)

    def run(prompt: list[int]) -> None:
        barrier.wait()
        stream = llm.create_completion(prompt, max_tokens=PARALLEL_GEN, temperature=0.0, ignore_eos=True,
                                       stream=True)
        next(stream)
        firsts.append(time.perf_counter())
        for _ in stream:
            pass
        ends.append(time.perf_counter())

    threads = [threading.Thread(target=run, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return PARALLEL * (PARALLEL_GEN - 1) / (max(ends) - max(firsts))


SPEC_CODE = ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
             "    return a * b\n\ndef div(a, b):\n    if b == 0:\n        raise ZeroDivisionError('b must not be "
             "zero')\n    return a / b\n\n")
SPEC_PROMPT = ("Here is some Python code:\n\n" + SPEC_CODE + "Write the same code again, exactly:\n\n" + SPEC_CODE
               + "Once more, exactly:\n\n")
SPEC_N = 256
SPEC_ENGINES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


def ours_copy_tps(llm: Llama, prompt: str = SPEC_PROMPT, n: int = SPEC_N) -> float:
    """Greedy generation rate of a streamed completion, first token to last (prompt excluded)."""
    times = [time.perf_counter() for _ in llm.create_completion(prompt, max_tokens=n, temperature=0.0, stream=True)]
    return (len(times) - 1) / (times[-1] - times[0])


def native_copy_tps(model: Path, spec_type: str | None) -> tuple[float, int, int]:
    """llama.cpp's generation rate on the same prompt: llama-speculative-simple with ``spec_type``
    (its decode phase), or llama-completion's eval rate when None; with drafted and accepted counts.
    The prompt goes in with -p: -f drops the file's last newline."""
    common = ["-m", str(model), "-p", SPEC_PROMPT, "-n", str(SPEC_N), "--temp", "0", *native_threads(),
              "-c", "2048"]
    if spec_type is None:
        for _ in range(5):
            proc = subprocess.run([_tool("llama-completion"), *common, "-no-cnv", "--no-display-prompt"],
                                  capture_output=True, text=True, errors="replace", timeout=600)
            evals = re.search(r" eval time =\s*([\d.]+) ms /\s*(\d+) runs", proc.stderr)
            if evals:
                return int(evals.group(2)) / (float(evals.group(1)) / 1000), 0, 0
        sys.exit(f"could not read llama-completion's timings:\n{proc.stderr[-2000:]}")
    for _ in range(5):
        proc = subprocess.run([_tool("llama-speculative-simple"), *common, "--spec-type", spec_type],
                              capture_output=True, text=True, errors="replace", timeout=600)
        log = proc.stdout + proc.stderr
        speed = re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", log)
        drafted, accepted = re.search(r"n_drafted = (\d+)", log), re.search(r"n_accept\s+= (\d+)", log)
        if speed and drafted and accepted:
            return float(speed.group(1)), int(drafted.group(1)), int(accepted.group(1))
    sys.exit(f"could not read llama-speculative-simple's output:\n{log[-2000:]}")


def speculative_case(smol: Path) -> None:
    """(i): see the module's docstring.  Prints its own table."""
    rounds = max(3, ROUNDS // 2)
    plain_ours: list[float] = []
    plain_native: list[float] = []
    ours: dict[str, list[float]] = {e: [] for e in SPEC_ENGINES}
    native: dict[str, list[float]] = {e: [] for e in SPEC_ENGINES}
    counts: dict[str, tuple[int, int, int, int]] = {}
    kw = ours_settings(n_ctx=2048)
    with Llama(str(smol), **kw) as plain:
        llms = {e: Llama(str(smol), speculative={"engine": e}, **kw) for e in SPEC_ENGINES}
        for _ in range(rounds):
            plain_ours.append(ours_copy_tps(plain))
            plain_native.append(native_copy_tps(smol, None)[0])
            for engine, llm in llms.items():
                ours[engine].append(ours_copy_tps(llm))
                stats = llm.last_speculative_stats
                rate, drafted, accepted = native_copy_tps(smol, engine)
                native[engine].append(rate)
                counts[engine] = (stats["drafted"], stats["accepted"], drafted, accepted)
        for llm in llms.values():
            llm.close()
    print(f"\n(i) SmolLM2 copying code, greedy, {SPEC_N} tokens, {rounds} rounds: plain ours "
          f"{_median(plain_ours):.1f} t/s, plain llama-completion {_median(plain_native):.1f} t/s")
    print(f"{'engine':15} {'ours t/s':>9} {'speedup':>8} {'native':>9} {'speedup':>8} {'ratio':>6} "
          f"{'ours acc/draft':>15} {'native acc/draft':>17}")
    best = max(SPEC_ENGINES, key=lambda e: _median(ours[e]))
    for engine in SPEC_ENGINES:
        d, a, nd, na = counts[engine]
        print(f"{engine:15} {_median(ours[engine]):9.1f} {_median(ours[engine]) / _median(plain_ours):8.2f} "
              f"{_median(native[engine]):9.1f} {_median(native[engine]) / _median(plain_native):8.2f} "
              f"{_paired_ratio(ours[engine], native[engine]):6.3f} {f'{a}/{d}':>15} {f'{na}/{nd}':>17}")
    speedup = _median(ours[best]) / _median(plain_ours)
    ratio = _paired_ratio(ours[best], native[best])
    print(f"best: {best}: speedup {speedup:.2f} (bar 1.50 {'ok' if speedup >= 1.5 else 'LOW'}), "
          f"vs llama.cpp {ratio:.3f} (bar 0.90 {'ok' if ratio >= 0.90 else 'LOW'})")
    model_drafters_on_random_weights()


SERVER_REQUESTS, SERVER_CONCURRENCY, SERVER_TOKENS, SERVER_CTX = 64, 8, 128, 2048


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _server(command: list[str], url: str) -> Iterator[None]:
    """``command`` (a server listening at ``url``) running until the block ends, once /health says ready."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    sys.exit(f"{command[0]} did not start:\n{log.read().decode(errors='replace')[-3000:]}")
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _server_commands(model: Path, port: int) -> dict[str, list[str]]:
    """Our server and llama-server with the same model, context, sequences, batch sizes and threads."""
    return {
        "ours": [sys.executable, "-m", "llama_cpp_server", "--model", str(model), "--model_alias", "smollm2",
                 "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(SERVER_CTX),
                 "--n_seq_max", str(SERVER_CONCURRENCY), "--n_batch", "2048", "--n_ubatch", "512",
                 "--n_threads", str(THREADS), "--n_threads_batch", str(THREADS), "--chat_page", "false",
                 *([] if GPU_LAYERS is None else ["--n_gpu_layers", str(GPU_LAYERS)])],
        "native": [_tool("llama-server"), "-m", str(model), "-a", "smollm2", "--host", "127.0.0.1",
                   "--port", str(port), "-c", str(SERVER_CTX), "-np", str(SERVER_CONCURRENCY), "-b", "2048",
                   "-ub", "512", *native_threads(), "--no-webui"],
    }


def server_case(smol: Path, route: str = "chat") -> None:
    """(f) (``route`` "chat") and (f2) ("completion"): see the module's docstring.  Each round starts each
    server afresh (alone on the machine while it is measured), warms it with one request, then runs the load;
    the sides alternate.  Prints its own table."""
    from llama_cpp_server.loadtest import LoadReport, chat_bodies, completion_bodies, run

    case, bar = ("(f)", 0.85) if route == "chat" else ("(f2)", 0.95)
    rounds = max(3, ROUNDS // 2)
    bodies = (chat_bodies(SERVER_REQUESTS, max_tokens=SERVER_TOKENS, model="smollm2", ignore_eos=True)
              if route == "chat" else completion_bodies(SERVER_REQUESTS, max_tokens=SERVER_TOKENS, ignore_eos=True))
    reports: dict[str, list[LoadReport]] = {"ours": [], "native": []}
    for round_ in range(rounds):
        for side in reports:
            port = _free_port()
            url = f"http://127.0.0.1:{port}"
            with _server(_server_commands(smol, port)[side], url):
                warm = run(url, bodies[:1], 1, route=route)
                if warm.errors:
                    sys.exit(f"{side} server: {warm.errors[0].error}")
                report = run(url, bodies, SERVER_CONCURRENCY, route=route)
            expected = SERVER_REQUESTS * SERVER_TOKENS
            if report.errors or report.completion_tokens != expected:
                sys.exit(f"{side} server: {len(report.errors)} errors, {report.completion_tokens} completion tokens "
                         f"of {expected}: {report.errors[0].error if report.errors else ''}")
            reports[side].append(report)
        print(f"{case} round {round_ + 1}: ours {reports['ours'][-1].tokens_per_second:.1f} tokens/s, llama-server "
              f"{reports['native'][-1].tokens_per_second:.1f}", flush=True)
    ours = [r.tokens_per_second for r in reports["ours"]]
    native = [r.tokens_per_second for r in reports["native"]]
    ratio = _paired_ratio(ours, native)
    print(f"\n{case} SmolLM2 served, {SERVER_REQUESTS} streamed {route} requests ({SERVER_TOKENS} tokens each) "
          f"at concurrency {SERVER_CONCURRENCY}, {THREADS} threads, {rounds} interleaved rounds; medians")
    print(f"{'server':12} {'tokens/s':>9} {'req/s':>6} {'latency p50':>12} {'p99':>7} {'TTFT p50':>9} {'p99':>7}")
    for side, name in (("ours", "ours"), ("native", "llama-server")):
        runs = reports[side]
        print(f"{name:12} {_median([r.tokens_per_second for r in runs]):9.1f} "
              f"{_median([r.requests_per_second for r in runs]):6.2f} {_median([r.latency(50) for r in runs]):12.3f} "
              f"{_median([r.latency(99) for r in runs]):7.3f} {_median([r.ttft(50) for r in runs]):9.3f} "
              f"{_median([r.ttft(99) for r in runs]):7.3f}")
    print(f"{case + ' generation rate through the server vs llama-server':52} {_median(ours):9.1f} "
          f"{_median(native):9.1f} {ratio:6.3f} {bar:5.2f} {'ok' if ratio >= bar else 'LOW'}")


ROUTING_REPLICAS = 3
ROUTING_USERS, ROUTING_TURNS, ROUTING_CONCURRENCY, ROUTING_TOKENS = 48, 3, 6, 16


def routing_case(smol: Path) -> None:
    """(j): see the module's docstring.  One local Ray (this machine's cores), the same workload routed by Serve's
    power of two choices, then by prefix, each through the routing ingress on fresh replicas.  Prints its own
    table; the bar is on the time to first token (lower is better)."""
    import asyncio

    import ray
    from llama_cpp_server import Settings
    from llama_cpp_server.loadtest import LoadReport, run_conversations, shared_system_prompts
    from llama_cpp_server.ray_serve import deployment
    from ray import serve

    settings = Settings(model=str(smol), model_alias="smollm2", n_ctx=4096, n_seq_max=4, n_threads=1,
                        n_threads_batch=1)
    systems = shared_system_prompts(6)
    port = _free_port()
    ray.init(address="local", num_cpus=THREADS, include_dashboard=False, object_store_memory=100 << 20,
             logging_level="ERROR", log_to_driver=False)
    reports: dict[str, LoadReport] = {}
    evaluated: dict[str, int] = {}
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        for routing in ("pow2", "prefix"):
            serve.run(deployment(settings, num_replicas=ROUTING_REPLICAS, routing=routing,
                                 ray_actor_options={"num_cpus": THREADS / ROUTING_REPLICAS}),
                      name="bench-j", route_prefix="/")
            try:
                report, _ = asyncio.run(run_conversations(
                    f"http://127.0.0.1:{port}", systems, ROUTING_USERS, ROUTING_TURNS, ROUTING_CONCURRENCY,
                    max_tokens=ROUTING_TOKENS, model="smollm2"))
            finally:
                serve.delete("bench-j")
            if report.errors:
                sys.exit(f"(j) {routing}: {len(report.errors)} errors: {report.errors[0].error}")
            reports[routing] = report
            evaluated[routing] = sum(r.prompt_evaluated or 0 for r in report.results)
    finally:
        serve.shutdown()
        ray.shutdown()
    print(f"\n(j) SmolLM2 on {ROUTING_REPLICAS} Ray Serve replicas (1 thread each, {THREADS} cores), {ROUTING_USERS} "
          f"chats of {ROUTING_TURNS} turns over 6 shared system prompts, {ROUTING_CONCURRENCY} at a time, "
          f"{ROUTING_TOKENS} tokens a turn")
    print(f"{'routing':8} {'TTFT p50':>9} {'p99':>7} {'tokens/s':>9} {'prompt tokens':>14} {'evaluated':>10}")
    for routing, report in reports.items():
        prompt_tokens = sum(r.prompt_tokens or 0 for r in report.results)
        print(f"{routing:8} {report.ttft(50):9.3f} {report.ttft(99):7.3f} {report.tokens_per_second:9.1f} "
              f"{prompt_tokens:14d} {evaluated[routing]:10d}")
    ratio = reports["prefix"].ttft(50) / reports["pow2"].ttft(50)
    print(f"{'(j) prefix routing TTFT p50 / pow2 (lower is better)':52} {reports['prefix'].ttft(50):9.3f} "
          f"{reports['pow2'].ttft(50):9.3f} {ratio:6.3f} {0.6:5.2f} {'ok' if ratio <= 0.6 else 'HIGH'}")


CACHE_PROMPT_TOKENS = 1500
HIT_REPEATS = 3


def _first_token_seconds(llm: Llama, prompt: list[int]) -> float:
    """Time from the call to the first streamed token (the second token is generated and the cache is
    given its snapshot after that, outside the measurement)."""
    start = time.perf_counter()
    stream = llm.create_completion(prompt, max_tokens=2, temperature=0.0, stream=True)
    next(stream)
    seconds = time.perf_counter() - start
    for _ in stream:
        pass
    return seconds


def cache_case(smol: Path) -> None:
    """(h): see the module's docstring.  Prints its own table."""
    from llama_cpp.llama_cache import LlamaDiskCache, LlamaRAMCache

    rounds = 3  # of the cold run; a hit is cheap, so it is measured HIT_REPEATS times in each round
    text = " ".join(f"Paragraph {i}: the committee met on day {i * 7 % 31 + 1} to discuss item {i * 13 % 97}, "
                    f"and agreed that {['cost', 'risk', 'time', 'scope'][i % 4]} mattered most." for i in range(200))
    with tempfile.TemporaryDirectory() as directory, \
            Llama(str(smol), **ours_settings(n_ctx=2048)) as llm:
        prompt = llm.tokenize(text.encode())[:CACHE_PROMPT_TOKENS]
        times: dict[str, list[float]] = {"cold": [], "ram": [], "disk": []}
        caches = {"cold": lambda: None, "ram": lambda: LlamaRAMCache(capacity_bytes=1 << 30),
                  "disk": lambda: LlamaDiskCache(directory, capacity_bytes=1 << 30)}
        ram = caches["ram"]()
        for _ in range(rounds):
            for name in times:
                llm.set_cache(ram if name == "ram" else caches[name]())
                if name != "cold" and not len(llm.cache):
                    llm.reset()
                    _first_token_seconds(llm, prompt)  # fills the cache
                for _ in range(1 if name == "cold" else HIT_REPEATS):
                    if name == "disk":  # a new object each time: nothing in memory, the file is read and checked
                        llm.set_cache(caches[name]())
                    llm.reset()  # nothing left in the sequence: a hit comes from the cache alone
                    times[name].append(_first_token_seconds(llm, prompt))
        state_mb = len(llm.snapshot_sequence().state) / 1e6
    cold = _median(times["cold"])
    print(f"\n(h) SmolLM2, time to first token of a {len(prompt)}-token prompt ({state_mb:.1f} MB of state), "
          f"medians of {rounds} cold runs and {rounds * HIT_REPEATS} hits")
    print(f"{'case':24} {'seconds':>8} {'speedup':>8} {'bar':>5}")
    print(f"{'cold (no cache)':24} {cold:8.3f}")
    for name, label in (("ram", "RAM cache hit"), ("disk", "disk cache hit")):
        hit = _median(times[name])
        print(f"{label:24} {hit:8.3f} {cold / hit:8.1f} {10:5} {'ok' if cold / hit >= 10 else 'LOW'}")


def model_drafters_on_random_weights() -> None:
    """The model drafters on tiny random-weight models: almost nothing is accepted, so below 1x."""
    def path(name: str) -> str:
        return str(spec_model_path(name))

    cases = {"draft-simple": ("target", {"draft_model_path": path("target")}),
             "draft-eagle3": ("target", {"draft_model_path": path("eagle3")}),
             "draft-dflash": ("target", {"draft_model_path": path("dflash")}),
             "draft-dspark": ("target", {"draft_model_path": path("dspark")}),
             "draft-mtp": ("glm4moe", {}),
             "draft-mtp (qwen35 hybrid)": ("qwen35", {})}
    print("\nmodel drafters on tiny random-weight models, greedy, 128 tokens (acceptance ~0 by construction)")
    print(f"{'engine':26} {'plain t/s':>9} {'spec t/s':>9} {'speedup':>8} {'acc/draft':>10}")
    for name, (target, options) in cases.items():
        kw = ours_settings(n_ctx=512)
        with Llama(path(target), **kw) as plain:
            base = _median([ours_copy_tps(plain, "Hello world", 128) for _ in range(3)])
        with Llama(path(target), speculative={"engine": name.split()[0], **options}, **kw) as llm:
            rate = _median([ours_copy_tps(llm, "Hello world", 128) for _ in range(3)])
            stats = llm.last_speculative_stats
        print(f"{name:26} {base:9.1f} {rate:9.1f} {rate / base:8.2f} {stats['accepted']:>4}/{stats['drafted']:<5}")


FAIR_TENANTS, FAIR_GEN = (24, 4, 4), 64


def tenant_workload_tps(llm: Llama) -> float:
    """Every request of the fair-share workload started at once, each on its thread: generated tokens over
    the time from the first start to the last end."""
    llm.reset()
    jobs = [(f"tenant-{t}", f"Request {i} of tenant {t}: write a story about the sea.")
            for t, n in enumerate(FAIR_TENANTS) for i in range(n)]
    ends: list[float] = []
    barrier = threading.Barrier(len(jobs) + 1)

    def run(tenant: str, prompt: str) -> None:
        barrier.wait()
        for _ in llm.create_completion(prompt, max_tokens=FAIR_GEN, temperature=0.0, ignore_eos=True,
                                       stream=True, tenant=tenant):
            pass
        ends.append(time.perf_counter())

    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return len(jobs) * FAIR_GEN / (max(ends) - start)


def fair_share_case(smol: Path) -> None:
    """(k): fair-share against fcfs on the same workload, interleaved rounds."""
    rates: dict[str, list[float]] = {"fair-share": [], "fcfs": []}
    llms = {name: Llama(str(smol), **ours_settings(n_ctx=4096, n_seq_max=4, scheduling={"policy": name}))
            for name in rates}
    try:
        for _ in range(ROUNDS):
            for name, llm in llms.items():
                rates[name].append(tenant_workload_tps(llm))
        preemptions = llms["fair-share"].scheduler.counters.n_preemptions
    finally:
        for llm in llms.values():
            llm.close()
    ratio = _paired_ratio(rates["fair-share"], rates["fcfs"])
    print(f"{'(k) SmolLM2, tenants 24/4/4: fair-share vs fcfs':52} {_median(rates['fair-share']):9.1f} "
          f"{_median(rates['fcfs']):9.1f} {ratio:6.3f} {0.95:5.2f} {'ok' if ratio >= 0.95 else 'LOW'}"
          f"  ({preemptions} preemptions in {ROUNDS} rounds)")


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _paired_ratio(ours: list[float], native: list[float]) -> float:
    """Median of the per-round ratios: each round's two measurements were taken back to back,
    so the machine's drift between rounds cancels out."""
    return statistics.median(o / n for o, n in zip(ours, native))


EMBED_SENTENCES = 512
EMBED_BATCH = 512
_EMBED_WORDS = ("river stone garden window quiet morning people city train music paper light small green "
                "yesterday bright winter coffee table story friend mountain ocean slowly carefully market "
                "village teacher student museum bridge evening").split()


def _embedding_sentences() -> list[str]:
    """EMBED_SENTENCES deterministic sentences of 4 to 12 words (about 7 to 16 tokens with [CLS]/[SEP])."""
    out = []
    for i in range(EMBED_SENTENCES):
        words = [_EMBED_WORDS[(i * 7 + j * 11) % len(_EMBED_WORDS)] for j in range(4 + i % 9)]
        out.append(" ".join(words).capitalize() + ".")
    return out


def native_embedding_seconds(model: Path, prompt_file: Path, separator: str) -> float:
    """Wall time of llama-embedding over the file: load, tokenize, decode, normalize.  It is given an output
    format it does not know, so it prints nothing: its rate has no cost for the vectors' output, while ours
    includes making them Python lists."""
    start = time.perf_counter()
    proc = subprocess.run(
        [_tool("llama-embedding"), "-m", str(model), "-f", str(prompt_file), "--embd-separator", separator,
         "--embd-output-format", "none", "-c", str(EMBED_BATCH), "-b", str(EMBED_BATCH), "-ub", str(EMBED_BATCH),
         *native_threads(), "--no-warmup"],
        capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"llama-embedding failed:\n{proc.stderr[-2000:]}")
    return seconds


def embedding_case() -> None:
    """(g): see the module's docstring.  llama-embedding's rate counts only the work the extra sentences
    cost: its run on one sentence (process start, model load, context) is subtracted from its run on all of
    them, taken back to back; ours is the embed() call alone, on a model loaded once.  Prints its own table."""
    from llama_cpp.llama_embedding import LlamaEmbedding
    from llama_cpp.testing import minilm_path

    model = minilm_path(quiet=True)
    sentences = _embedding_sentences()
    separator = "<#sep#>"
    ours: list[float] = []
    native: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, \
            LlamaEmbedding(str(model), **ours_settings(n_ctx=EMBED_BATCH, n_batch=EMBED_BATCH,
                                                       n_ubatch=EMBED_BATCH)) as llm:
        every, one = Path(tmp) / "sentences.txt", Path(tmp) / "one.txt"
        every.write_text(separator.join(sentences), encoding="utf-8")
        one.write_text(sentences[0], encoding="utf-8")
        n_tokens = sum(len(llm.tokenize(s.encode())) for s in sentences)
        llm.embed(sentences[:8])  # first-call costs (page faults of the weights) are not the rate
        for _ in range(ROUNDS):
            start = time.perf_counter()
            vectors = llm.embed(sentences)
            ours.append(len(vectors) / (time.perf_counter() - start))
            full = native_embedding_seconds(model, every, separator)
            base = native_embedding_seconds(model, one, separator)
            native.append((EMBED_SENTENCES - 1) / max(full - base, 1e-6))
    ratio = _paired_ratio(ours, native)
    print(f"\n(g) all-MiniLM-L6-v2, {EMBED_SENTENCES} sentences ({n_tokens} tokens), batch {EMBED_BATCH}, "
          f"{THREADS} threads, {ROUNDS} interleaved rounds")
    print(f"{'case':52} {'ours s/s':>9} {'native':>9} {'ratio':>6} {'bar':>5}")
    print(f"{'(g) MiniLM embeddings vs llama-embedding':52} {_median(ours):9.1f} {_median(native):9.1f} "
          f"{ratio:6.3f} {0.90:5.2f} {'ok' if ratio >= 0.90 else 'LOW'}")


SAMPLED = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
NATIVE_SAMPLED = ["--temp", "0.8", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05"]
# (d): the rest of the sampler family at once, with the same settings on both sides
FAMILY = dict(SAMPLED, repeat_penalty=1.1, frequency_penalty=0.1, presence_penalty=0.1, penalty_last_n=64,
              dry_multiplier=0.8, dry_allowed_length=2, dry_penalty_last_n=64, typical_p=0.95,
              xtc_probability=0.3, xtc_threshold=0.1, top_n_sigma=2.0, dynatemp_range=0.3)
NATIVE_FAMILY = [*NATIVE_SAMPLED, "--repeat-penalty", "1.1", "--frequency-penalty", "0.1",
                 "--presence-penalty", "0.1", "--repeat-last-n", "64", "--dry-multiplier", "0.8",
                 "--dry-allowed-length", "2", "--dry-penalty-last-n", "64", "--typical", "0.95",
                 "--xtc-probability", "0.3", "--xtc-threshold", "0.1", "--top-nsigma", "2.0",
                 "--dynatemp-range", "0.3"]
TINY_CASES = {"a": ("(a) tiny, streamed greedy, 1024 tokens", dict(temperature=0.0), ["--temp", "0"], 0.90),
              "b": ("(b) tiny, streamed sampled, 1024 tokens", SAMPLED, NATIVE_SAMPLED, 0.85),
              "d": ("(d) tiny, all sampler families, 1024 tokens", FAMILY, NATIVE_FAMILY, 0.80)}
TABLE_CASES = ("a", "b", "c", "d", "e")  # the cases of the first table; the others print their own


def _row(label: str, ours: list[float], native: list[float], bar: float) -> None:
    ratio = _paired_ratio(ours, native)
    print(f"{label:52} {_median(ours):9.1f} {_median(native):9.1f} {ratio:6.3f} {bar:5.2f} "
          f"{'ok' if ratio >= bar else 'LOW'}")


def tiny_cases(keys: list[str]) -> None:
    """(a), (b), (d): streamed generation on the tiny model against llama-completion's decode rate and its
    decode + sampling rate, rounds alternating the two sides so that machine-wide drift hits both alike."""
    samples: dict[str, dict[str, list[float]]] = {k: {"ours": [], "eval": [], "e2e": []} for k in keys}
    tiny = _tiny_model()
    with Llama(str(tiny), **ours_settings(n_ctx=2048)) as llm:
        for _ in range(ROUNDS):
            for key in keys:
                _, ours_kw, native_kw, _ = TINY_CASES[key]
                samples[key]["ours"].append(ours_stream_tps(llm, 1024, **ours_kw))
                eval_rate, e2e_rate = native_completion_tps(tiny, 1024, native_kw)
                samples[key]["eval"].append(eval_rate)
                samples[key]["e2e"].append(e2e_rate)
    for key in keys:
        name, _, _, bar = TINY_CASES[key]
        _row(f"{name} vs decode rate", samples[key]["ours"], samples[key]["eval"], bar)
        _row(f"{name} vs decode+sampling rate", samples[key]["ours"], samples[key]["e2e"], bar)


def single_sequence_case(smol: Path) -> None:
    """(c): SmolLM2 prompt processing and generation against llama-bench."""
    ours: dict[str, list[float]] = {"pp512": [], "tg128": []}
    native: dict[str, list[float]] = {"pp512": [], "tg128": []}
    with Llama(str(smol), **ours_settings(n_ctx=1024)) as llm:
        for _ in range(ROUNDS):
            for key, value in ours_pp_tg(llm).items():
                ours[key].append(value)
            for key, value in llama_bench(smol).items():
                native[key].append(value)
    _row("(c) SmolLM2 generation vs llama-bench tg128", ours["tg128"], native["tg128"], 0.97)
    _row("(c) SmolLM2 prompt vs llama-bench pp512", ours["pp512"], native["pp512"], 0.97)


def parallel_case(smol: Path) -> None:
    """(e): see the module's docstring."""
    ours: list[float] = []
    native: list[float] = []
    with Llama(str(smol), **ours_settings(n_ctx=2048, n_seq_max=PARALLEL)) as llm:
        for _ in range(ROUNDS):
            ours.append(ours_parallel_tg(llm))
            native.append(batched_bench_tg(smol))
    _row("(e) SmolLM2, 8 concurrent streams vs batched-bench S_TG", ours, native, 0.90)


CASES = ("a", "b", "c", "d", "e", "f", "f2", "h", "i", "k", "g", "j")


def main() -> None:
    global GPU_LAYERS, ROUNDS
    parser = argparse.ArgumentParser(description="llama_cpp's speed against llama.cpp's own tools")
    parser.add_argument("cases", nargs="*", metavar="case", help=f"cases to run, of {' '.join(CASES)} (default: all)")
    parser.add_argument("--gpu-layers", type=int, default=None,
                        help="layers both sides offload to the GPU (default: each side's own, the same)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})")
    args = parser.parse_args()
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {', '.join(unknown)}; the cases are {' '.join(CASES)}")
    GPU_LAYERS, ROUNDS = args.gpu_layers, args.rounds
    chosen = [c for c in CASES if c in (args.cases or CASES)]
    if set(chosen) & set(TABLE_CASES):
        offload = "" if GPU_LAYERS is None else f", {GPU_LAYERS} layers offloaded on both sides"
        print(f"{ROUNDS} interleaved rounds, {THREADS} threads{offload}; rates are medians, ratios the median of "
              f"per-round ratios")
        print(f"{'case':52} {'ours t/s':>9} {'native':>9} {'ratio':>6} {'bar':>5}")
    tiny = [c for c in chosen if c in TINY_CASES]
    if tiny:
        tiny_cases(tiny)
    alone = {"c": single_sequence_case, "e": parallel_case, "f": server_case,
             "f2": lambda smol: server_case(smol, "completion"), "h": cache_case, "i": speculative_case,
             "k": fair_share_case, "g": lambda smol: embedding_case(), "j": routing_case}
    for case in chosen:
        if case in alone:
            alone[case](smollm2_path(quiet=True))


if __name__ == "__main__":
    main()
