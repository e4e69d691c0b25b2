"""The overlap: each next decode started before a tick's tokens are handed out (``overlap_decode``).

On a GPU the decode then computes while the readers take their tokens.  On the CPU a decode computes
before ``llama_decode`` returns, so the overlap changes only the order of things, which is what these
tests hold it to: the same tokens as without it, every ledger mirroring memory once the decode in flight
is applied, rows decoded for a reader that stopped meanwhile leaving memory, and readers that must see
each token before the next one is decoded (``generate``) never run ahead.  The first part drives the
planner and the update with the fake runner of ``test_engine_parts`` (no model); the second runs the tiny
model with the overlap forced on.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import pytest

from llama_cpp import Llama
from llama_cpp.engine import RowKind

from test_engine_parts import assert_mirrors, engine, request, run, solo

# -- the engine's parts, no model --------------------------------------------------------------------


def test_each_tick_leaves_the_next_decode_started_and_the_tokens_are_the_same():
    scheduler, ctx, runner = engine(overlap=True)
    req = request([5, 6, 7], max_tokens=4)
    scheduler.submit(req)
    first = scheduler.next_event(req)
    assert first is not None and first.token == solo([5, 6, 7], 1)[0]
    # the prompt's decode is applied and its token delivered, and the decode of that token is started
    assert len(runner.plans) == 2 and runner.plans[1].ahead
    assert runner.plans[1].rows[0].fed == [first.token] and runner.plans[1].rows[0].kind is RowKind.STEP
    assert scheduler.slots[0].ledger.tokens == [5, 6, 7]  # the started decode is not the ledger's yet
    assert [first.token, *run(scheduler, req)] == solo([5, 6, 7], 4)
    # the last token ends the request (max_tokens): nothing is started after it, nothing is in flight
    assert ctx.memory[0] == [5, 6, 7, *solo([5, 6, 7], 3)]
    assert_mirrors(scheduler, ctx)
    assert scheduler.stats().n_decodes == 4


def test_a_reader_that_stops_leaves_no_token_decoded_ahead_in_memory():
    scheduler, ctx, runner = engine(overlap=True)
    req = request([5, 6, 7], max_tokens=10)
    scheduler.submit(req)
    tokens = [scheduler.next_event(req).token for _ in range(3)]  # type: ignore[union-attr]
    scheduler.cancel(req)  # a stop string found in the text, say
    # the decode of the third token is in flight: memory holds it, the ledger does not
    assert ctx.memory[0] == [5, 6, 7, *tokens]
    with scheduler.exclusive():  # applying it takes it out of memory again
        assert_mirrors(scheduler, ctx)
        assert ctx.memory[0] == [5, 6, 7, *tokens[:2]]
    # as without the overlap: the prompt and every token before the last one read
    plain, plain_ctx, _ = engine(overlap=False)
    again = request([5, 6, 7], max_tokens=10)
    plain.submit(again)
    assert [plain.next_event(again).token for _ in range(3)] == tokens  # type: ignore[union-attr]
    plain.cancel(again)
    with plain.exclusive():
        assert plain_ctx.memory[0] == ctx.memory[0]


def test_the_next_request_finds_the_memory_its_ledger_describes():
    scheduler, ctx, _ = engine(n_seq_max=1, overlap=True)
    first = request([1, 2, 3, 4], max_tokens=10)
    scheduler.submit(first)
    for _ in range(2):
        scheduler.next_event(first)
    scheduler.cancel(first)
    second = request([1, 2, 3, 4, 9], max_tokens=3)
    scheduler.submit(second)
    assert run(scheduler, second) == solo([1, 2, 3, 4, 9], 3)
    assert second.n_prompt_evaluated == 1  # the first request's prompt was reused
    assert_mirrors(scheduler, ctx)


def test_readers_that_must_see_each_token_first_are_never_started_ahead():
    scheduler, ctx, runner = engine(overlap=True)
    req = request([5, 6, 7], max_tokens=4, read_ahead=0)
    scheduler.submit(req)
    assert run(scheduler, req) == solo([5, 6, 7], 4)
    assert not any(plan.ahead for plan in runner.plans)
    assert_mirrors(scheduler, ctx)


def test_many_readers_share_every_decode_and_each_gets_its_own_tokens():
    scheduler, ctx, runner = engine(n_seq_max=3, n_batch=32, overlap=True)
    prompts = [[1, 2, 3], [11, 12], [21, 22, 23, 24]]
    reqs = [request(p, max_tokens=6) for p in prompts]
    for r in reqs:
        scheduler.submit(r)
    results: dict[int, list[int]] = {}

    def read(i: int) -> None:
        results[i] = run(scheduler, reqs[i])

    threads = [threading.Thread(target=read, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {i: solo(p, 6) for i, p in enumerate(prompts)}
    assert any(plan.ahead and len(plan.rows) > 1 for plan in runner.plans)  # decodes started ahead, batched
    with scheduler.exclusive():
        assert_mirrors(scheduler, ctx)
    assert scheduler.stats().n_generated_tokens == 18


def test_exclusive_use_and_settle_apply_the_decode_in_flight():
    scheduler, ctx, _ = engine(overlap=True)
    req = request([5, 6, 7], max_tokens=6)
    scheduler.submit(req)
    token = scheduler.next_event(req).token  # type: ignore[union-attr]
    assert scheduler.slots[0].ledger.tokens == [5, 6, 7]
    scheduler.settle()  # what Llama.ctx and the logits accessors call
    assert scheduler.slots[0].ledger.tokens == [5, 6, 7, token]
    assert_mirrors(scheduler, ctx)
    assert len(req.events) == 1  # the token it produced waits for the reader
    assert [token, *run(scheduler, req)] == solo([5, 6, 7], 6)


# -- on a model ----------------------------------------------------------------------------------------


def _streamed(llm: Llama, prompt: str, **kwargs: object) -> str:
    return "".join(chunk["choices"][0]["text"] for chunk in llm.create_completion(prompt, stream=True, **kwargs))


def test_greedy_text_logprobs_and_memory_equal_the_run_without_overlap(tiny_model_path: Path) -> None:
    results = []
    for overlap in (False, True):
        with Llama(str(tiny_model_path), n_ctx=512, overlap_decode=overlap, verbose=False) as llm:
            assert llm.scheduler.overlap is overlap
            whole = llm.create_completion("Once upon a time", max_tokens=40, temperature=0, logprobs=3)
            streamed = _streamed(llm, "Once upon a time", max_tokens=40, temperature=0)
            seeded = _streamed(llm, "The sea", max_tokens=30, temperature=0.8, seed=7)
            choice = whole["choices"][0]
            # a stop string ends a stream part way: the sequence then holds what it holds without the overlap
            stop = choice["text"][12:16]
            stopped = _streamed(llm, "Once upon a time", max_tokens=40, temperature=0, stop=[stop])
            state = llm.save_state()  # applies the decode in flight, as every state call does
            held = (llm.n_tokens, state.n_tokens, list(state.input_ids), len(state.llama_state))
            results.append((choice["text"], choice["logprobs"], streamed, seeded, stopped, held))
    assert results[0] == results[1]
    assert results[0][4] != results[0][0]  # the stop string did end it early


def test_concurrent_streams_equal_their_solo_runs(tiny_model_path: Path) -> None:
    prompts = ["The capital of France is", "def add(a, b):", "Water boils at", "My favourite colour is"]
    with Llama(str(tiny_model_path), n_ctx=1024, verbose=False) as llm:
        solo_texts = [_streamed(llm, p, max_tokens=24, temperature=0) for p in prompts]
    with Llama(str(tiny_model_path), n_ctx=1024, n_seq_max=4, overlap_decode=True, verbose=False) as llm:
        assert llm.scheduler.overlap
        texts: dict[int, str] = {}
        # every stream holds its first token before any reads on: all four are running from then on, with
        # most of their tokens still to decode (the engine decodes at most 8 ahead of a reader)
        together = threading.Barrier(len(prompts))

        def read(i: int) -> None:
            chunks = llm.create_completion(prompts[i], max_tokens=24, temperature=0, stream=True)
            first = next(chunks)["choices"][0]["text"]
            together.wait(60)
            texts[i] = first + "".join(chunk["choices"][0]["text"] for chunk in chunks)

        threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        stats = llm.scheduler.stats()
    assert [texts.get(i) for i in range(4)] == solo_texts
    assert stats.n_sequences_decoded >= 2 * stats.n_decodes  # decodes served several streams at once


def test_generate_and_eval_still_see_each_token_first(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=512, verbose=False) as plain, \
            Llama(str(tiny_model_path), n_ctx=512, overlap_decode=True, verbose=False) as overlapped:
        outputs = []
        for llm in (plain, overlapped):
            tokens = llm.tokenize(b"Hello there")
            gen = llm.generate(tokens, temperature=0.0)
            got = [next(gen) for _ in range(5)]
            gen.close()
            llm.eval(tokens[:2])
            outputs.append((got, llm.n_tokens))
        assert outputs[0] == outputs[1]


def test_overlap_decode_is_checked(tiny_model_path: Path, tiny_spec_model: Callable[[str], Path]) -> None:
    with pytest.raises(TypeError, match="overlap_decode must be True, False or None"):
        Llama(str(tiny_model_path), overlap_decode="yes", verbose=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="recurrent state cannot"):
        Llama(str(tiny_spec_model("qwen35")), overlap_decode=True, verbose=False)
    with Llama(str(tiny_model_path), verbose=False) as llm:  # no GPU here: chosen off
        assert llm.scheduler.overlap is False
