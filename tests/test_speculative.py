"""Speculative decoding end to end: every engine type, lossless, per sequence, against llama.cpp's tools.

The rule checked on every run (``_check_drafts``): each accepted draft token
is the token the target itself produced at that position, and the first
rejected one is not.  Exact equality with plain greedy decoding is checked on
the tiny F32 models and on repetitive prompts on SmolLM2, where it holds.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaSpecEngine, SpecConfig

from oracle import tool

CODE = ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
        "def div(a, b):\n    if b == 0:\n        raise ZeroDivisionError('b must not be zero')\n    return a / b\n\n")
CODE_PROMPT = "Here is some Python code:\n\n" + CODE + "Write the same code again, exactly:\n\n" + CODE + \
    "Once more, exactly:\n\n"
POEM = ("The rain in Spain stays mainly in the plain.\nThe cat sat on the mat and looked at the hat.\n"
        "A stitch in time saves nine, and a penny saved is a penny earned.\n")
POEM_PROMPT = "Repeat the text three times.\n\nText:\n" + POEM + "\nFirst time:\n" + POEM + "\nSecond time:\n"

NGRAM_TYPES = ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"]


class Spy(LlamaSpecEngine):
    """Forwards the contract to ``inner`` and records each draft and what was accepted of it, per sequence."""

    def __init__(self, inner: LlamaSpecEngine) -> None:
        self.inner = inner
        self.records: dict[int, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()

    def attach(self, target):  # noqa: ANN001, ANN201
        self.inner.attach(target)

    def max_draft_tokens(self) -> int:
        return self.inner.max_draft_tokens()

    def needs_target_mtp(self) -> bool:
        return self.inner.needs_target_mtp()

    def begin(self, prompt_tokens, seq_id=0):  # noqa: ANN001, ANN201
        self.inner.begin(prompt_tokens, seq_id)

    def process(self, batch, seq_id=0):  # noqa: ANN001, ANN201
        self.inner.process(batch, seq_id)

    def draft(self, input_ids, /, *, n_past, id_last, n_max, seq_id=0):  # noqa: ANN001, ANN201
        out = self.inner.draft(input_ids, n_past=n_past, id_last=id_last, n_max=n_max, seq_id=seq_id)
        assert len(out) <= n_max
        with self.lock:
            self.records.setdefault(seq_id, []).append(
                {"n_past": n_past, "id_last": id_last, "draft": [int(t) for t in out], "accepted": None})
        return out

    def accept(self, n_accepted, seq_id=0):  # noqa: ANN001, ANN201
        with self.lock:
            self.records[seq_id][-1]["accepted"] = n_accepted
        self.inner.accept(n_accepted, seq_id)

    def rollback(self, n_tokens, seq_id=0):  # noqa: ANN001, ANN201
        self.inner.rollback(n_tokens, seq_id)

    def close(self) -> None:
        self.inner.close()

    def steps(self, seq_id: int = 0) -> list[tuple[int, int]]:
        """(accepted, drafted) per verification, as llama-speculative-simple logs them."""
        return [(r["accepted"], len(r["draft"])) for r in self.records.get(seq_id, []) if r["accepted"] is not None]


def _check_drafts(spy: Spy, sequence: list[int], seq_id: int = 0) -> tuple[int, int]:
    """Every accepted draft token is the target's token at its position, the first rejected one is not;
    returns (drafted, accepted)."""
    drafted = accepted = 0
    for r in spy.records.get(seq_id, []):
        if r["accepted"] is None:
            continue
        start, draft, n = r["n_past"], r["draft"], r["accepted"]
        assert sequence[start] == r["id_last"]
        assert draft[:n] == sequence[start + 1:start + 1 + n], r
        if n < len(draft) and start + 1 + n < len(sequence):
            assert draft[n] != sequence[start + 1 + n], r
        drafted += len(draft)
        accepted += n
    return drafted, accepted


def _run(target: Path, config: dict[str, Any], prompt: str, n: int, **kw: Any) -> tuple[str, Spy, Llama]:
    from llama_cpp.llama_speculative import create_spec_engine

    spy = Spy(create_spec_engine(config))
    llm = Llama(str(target), n_ctx=kw.pop("n_ctx", 512), n_threads=2, verbose=False, speculative=spy, **kw)
    out = llm.create_completion(prompt, max_tokens=n, temperature=0.0)
    return out["choices"][0]["text"], spy, llm


def _greedy_together(llm: Llama, prompts: list[str], n: int) -> list[str]:
    """Greedy completions of ``prompts``, one thread each, all queued before the first tick runs (however
    slowly the threads start), so that they share the decodes."""
    results: list[Any] = [None] * len(prompts)

    def run(i: int) -> None:
        results[i] = llm.create_completion(prompts[i], max_tokens=n, temperature=0.0)["choices"][0]["text"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    with llm.scheduler.exclusive():
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while len(llm.scheduler.waiting) < len(prompts) and time.monotonic() < deadline:
            time.sleep(0.005)
    for thread in threads:
        thread.join()
    return results


def _generated_ids(model: Path, prompt: str, n: int, n_ctx: int = 512) -> list[int]:
    """Plain greedy decoding's whole sequence, on a fresh Llama (the prompt evaluated in one piece)."""
    llm = Llama(str(model), n_ctx=n_ctx, n_threads=2, verbose=False)
    tokens = llm.tokenize(prompt.encode())
    gen = llm.generate(tokens, temp=0.0)
    ids = [next(gen) for _ in range(n)]
    gen.close()
    llm.close()
    return tokens + ids


