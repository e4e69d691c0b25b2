"""Greedy completion equals llama.cpp's llama-completion, token for token.

Same model, prompt, context size and threads; llama-completion decodes the
prompt in one call and then one token per call, as Llama does.  Each of our
tokens' pieces is checked in order against llama-completion's text, so a
different token anywhere fails even if the texts happened to agree later.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle import llama_completion

from llama_cpp import Llama

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "Here is a list of the planets of the solar system:",
    "Q: What is the boiling point of water? A:",
    "Les mots les plus utilisés en français sont",
]
N_PREDICT = 48


def _check_against_oracle(model_path: Path, n_predict: int) -> None:
    llm = Llama(str(model_path), n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False)
    try:
        for prompt in PROMPTS:
            expected = llama_completion(model_path, prompt, n_predict)
            prompt_tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
            produced = b""
            for i, token in enumerate(llm.generate(prompt_tokens, temperature=0.0)):
                if i >= n_predict:
                    break
                piece = llm.detokenize([token])
                assert expected.startswith(produced + piece), (
                    f"token {i} ({token}, {piece!r}) differs from llama-completion for {prompt!r}:\n"
                    f"ours:   {produced + piece!r}\nnative: {expected!r}"
                )
                produced += piece
            assert produced == expected, f"{prompt!r}: ours {produced!r} != native {expected!r}"
    finally:
        llm.close()


def test_tiny_model_greedy_equals_llama_completion(tiny_model_path: Path) -> None:
    _check_against_oracle(tiny_model_path, N_PREDICT)


def test_smollm2_greedy_equals_llama_completion(smollm2_model_path: Path) -> None:
    _check_against_oracle(smollm2_model_path, N_PREDICT)


@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_create_completion_text_equals_llama_completion(smollm2_model_path: Path, prompt: str) -> None:
    expected = llama_completion(smollm2_model_path, prompt, 24).decode("utf-8")
    with Llama(str(smollm2_model_path), n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False) as llm:
        out = llm.create_completion(prompt, max_tokens=24, temperature=0.0)
        assert out["choices"][0]["text"] == expected
        streamed = "".join(c["choices"][0]["text"] for c in llm.create_completion(
            prompt, max_tokens=24, temperature=0.0, stream=True))
        assert streamed == expected


@pytest.mark.parametrize(("ours", "native"), [
    (dict(repeat_penalty=1.3, frequency_penalty=0.1, presence_penalty=0.2, penalty_last_n=64),
     ["--repeat-penalty", "1.3", "--frequency-penalty", "0.1", "--presence-penalty", "0.2", "--repeat-last-n", "64"]),
    (dict(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2, dry_penalty_last_n=128),
     ["--dry-multiplier", "0.8", "--dry-base", "1.75", "--dry-allowed-length", "2", "--dry-penalty-last-n", "128"]),
], ids=["penalties", "dry"])
def test_history_penalties_equal_llama_completion(smollm2_model_path: Path, ours: dict, native: list[str]) -> None:
    """Penalties and DRY see the prompt, as in llama.cpp (it accepts the prompt into its sampler)."""
    with Llama(str(smollm2_model_path), n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False) as llm:
        for prompt in PROMPTS[:3]:
            expected = llama_completion(smollm2_model_path, prompt, 32, extra=native)
            gen = llm.generate(llm.tokenize(prompt.encode(), special=True), temperature=0.0, **ours)
            produced = b""
            for i, token in enumerate(gen):
                produced += llm.detokenize([token])
                if i == 31:
                    break
            gen.close()
            assert produced == expected, prompt


SAMPLED = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
SAMPLED_FLAGS = ["--temp", "0.8", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05"]


@pytest.mark.parametrize("model", ["tiny", "smollm2"])
def test_seeded_sampling_equals_llama_completion(model: str, tiny_model_path: Path, smollm2_model_path: Path) -> None:
    """A seeded top-k/top-p/min-p/temperature chain draws the same tokens as llama-completion's.  The chain
    begins with top-k, so the engine hands it only the tokens near the best logit
    (llama_cpp_native_sample_top): the same survivors, the same draw."""
    path = tiny_model_path if model == "tiny" else smollm2_model_path
    with Llama(str(path), n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False) as llm:
        for seed in (1, 5):
            for prompt in PROMPTS[:3]:
                expected = llama_completion(path, prompt, 48, extra=[*SAMPLED_FLAGS, "-s", str(seed)])
                gen = llm.generate(llm.tokenize(prompt.encode(), special=True), seed=seed, **SAMPLED)
                produced = b""
                for i, token in enumerate(gen):
                    produced += llm.detokenize([token])
                    if i == 47:
                        break
                gen.close()
                assert produced == expected, f"seed {seed}, {prompt!r}: ours {produced!r} != native {expected!r}"


@pytest.mark.parametrize("keywords", [dict(temperature=0.0), dict(SAMPLED, seed=5)], ids=["greedy", "sampled"])
def test_bursts_equal_llama_completion(tiny_model_path: Path, keywords: dict) -> None:
    """A lone streamed completion on the tiny model takes its tokens in bursts (several decodes per tick,
    each token chosen natively, engine.slot.Burst): the text is llama-completion's all the same."""
    flags = ["--temp", "0"] if keywords["temperature"] == 0.0 else [*SAMPLED_FLAGS, "-s", "5"]
    with Llama(str(tiny_model_path), n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False) as llm:
        for prompt in PROMPTS[:3]:
            expected = llama_completion(tiny_model_path, prompt, 48, extra=flags).decode("utf-8", errors="replace")
            before = llm.scheduler.stats().n_burst_decodes
            chunks = llm.create_completion(prompt, max_tokens=48, stream=True, **keywords)
            assert "".join(c["choices"][0]["text"] for c in chunks) == expected, prompt
            assert llm.scheduler.stats().n_burst_decodes > before
