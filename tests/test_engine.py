"""The engine: many sequences in one context, served to many threads at once.

Proven by counting, never by timing: how many ``llama_decode`` calls, which
event came first, how many prompt tokens were evaluated.
"""

from __future__ import annotations

import contextlib
import gc
import random
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llama_cpp import Llama
from llama_cpp_native import ffi, lib

from lowlevel import rss_bytes

PROMPTS = [
    "Once upon a time", "The capital of France is", "def fibonacci(n):", "Dear diary, today",
    "The quick brown fox", "In the beginning", "Q: What is 2+2? A:", "My favourite colour is",
]


def _text(llm: Llama, prompt: str, **kw: Any) -> str:
    return llm.create_completion(prompt, temperature=0.0, **kw)["choices"][0]["text"]


def _concurrently(calls: list[Any], queued_together: Any = None) -> list[Any]:
    """Run each call on its own thread, started together; their results in order (exceptions re-raised).

    ``queued_together``: a scheduler that runs no tick until every call has queued its one request, however
    slowly the threads start (so that all are admitted in one tick)."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(calls))

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with queued_together.exclusive() if queued_together is not None else contextlib.nullcontext():
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while queued_together is not None and len(queued_together.waiting) < len(calls) and not errors and \
                time.monotonic() < deadline:
            time.sleep(0.005)
    for t in threads:
        t.join(timeout=600)
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_eight_threads_each_get_their_solo_text(which: str, tiny_model_path: Path, smollm2_model_path: Path) -> None:
    path = tiny_model_path if which == "tiny" else smollm2_model_path
    with Llama(str(path), n_ctx=2048, n_seq_max=8, n_threads=2, verbose=False) as llm:
        solo = [_text(llm, p, max_tokens=24) for p in PROMPTS]
        llm.reset()
        decodes = llm.scheduler.counters.n_decodes
        together = _concurrently([lambda p=p: _text(llm, p, max_tokens=24) for p in PROMPTS], llm.scheduler)
        assert together == solo
        assert llm.scheduler.counters.n_decodes - decodes < 8 * 24 // 2  # batched, not one decode per token


def test_prompt_list_and_n_choices(tiny_model_path: Path) -> None:
    a, b = "Once upon a time", "The quick brown fox"
    with Llama(str(tiny_model_path), n_ctx=6 * 256, n_seq_max=6, n_threads=2, verbose=False) as llm:
        solo = {p: _text(llm, p, max_tokens=12, ignore_eos=True) for p in (a, b)}
        llm.reset()
        before = llm.scheduler.counters.n_prompt_tokens
        out = llm.create_completion(prompt=[a, b], n=3, temperature=0.0, max_tokens=12, ignore_eos=True)
        n_prompt = len(llm.tokenize(a.encode())) + len(llm.tokenize(b.encode()))
        assert llm.scheduler.counters.n_prompt_tokens - before == n_prompt  # each prompt once, not once per choice
        assert [c["index"] for c in out["choices"]] == list(range(6))
        assert [c["text"] for c in out["choices"]] == [solo[a]] * 3 + [solo[b]] * 3
        assert out["usage"]["prompt_tokens"] == n_prompt
        assert out["usage"]["completion_tokens"] == 6 * 12
        assert all(c["finish_reason"] == "length" for c in out["choices"])
        streamed: dict[int, str] = {}
        finishes: dict[int, str] = {}
        for chunk in llm.create_completion(prompt=[a, b], n=3, temperature=0.0, max_tokens=12, stream=True):
            choice = chunk["choices"][0]
            streamed[choice["index"]] = streamed.get(choice["index"], "") + choice["text"]
            if choice["finish_reason"]:
                finishes[choice["index"]] = choice["finish_reason"]
        assert [streamed[i] for i in range(6)] == [c["text"] for c in out["choices"]]
        assert sorted(finishes) == list(range(6))


def test_sampled_choices_differ_but_repeat_with_the_seed(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=4 * 256, n_seq_max=4, verbose=False) as llm:
        first = llm.create_completion("Once", n=3, temperature=1.5, seed=5, max_tokens=16)
        again = llm.create_completion("Once", n=3, temperature=1.5, seed=5, max_tokens=16)
        texts = [c["text"] for c in first["choices"]]
        assert texts == [c["text"] for c in again["choices"]]
        assert len(set(texts)) > 1  # choice j samples with seed + j


def test_continuous_batching_admits_a_request_while_others_run(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=8 * 256, n_seq_max=8, verbose=False) as llm:
        log: list[tuple[str, int]] = []
        lock = threading.Lock()
        started = threading.Barrier(5)
        joined = threading.Event()  # the late one has its first token: the long ones read on

        def long_stream(i: int) -> None:
            count = 0
            for chunk in llm.create_completion(PROMPTS[i], max_tokens=150, temperature=0.0, ignore_eos=True,
                                               stream=True):
                if chunk["choices"][0]["finish_reason"]:
                    with lock:
                        log.append(("finish", i))
                    break
                count += 1
                if count == 5:
                    started.wait()
                    joined.wait(60)  # (unread, its sequence pauses: however slow the late thread, none ends first)

        def late() -> None:
            started.wait()  # the 4 long ones are all running
            stream = llm.create_completion(PROMPTS[5], max_tokens=4, temperature=0.0, stream=True)
            next(stream)
            with lock:
                log.append(("late", 5))
            joined.set()
            stream.close()

        decodes = llm.scheduler.counters.n_decodes
        generated = llm.scheduler.counters.n_generated_tokens
        _concurrently([lambda i=i: long_stream(i) for i in range(4)] + [late])
        kinds = [kind for kind, _ in log]
        assert kinds.index("late") < kinds.index("finish")  # the 5th joined before any of the 4 ended
        n_decodes = llm.scheduler.counters.n_decodes - decodes
        n_tokens = llm.scheduler.counters.n_generated_tokens - generated
        assert n_tokens >= 4 * 150
        assert n_decodes < n_tokens / 2  # several sequences per decode


def test_cancelling_one_stream_leaves_the_others_alone(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=4 * 256, n_seq_max=4, verbose=False) as llm:
        solo = [_text(llm, p, max_tokens=40, ignore_eos=True) for p in PROMPTS[:4]]

        def run(i: int) -> str:
            stream = llm.create_completion(PROMPTS[i], max_tokens=40, temperature=0.0, ignore_eos=True, stream=True)
            parts = []
            for n, chunk in enumerate(stream):
                parts.append(chunk["choices"][0]["text"])
                if i == 2 and n == 5:
                    stream.close()  # the reader stops: its sequence is freed
                    return "cancelled"
            return "".join(parts)

        results = _concurrently([lambda i=i: run(i) for i in range(4)])
        assert results[2] == "cancelled"
        assert [results[i] for i in (0, 1, 3)] == [solo[i] for i in (0, 1, 3)]
        with llm.scheduler.exclusive():  # the closed stream's request is retired first, if no tick did
            assert all(slot.request is None for slot in llm.scheduler.slots)


def test_abort_ends_with_abort_and_the_instance_goes_on(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=2 * 256, n_seq_max=2, verbose=False) as llm:
        seen: list[dict] = []
        for i, chunk in enumerate(llm.create_completion("Once", max_tokens=200, ignore_eos=True, stream=True)):
            seen.append(chunk)
            if i == 3:
                llm.abort()
        assert seen[-1]["choices"][0]["finish_reason"] == "abort"
        assert llm.create_completion("Once", max_tokens=3)["choices"][0]["finish_reason"] == "length"


def test_two_concurrent_requests_with_different_adapters(tiny_model_path: Path, tiny_lora_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=2 * 256, n_seq_max=2, verbose=False) as llm:
        llm.load_lora("story", str(tiny_lora_path))
        lora = [{"name": "story", "scale": 1.0}]
        solo_base = _text(llm, PROMPTS[0], max_tokens=32, ignore_eos=True)
        solo_lora = _text(llm, PROMPTS[1], max_tokens=32, ignore_eos=True, active_loras=lora)
        llm.reset()
        both = _concurrently([
            lambda: _text(llm, PROMPTS[0], max_tokens=32, ignore_eos=True),
            lambda: _text(llm, PROMPTS[1], max_tokens=32, ignore_eos=True, active_loras=lora),
        ])
        assert both == [solo_base, solo_lora]
        assert solo_lora != _text(llm, PROMPTS[1], max_tokens=32, ignore_eos=True)  # the adapter matters


def test_a_second_call_from_another_thread_waits(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        stream = llm.create_completion("Once upon a time", max_tokens=16, stream=True, temperature=0.0)
        next(stream)  # holds the only sequence
        other: list[str] = []
        thread = threading.Thread(target=lambda: other.append(_text(llm, "Another prompt", max_tokens=4)))
        thread.start()
        rest = list(stream)  # the first finishes; the other then gets the sequence
        thread.join(timeout=60)
        assert rest[-1]["choices"][0]["finish_reason"] in {"length", "stop"}
        assert other == [_text(llm, "Another prompt", max_tokens=4)]


def test_a_call_that_could_only_wait_for_itself_raises(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        stream = llm.create_completion("Once upon a time", max_tokens=16, stream=True)
        next(stream)
        with pytest.raises(RuntimeError, match="wait for itself"):
            llm.create_completion("Another", max_tokens=2)
        stream.close()
        assert llm.create_completion("Another", max_tokens=2)["usage"]["completion_tokens"] == 2


def test_bounded_stress(tiny_model_path: Path) -> None:
    rng = random.Random(1234)
    words = "the a cat dog ran far away home tree river sun moon".split()
    with Llama(str(tiny_model_path), n_ctx=8 * 256, n_seq_max=8, verbose=False) as llm:
        jobs = []
        for i in range(48):
            prompt = " ".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
            jobs.append(dict(prompt=prompt, max_tokens=rng.randint(1, 40), stop=rng.choice([None, ["\n"], ["the"]]),
                             stream=rng.random() < 0.5, cancel_after=rng.choice([None, None, 2, 5]),
                             temperature=rng.choice([0.0, 0.8]), seed=i))
        queue = list(enumerate(jobs))
        lock = threading.Lock()
        errors: list[BaseException] = []

        def worker() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    _i, job = queue.pop()
                try:
                    job = dict(job)
                    cancel_after = job.pop("cancel_after")
                    result = llm.create_completion(job.pop("prompt"), **job)
                    if job["stream"]:
                        for n, _chunk in enumerate(result):
                            if cancel_after is not None and n == cancel_after:
                                result.close()
                                break
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)

        _concurrently([worker for _ in range(8)])  # warm-up round: allocations settle
        queue = list(enumerate(jobs))
        before = rss_bytes()
        _concurrently([worker for _ in range(8)])
        assert errors == []
        scheduler = llm.scheduler
        with scheduler.exclusive():  # a stream closed last is retired first, if no tick did
            assert not scheduler.waiting and all(slot.request is None for slot in scheduler.slots)
            mem = scheduler.ctx.mem
            for slot in scheduler.slots:  # memory holds exactly what each ledger says, nothing leaked
                assert lib.llama_memory_seq_pos_max(mem, slot.seq_id) == len(slot.ledger) - 1
        llm.reset()
        assert all(lib.llama_memory_seq_pos_max(mem, s.seq_id) == -1 for s in scheduler.slots)
        assert rss_bytes() - before < 32 * 1024 * 1024


def test_sequence_snapshot_and_restore(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=2 * 256, n_seq_max=2, verbose=False) as llm:
        tokens = llm.tokenize(b"Once upon a time there was")
        llm.eval(tokens)
        snapshot = llm.snapshot_sequence()
        assert snapshot.tokens == tuple(tokens) and snapshot.nbytes > 0
        expected = _text(llm, "Once upon a time there was a", max_tokens=8)
        llm.reset()
        llm.restore_sequence(snapshot, seq_id=1)
        assert llm.eval_tokens == tokens
        decoded = llm.scheduler.counters.n_prompt_tokens
        assert _text(llm, "Once upon a time there was a", max_tokens=8) == expected
        assert llm.scheduler.counters.n_prompt_tokens - decoded == 1  # only the new token: the snapshot was reused


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(n_seq_max=10_000), r"n_seq_max must be in 1\.\.256, got 10000"),
    (dict(n_seq_max=4, n_outputs_max=2), r"n_outputs_max must be 0 \(n_batch\) or at least n_seq_max \(4\).*got 2"),
])
def test_bad_engine_settings(tiny_model_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Llama(str(tiny_model_path), verbose=False, **kwargs)


def test_bad_completion_requests(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=2 * 256, n_seq_max=2, verbose=False) as llm:
        with pytest.raises(ValueError, match=r"n must be an integer >= 1.*got 0"):
            llm.create_completion("hi", n=0)
        with pytest.raises(ValueError, match=r"prompt\[1\] is 3\.5"):
            llm.create_completion(["hi", 3.5])  # type: ignore[list-item]
        with pytest.raises(ValueError, match=r"the prompt has 300 tokens, more than fit in the context window of "
                                             r"256 tokens"):
            llm.create_completion([1] * 300)


def test_a_stream_nobody_reads_does_not_stall_the_others(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=2 * 256, n_seq_max=2, verbose=False) as llm:
        solo = _text(llm, PROMPTS[1], max_tokens=30, ignore_eos=True)
        idle = llm.create_completion(PROMPTS[0], max_tokens=200, ignore_eos=True, stream=True)
        next(idle)  # started, then left alone: it runs a few tokens ahead and pauses
        other = _concurrently([lambda: _text(llm, PROMPTS[1], max_tokens=30, ignore_eos=True)])
        assert other == [solo]
        held = [slot for slot in llm.scheduler.slots if slot.request is not None]
        assert len(held) == 1 and len(held[0].request.events) <= held[0].request.read_ahead
        del idle  # dropping it frees the sequence
        gc.collect()
        assert _text(llm, PROMPTS[2], max_tokens=2)  # a tick retires it
        assert all(slot.request is None for slot in llm.scheduler.slots)


@pytest.mark.parametrize("options", [dict(kv_unified=True), dict(n_outputs_max=4, logits_all=True)])
def test_unified_cache_and_an_output_limit(tiny_model_path: Path, options: dict,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # kv_unified: every sequence may use the whole n_ctx; n_outputs_max=4 with logits_all: at most four
    # logits rows per decode, so the prompts (every row wants logits) are evaluated a few tokens at a time
    with Llama(str(tiny_model_path), n_ctx=4 * 256, n_seq_max=4, verbose=False, **options) as llm:
        limit = llm.scheduler.ctx.n_ctx_seq
        assert limit == (1024 if options.get("kv_unified") else 256)
        solo = [_text(llm, p, max_tokens=16, ignore_eos=True) for p in PROMPTS[:4]]
        llm.reset()
        batch = llm.scheduler.ctx.batch
        rows_wanted: list[int] = []
        decode = type(llm.scheduler.ctx).decode

        def counting_decode(ctx: Any) -> int:
            rows_wanted.append(int(np.frombuffer(ffi.buffer(batch.native().logits, batch.n), dtype=np.int8).sum()))
            return decode(ctx)

        monkeypatch.setattr(type(llm.scheduler.ctx), "decode", counting_decode)
        together = _concurrently([lambda p=p: _text(llm, p, max_tokens=16, ignore_eos=True) for p in PROMPTS[:4]])
        assert together == solo
        if "n_outputs_max" in options:  # the prompts took turns: no decode asked for more than 4 rows
            assert max(rows_wanted) <= 4 < sum(len(llm.tokenize(p.encode())) for p in PROMPTS[:4])


def test_chat_and_generate_from_several_threads(tiny_model_factory) -> None:
    template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    with Llama(str(tiny_model_factory(chat_template=template)), n_ctx=4 * 256, n_seq_max=4, verbose=False) as llm:
        def chat(i: int) -> str:
            reply = llm.create_chat_completion([{"role": "user", "content": PROMPTS[i]}], max_tokens=12,
                                               temperature=0.0)
            return reply["choices"][0]["message"]["content"]

        def generate(i: int) -> list[int]:
            gen = llm.generate(llm.tokenize(PROMPTS[i].encode()), temperature=0.0, ignore_eos=True)
            tokens = [next(gen) for _ in range(12)]
            gen.close()
            return tokens

        solo = [chat(0), chat(1), generate(2), generate(3)]
        llm.reset()
        together = _concurrently([lambda: chat(0), lambda: chat(1), lambda: generate(2), lambda: generate(3)])
        assert together == solo


def test_tokens_sent_into_a_generator_reach_the_hooks(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        prompt = llm.tokenize(b"Once upon")
        seen: list[list[int]] = []

        def record(input_ids: Any, logits: Any) -> Any:
            seen.append([int(t) for t in input_ids])
            return logits

        gen = llm.generate(prompt, temperature=0.0, logits_processor=record)
        first = next(gen)
        extra = llm.tokenize(b" a time", add_bos=False)
        gen.send(extra)
        gen.close()
        assert seen[-1] == [*prompt, first, *extra]  # what the sequence holds, sent tokens included


def test_one_seed_rule_for_the_choices_of_a_prompt() -> None:
    """Choice j samples with seed + j (32-bit), in the library and the server alike; no seed, a random seed
    and choice 0 stay as they are."""
    from llama_cpp.engine.normalize import choice_seed
    from llama_cpp_server.requests import chat_arguments
    from llama_cpp_server.schemas import ChatRequest

    assert [choice_seed(7, j) for j in range(3)] == [7, 8, 9]
    assert choice_seed(0xFFFFFFFE, 2) == 0
    assert {choice_seed(None, 2), choice_seed(-1, 2), choice_seed(0xFFFFFFFF, 2)} == {None, -1, 0xFFFFFFFF}

    class Vocab:
        def n_vocab(self) -> int:
            return 100

    body = ChatRequest(messages=[{"role": "user", "content": "hi"}], n=3, seed=41)
    assert [c["seed"] for c in chat_arguments(body, Vocab(), "m", "")] == [41, 42, 43]


def test_engine_stats_are_the_counters_taken_together(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=512, n_seq_max=2, verbose=False) as llm:
        before = llm.scheduler.stats()
        assert (before.n_decodes, before.busy_per_decode, before.generated_tokens_per_second) == (0, 0.0, 0.0)
        llm.create_completion(PROMPTS[:2], max_tokens=5, temperature=0.0, ignore_eos=True)
        stats = llm.scheduler.stats()
        n_prompt = sum(len(llm.tokenize(p.encode())) for p in PROMPTS[:2])
    assert stats.n_generated_tokens == 10 and stats.n_prompt_tokens == n_prompt
    assert stats.n_decodes >= 5 and 1.0 <= stats.busy_per_decode <= 2.0
    assert (stats.busy_sequences, stats.waiting, stats.n_preemptions) == (0, 0, 0)
    assert stats.generated_tokens_per_second > 0