def _copied_run(sequence: list[int], n_prompt: int) -> int:
    """How many of the generated tokens, from the first on, repeat a run of the prompt's tokens."""
    prompt, generated = sequence[:n_prompt], sequence[n_prompt:]

    def in_prompt(run: list[int]) -> bool:
        return any(prompt[i:i + len(run)] == run for i in range(len(prompt) - len(run) + 1))

    n = 0
    while n < len(generated) and in_prompt(generated[:n + 1]):
        n += 1
    return n


TINY_CASES = {
    "draft-simple": ("target", {"draft_model_path": "target"}),
    "draft-eagle3": ("target", {"draft_model_path": "eagle3"}),
    "draft-dflash": ("target", {"draft_model_path": "dflash"}),
    "draft-dflash2": ("target", {"draft_model_path": "dflash2", "spec_type": "draft-dflash"}),
    "draft-dspark": ("target", {"draft_model_path": "dspark"}),
    "draft-mtp": ("glm4moe", {}),
    "draft-mtp-external": ("glm4moe-trunk", {"draft_model_path": "glm4moe-nextn", "spec_type": "draft-mtp"}),
    "draft-mtp-hybrid": ("qwen35", {"spec_type": "draft-mtp"}),
    # short n-grams: the tiny model's text is noise, only the prompt repeats itself
    **{name: ("target", {"ngram_size_n": 2, "ngram_size_m": 8}) for name in NGRAM_TYPES[:3]},
    "ngram-mod": ("target", {"ngram_mod_n_match": 4, "ngram_mod_n_min": 1, "ngram_mod_n_max": 8}),
}


@pytest.mark.parametrize("case", sorted(TINY_CASES))
def test_every_type_is_lossless_on_its_tiny_model(case: str, tiny_spec_model: Any) -> None:
    target_name, options = TINY_CASES[case]
    target = tiny_spec_model(target_name)
    config = {"spec_type": case, **options}
    if "draft_model_path" in config:
        config["draft_model_path"] = str(tiny_spec_model(config["draft_model_path"]))
    prompt = "Hello world, hello world, hello world, hello"
    expected = _generated_ids(target, prompt, 24)
    plain = Llama(str(target), n_ctx=512, n_threads=2, verbose=False)
    plain_text = plain.create_completion(prompt, max_tokens=24, temperature=0.0)["choices"][0]["text"]
    plain.close()
    text, spy, llm = _run(target, config, prompt, 24)
    assert text == plain_text
    drafted, accepted = _check_drafts(spy, expected)
    stats = llm.last_speculative_stats
    assert len(stats) == 46
    assert stats["drafted"] == drafted and stats["accepted"] == accepted <= drafted
    if case.startswith("draft-"):  # a model always drafts (the n-gram types draft on SmolLM2 below)
        assert drafted > 0
    assert stats["generation_tokens"] == 24
    assert stats["verification_steps"] == sum(1 for r in spy.records[0] if r["draft"] and r["accepted"] is not None)
    if case == "draft-simple":  # a draft identical to the target is always right
        assert accepted == drafted
    llm.close()
    llm.close()  # freed exactly once


@pytest.mark.parametrize("spec_type", [*NGRAM_TYPES, "draft-simple"])
def test_smollm2_repetitive_prompts_equal_plain_greedy(spec_type: str, smollm2_model_path: Path) -> None:
    check_repetitive_prompts_equal_plain_greedy(spec_type, smollm2_model_path)


def check_repetitive_prompts_equal_plain_greedy(spec_type: str, smollm2_model_path: Path) -> None:
    plain = Llama(str(smollm2_model_path), n_ctx=1024, n_threads=2, verbose=False)
    config: dict[str, Any] = {"spec_type": spec_type}
    if spec_type == "draft-simple":  # SmolLM2 drafting for itself: trivially accepted, the whole loop runs
        config["draft_model_path"] = str(smollm2_model_path)
    for prompt in (CODE_PROMPT, POEM_PROMPT):
        expected_text = plain.create_completion(prompt, max_tokens=80, temperature=0.0)["choices"][0]["text"]
        expected = _generated_ids(smollm2_model_path, prompt, 80, 1024)
        text, spy, llm = _run(smollm2_model_path, config, prompt, 80, n_ctx=1024)
        assert text == expected_text
        drafted, accepted = _check_drafts(spy, expected)
        # these prompts repeat themselves: the greedy text copies the prompt for `copied` tokens (the code,
        # the poem), then goes its own way (after the poem: "The answer is: 2"; what a quantized model writes
        # there may differ between CPUs).  An n-gram drafter first matches an n-gram of the copy (ngram-mod,
        # the slowest: 24 tokens, and 48 to chain; its first draft comes 23 to 27 tokens into these copies)
        # and is then right to the copy's end: the drafts accepted within the copy bound the count from
        # below, whatever follows it (a fixed count did not: ngram-mod accepts 14 of the poem's 42)
        copied = _copied_run(expected, len(expected) - 80)
        assert copied > 32, copied
        assert accepted >= copied - 32, (drafted, accepted, copied)
        llm.close()
    plain.close()


def test_concurrent_requests_draft_and_verify_per_sequence(smollm2_model_path: Path) -> None:
    prompts = [CODE_PROMPT, POEM_PROMPT, POEM_PROMPT + POEM[:40], CODE_PROMPT + CODE[:30]]
    plain = Llama(str(smollm2_model_path), n_ctx=2048, n_threads=2, verbose=False)
    expected = [plain.create_completion(p, max_tokens=48, temperature=0.0)["choices"][0]["text"] for p in prompts]
    plain.close()
    from llama_cpp.llama_speculative import create_spec_engine

    spy = Spy(create_spec_engine({"spec_type": "ngram-mod"}))
    llm = Llama(str(smollm2_model_path), n_ctx=2048, n_seq_max=4, n_threads=2, verbose=False, speculative=spy)
    decodes = llm.scheduler.counters.n_decodes
    results = _greedy_together(llm, prompts, 48)
    # near-ties of batched numerics on a quantized model may move a token: compare where they agree
    agree = sum(r == e for r, e in zip(results, expected))
    assert agree >= 3, list(zip(results, expected))
    assert len(spy.records) >= 2  # several sequences drafted
    assert sum(a for s in spy.records for a, _d in spy.steps(s)) > 40
    # drafts of several sequences verified together: far fewer decodes than generated tokens
    assert llm.scheduler.counters.n_decodes - decodes < 4 * 48 / 2
    llm.close()


def test_drafts_are_clipped_to_the_batch(smollm2_model_path: Path) -> None:
    """The default ngram_size_m=48 with n_batch=16: every draft is cut so [last, draft...] fits the batch."""
    text, spy, llm = _run(smollm2_model_path, {"spec_type": "ngram-map-k"}, CODE_PROMPT, 64, n_ctx=1024, n_batch=16)
    plain = Llama(str(smollm2_model_path), n_ctx=1024, n_batch=16, n_threads=2, verbose=False)
    assert text == plain.create_completion(CODE_PROMPT, max_tokens=64, temperature=0.0)["choices"][0]["text"]
    lengths = [len(r["draft"]) for r in spy.records[0]]
    assert max(lengths) == 15, lengths
    assert llm.last_speculative_stats["accepted"] > 15
    llm.close()
    plain.close()


def test_prefix_reuse_keeps_working_with_speculation(smollm2_model_path: Path) -> None:
    llm = Llama(str(smollm2_model_path), n_ctx=1024, n_threads=2, verbose=False,
                speculative=SpecConfig(spec_type="ngram-map-k"))
    first = llm.create_completion(CODE_PROMPT, max_tokens=16, temperature=0.0)
    evaluated = llm.scheduler.counters.n_prompt_tokens
    second = llm.create_completion(CODE_PROMPT + first["choices"][0]["text"] + "\n", max_tokens=16, temperature=0.0)
    assert llm.scheduler.counters.n_prompt_tokens - evaluated < 8  # only the new suffix was evaluated
    assert second["usage"]["completion_tokens"] == 16
    assert llm.last_speculative_stats["accepted"] > 0
    llm.close()


@pytest.mark.parametrize("spec_type", [*NGRAM_TYPES, "ngram-cache"])
def test_speculative_steps_match_llama_speculative_simple(spec_type: str, smollm2_model_path: Path) -> None:
    check_steps_match_llama_speculative_simple(spec_type, smollm2_model_path)


def check_steps_match_llama_speculative_simple(spec_type: str, smollm2_model_path: Path) -> None:
    """The same drafter, prompt and settings: every verification of ours is one of llama.cpp's tool.

    The tool evaluates the prompt but its last token, then drafts after that token; we evaluate the
    whole prompt (as plain decoding does) and draft after the first sampled token.  With a prompt
    whose first draft is empty ("accepted 0/0" in the tool's log), the two loops are in step from
    the second verification of the tool on."""
    n_predict = 128
    proc = subprocess.run(
        [str(tool("llama-speculative-simple")), "-m", str(smollm2_model_path), "-p", CODE_PROMPT, "-n",
         str(n_predict), "--temp", "0", "-t", "2", "-c", "2048", "--spec-type", spec_type, "-lv", "5"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = [(int(a), int(d)) for a, d in re.findall(r"accepted (\d+)/(\d+) draft tokens", proc.stdout + proc.stderr)]
    assert theirs and theirs[0] == (0, 0)
    _text, spy, llm = _run(smollm2_model_path, {"spec_type": spec_type}, CODE_PROMPT, n_predict + 1, n_ctx=2048)
    ours = spy.steps()
    common = min(len(ours), len(theirs) - 1) - 1  # the last one may be cut by each loop's own length limit
    assert common > 5
    assert ours[:common] == theirs[1:common + 1]
    assert sum(a for a, _ in ours[:common]) > 30
    llm.close()


class Exploding(LlamaSpecEngine):
    """A vendor engine that fails when asked to draft for the second time."""

    def __init__(self) -> None:
        self.calls = 0

    def draft(self, input_ids, /, *, n_past, id_last, n_max, seq_id=0):  # noqa: ANN001, ANN201
        self.calls += 1
        if self.calls == 2:
            raise KeyError("backend unreachable")
        return np.asarray([id_last], dtype=np.intc)


def test_an_engine_that_raises_ends_its_request_and_leaves_the_llama_usable(tiny_spec_model: Any) -> None:
    llm = Llama(str(tiny_spec_model("target")), n_ctx=256, n_threads=2, verbose=False, speculative=Exploding())
    with pytest.raises(RuntimeError, match="speculative engine 'Exploding' failed to draft:.*backend unreachable"):
        llm.create_completion("Hello", max_tokens=16, temperature=0.0)
    out = llm.create_completion("Hello", max_tokens=8, temperature=0.0)
    assert out["usage"]["completion_tokens"] == 8
    llm.close()


def test_configuration_paths(tiny_spec_model: Any) -> None:
    target = str(tiny_spec_model("target"))
    with pytest.raises(ValueError, match="either speculative= or draft_model="):
        Llama(target, speculative=SpecConfig(spec_type="ngram-mod"), draft_model=lambda ids: ids[:0], verbose=False)
    with pytest.raises(ValueError, match="unknown speculative option"):
        Llama(target, speculative={"spec_type": "ngram-mod", "n_grams": 3}, verbose=False)
    with pytest.raises(ValueError, match="speculative= takes"):
        Llama(target, speculative=42, verbose=False)
    with pytest.raises(ValueError, match="draft_model_path is required"):
        Llama(target, speculative={"engine": "draft-eagle3"}, verbose=False)
    llm = Llama(target, speculative={"engine": "ngram-map-k4v", "ngram_size_n": 2}, verbose=False)
    assert llm.speculative_engine.config.ngram_size_n == 2
    llm.close()
    assert Llama(target, speculative=SpecConfig(), verbose=False).speculative_engine is None  # NONE: off


def test_deprecated_draft_model_and_prompt_lookup(smollm2_model_path: Path) -> None:
    from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

    class LegacyLookup(LlamaDraftModel):  # the seed's stateless draft model
        def __call__(self, input_ids, /, **kwargs):  # noqa: ANN001, ANN204
            return LlamaPromptLookupDecoding(max_ngram_size=3, num_pred_tokens=6)(input_ids)

    model = str(smollm2_model_path)
    plain = Llama(model, n_ctx=1024, n_threads=2, verbose=False)
    expected = plain.create_completion(CODE_PROMPT, max_tokens=32, temperature=0.0)["choices"][0]["text"]
    plain.close()
    with pytest.warns(DeprecationWarning, match="draft_model= is deprecated"):
        llm = Llama(model, n_ctx=1024, n_threads=2, verbose=False, draft_model=LegacyLookup())
    assert llm.create_completion(CODE_PROMPT, max_tokens=32, temperature=0.0)["choices"][0]["text"] == expected
    assert llm.last_speculative_stats["accepted"] > 10
    llm.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        llm = Llama(model, n_ctx=1024, n_threads=2, verbose=False,
                    speculative={"engine": "prompt-lookup", "max_ngram_size": 3})
    assert llm.create_completion(CODE_PROMPT, max_tokens=32, temperature=0.0)["choices"][0]["text"] == expected
    assert llm.last_speculative_stats["accepted"] > 10
    llm.close()


def test_stats_without_speculation_are_zero(tiny_spec_model: Any) -> None:
    llm = Llama(str(tiny_spec_model("target")), n_ctx=256, verbose=False)
    llm.create_completion("Hi", max_tokens=4)
    stats = llm.last_speculative_stats
    assert len(stats) == 46 and stats["drafted"] == 0 and stats["acceptance_rate_per_position"] == []
    llm.close()


def test_stats_add_up(smollm2_model_path: Path) -> None:
    llm = Llama(str(smollm2_model_path), n_ctx=1024, n_threads=2, verbose=False,
                speculative=SpecConfig(spec_type="ngram-mod"))
    out = llm.create_completion(CODE_PROMPT, max_tokens=64, temperature=0.0)
    s = llm.last_speculative_stats
    assert s["generation_tokens"] == out["usage"]["completion_tokens"] == 64
    assert 0 < s["accepted"] <= s["drafted"] == s["verified"]
    assert s["accepted_draft_tokens"] == s["accepted"]
    assert s["accepted_drafts"] <= s["generated_drafts"] == s["verification_steps"]
    assert s["acceptance_rate"] == pytest.approx(s["accepted"] / s["drafted"])
    assert s["mean_accepted_length"] == pytest.approx(1 + s["accepted"] / s["accept_calls"])
    assert all(0.0 <= r <= 1.0 for r in s["acceptance_rate_per_position"])
    assert s["draft_calls"] >= s["generated_drafts"] and s["begin_calls"] == 1
    # every generated token is either accepted from a draft or sampled once per decode of the sequence
    assert s["accepted"] + s["draft_calls"] + 1 >= s["generation_tokens"]
    assert s["generation_seconds"] >= s["sustained_seconds"] > 0
    assert s["decode_tokens"] == s["sustained_tokens"] == 63
    assert s["generation_tokens_per_second"] > 0
    llm.create_completion(CODE_PROMPT, max_tokens=16, temperature=0.0)
    second = llm.last_speculative_stats
    totals = llm.speculative_totals  # llama-server's counters: the sums over requests
    assert totals["spec_decode_num_draft_tokens_total"] == s["drafted"] + second["drafted"]
    assert totals["spec_decode_num_accepted_tokens_total"] == s["accepted"] + second["accepted"]
    assert totals["spec_decode_num_drafts_total"] == s["verification_steps"] + second["verification_steps"]
    assert sum(totals["spec_decode_num_accepted_tokens_per_pos_total"]) == totals[
        "spec_decode_num_accepted_tokens_total"]
    llm.close()


def test_lookup_cache_files(tmp_path: Path, smollm2_model_path: Path) -> None:
    """ngram-cache reads llama-lookup-create's files; a malformed file is refused before llama.cpp sees it."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CODE * 4)
    static = tmp_path / "static.bin"
    proc = subprocess.run([str(tool("llama-lookup-create")), "-m", str(smollm2_model_path), "-f", str(corpus),
                           "-lcs", str(static), "-c", "1024", "-t", "2"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and static.exists(), proc.stderr[-2000:]
    text, spy, llm = _run(smollm2_model_path, {"spec_type": "ngram-cache", "lookup_cache_static": str(static)},
                          CODE_PROMPT, 48, n_ctx=1024)
    plain = Llama(str(smollm2_model_path), n_ctx=1024, n_threads=2, verbose=False)
    assert text == plain.create_completion(CODE_PROMPT, max_tokens=48, temperature=0.0)["choices"][0]["text"]
    assert llm.last_speculative_stats["accepted"] > 0
    llm.close()
    plain.close()
    bad = tmp_path / "bad.bin"
    bad.write_bytes(static.read_bytes()[:-6])
    with pytest.raises(ValueError, match="lookup cache .* (truncated|whole number)"):
        Llama(str(smollm2_model_path), verbose=False,
              speculative={"spec_type": "ngram-cache", "lookup_cache_static": str(bad)})
    foreign = tmp_path / "foreign.bin"
    foreign.write_bytes(np.asarray([1, 2, 3, 4, 1, 10**7, 1], dtype="<i4").tobytes())
    with pytest.raises(ValueError, match="outside this model's vocabulary|from another vocabulary"):
        Llama(str(smollm2_model_path), verbose=False,
              speculative={"spec_type": "ngram-cache", "lookup_cache_static": str(foreign)})


def test_sampled_output_is_the_targets_and_reproducible(tiny_spec_model: Any) -> None:
    """Verification samples each row once, in order, with the sequence's own seeded chain (llama.cpp's
    common_sampler_sample_and_accept_n): the same draws as plain sampling, so the same text."""
    target = str(tiny_spec_model("target"))
    kw: dict[str, Any] = {"max_tokens": 40, "temperature": 0.8, "top_k": 20, "seed": 1234}
    with Llama(target, n_ctx=256, verbose=False) as plain:
        expected = plain.create_completion("Hello world", **kw)["choices"][0]["text"]
    with Llama(target, n_ctx=256, verbose=False,
               speculative={"engine": "draft-simple", "draft_model_path": target, "draft_n_max": 4}) as llm:
        assert llm.create_completion("Hello world", **kw)["choices"][0]["text"] == expected
        first = llm.last_speculative_stats
        assert llm.create_completion("Hello world", **kw)["choices"][0]["text"] == expected
        assert 0 < first["accepted"] < first["drafted"]  # sampling rejects some of the draft's top choices


class Oracle(LlamaSpecEngine):
    """Proposes the target's own continuation (known in advance) for ``right`` tokens, then a wrong one:
    every verification accepts part of the draft and rolls the rest back."""

    def __init__(self, sequence: list[int], right: int, n: int = 6) -> None:
        self.sequence, self.right, self.n = sequence, right, n

    def max_draft_tokens(self) -> int:
        return self.n

    def draft(self, input_ids, /, *, n_past, id_last, n_max, seq_id=0):  # noqa: ANN001, ANN201
        truth = self.sequence[n_past + 1:n_past + 1 + min(n_max, self.n)]
        wrong = [(t + 1) % 1000 for t in truth[self.right:]]
        return np.asarray(truth[:self.right] + wrong, dtype=np.intc)


@pytest.mark.parametrize(("target", "n_draft"), [("target", 6), ("qwen35", 6), ("qwen35", 16)])
def test_partial_acceptance_rolls_back(target: str, n_draft: int, tiny_spec_model: Any) -> None:
    """Part of each draft accepted, the rest removed from memory.  On the hybrid qwen35 the recurrent
    state rolls back through the n_rs_seq states the Llama asked for (8 at most for an engine without a
    model), and a longer draft from a checkpoint of the state, restored after the rejection."""
    model = tiny_spec_model(target)
    prompt = "Hello world, this is a test"
    expected = _generated_ids(model, prompt, 40)
    with Llama(str(model), n_ctx=256, n_threads=2, verbose=False) as plain:
        expected_text = plain.create_completion(prompt, max_tokens=40, temperature=0.0)["choices"][0]["text"]
    right = 2 if n_draft == 6 else 10
    spy = Spy(Oracle(expected, right=right, n=n_draft))
    with Llama(str(model), n_ctx=256, n_threads=2, verbose=False, speculative=spy) as llm:
        assert llm.create_completion(prompt, max_tokens=40, temperature=0.0)["choices"][0]["text"] == expected_text
        drafted, accepted = _check_drafts(spy, expected)
        stats = llm.last_speculative_stats
        steps = stats["verification_steps"]  # the last draft may be cut short by max_tokens
        assert right * (steps - 1) <= accepted <= right * steps and drafted > accepted
        assert stats["rollbacks"] >= steps - 1
        if target == "qwen35":
            assert llm.is_hybrid and llm.context_params.n_rs_seq == min(n_draft, 8)
        if n_draft > 8 and target == "qwen35":
            assert stats["checkpoint_captures"] >= steps - 1 and stats["checkpoint_rollbacks"] >= steps - 1
            assert stats["native_rollbacks"] + stats["checkpoint_rollbacks"] == stats["rollbacks"]
            assert stats["checkpoint_buffer_bytes"] > 0
        else:
            assert stats["checkpoint_captures"] == 0 and stats["native_rollbacks"] == stats["rollbacks"]


def test_concurrent_sequences_equal_plain_on_an_f32_model(tiny_spec_model: Any) -> None:
    target = str(tiny_spec_model("target"))
    prompts = ["Hello world", "The quick brown fox", "Once upon a time there", "def main():"]
    with Llama(target, n_ctx=1024, n_threads=2, verbose=False) as plain:
        expected = [plain.create_completion(p, max_tokens=32, temperature=0.0)["choices"][0]["text"] for p in prompts]
    with Llama(target, n_ctx=1024, n_seq_max=4, n_threads=2, verbose=False,
               speculative={"engine": "draft-simple", "draft_model_path": target, "draft_n_max": 4}) as llm:
        assert _greedy_together(llm, prompts, 32) == expected
        assert llm.speculative_totals["spec_decode_num_accepted_tokens_total"] > 4 * 20


def test_structured_output_with_speculation(smollm2_model_path: Path) -> None:
    """A grammar-constrained chain verifies drafts too: a draft token the grammar forbids is rejected."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    messages = [{"role": "user", "content": "Give me a JSON object with a name and an age."}]
    kw: dict[str, Any] = {"max_tokens": 48, "temperature": 0.0,
                          "response_format": {"type": "json_object", "schema": schema}}
    with Llama(str(smollm2_model_path), n_ctx=1024, n_threads=2, verbose=False) as plain:
        expected = plain.create_chat_completion(messages, **kw)["choices"][0]["message"]["content"]
    with Llama(str(smollm2_model_path), n_ctx=1024, n_threads=2, verbose=False,
               speculative={"engine": "prompt-lookup", "max_ngram_size": 1, "num_pred_tokens": 4}) as llm:
        out = llm.create_chat_completion(messages, **kw)["choices"][0]["message"]["content"]
        assert out == expected
        assert llm.last_speculative_stats["drafted"] > 0


MODEL_TYPES_FOR_THE_TOOL = {
    "draft-eagle3": ("target", "eagle3"),
    "draft-dflash": ("target", "dflash"),
    "draft-dspark": ("target", "dspark"),
    "draft-mtp": ("glm4moe", None),
}


@pytest.mark.parametrize("spec_type", sorted(MODEL_TYPES_FOR_THE_TOOL))
def test_model_drafters_step_like_llama_speculative_simple(spec_type: str, tiny_spec_model: Any) -> None:
    """On the tiny models (random drafts, none accepted) our verifications are the tool's, one step later."""
    target, draft = MODEL_TYPES_FOR_THE_TOOL[spec_type]
    cmd = [str(tool("llama-speculative-simple")), "-m", str(tiny_spec_model(target)), "-p", "Hello world", "-n", "24",
           "--temp", "0", "-t", "2", "-c", "256", "--spec-type", spec_type, "-lv", "5"]
    config: dict[str, Any] = {"spec_type": spec_type}
    if draft is not None:
        cmd += ["-md", str(tiny_spec_model(draft))]
        config["draft_model_path"] = str(tiny_spec_model(draft))
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = [(int(a), int(d)) for a, d in re.findall(r"accepted (\d+)/(\d+) draft tokens", proc.stdout + proc.stderr)]
    _text, spy, llm = _run(tiny_spec_model(target), config, "Hello world", 25, n_ctx=256)
    ours = spy.steps()
    common = min(len(ours), len(theirs) - 1) - 4  # the last ones are cut by each loop's own length limit
    assert common > 10
    assert ours[:common] == theirs[1:common + 1]
    llm.close()


class Batching(LlamaSpecEngine):
    """Drafts every sequence in one call ("the last token again", always wrong), recording the call sizes."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def draft(self, input_ids, /, *, n_past, id_last, n_max, seq_id=0):  # noqa: ANN001, ANN201
        raise AssertionError("draft_many is overridden: draft is not called")

    def draft_many(self, requests):  # noqa: ANN001, ANN201
        self.sizes.append(len(requests))
        return [np.asarray([r.id_last] * min(r.n_max, 3), dtype=np.intc) for r in requests]


def test_drafts_of_concurrent_sequences_are_asked_together(tiny_spec_model: Any) -> None:
    target = str(tiny_spec_model("target"))
    prompts = ["Hello world", "The quick brown fox", "Once upon a time there", "def main():"]
    with Llama(target, n_ctx=1024, n_threads=2, verbose=False) as plain:
        expected = [plain.create_completion(p, max_tokens=24, temperature=0.0)["choices"][0]["text"] for p in prompts]
    engine = Batching()
    with Llama(target, n_ctx=1024, n_seq_max=4, n_threads=2, verbose=False, speculative=engine) as llm:
        assert _greedy_together(llm, prompts, 24) == expected
        assert max(engine.sizes) >= 2  # several sequences' drafts in one call


def test_a_llama_with_an_engine_instance_pickles(tiny_spec_model: Any) -> None:
    import pickle

    from llama_cpp.llama_speculative import LlamaNGramMapDecoding

    target = str(tiny_spec_model("target"))
    engine = LlamaNGramMapDecoding(ngram_size=2, num_pred_tokens=6, sync_check_tokens=4)
    with Llama(target, n_ctx=256, verbose=False, speculative=engine) as llm:
        expected = llm.create_completion("Hello world", max_tokens=8, temperature=0.0)["choices"][0]["text"]
        with pickle.loads(pickle.dumps(llm)) as clone:
            copy = clone.speculative_engine
            assert copy is not engine and isinstance(copy, LlamaNGramMapDecoding)
            assert copy.config.ngram_size_m == 6 and copy.sync_check_tokens == 4
            assert clone.create_completion("Hello world", max_tokens=8, temperature=0.0)["choices"][0]["text"] == \
                expected
