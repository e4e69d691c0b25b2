"""Multimodal chat through the engine, held to llama.cpp: with each tiny projector type, the greedy tokens
after an image (or audio) equal llama-mtmd-cli's for the same model, media and prompt; an image sent again
is not encoded again; concurrent requests with media each get their own sequence."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from oracle import assert_llama_mtmd_cli_begins_with

from llama_cpp import Llama

MARKER = "<__media__>"
N_PREDICT = 10

# name -> (media, prompt); each media file replaces one marker of the prompt, in order
CASES: dict[str, tuple[Callable[[Any, Any], list[Path]], str]] = {
    "gemma3": (lambda png, wav: [png(64, 64)], f"Look {MARKER} now"),
    "mlp": (lambda png, wav: [png(48, 40)], f"Look {MARKER} now"),
    "idefics3": (lambda png, wav: [png(64, 64)], f"Look {MARKER} now"),
    "qwen2vl_merger": (lambda png, wav: [png(64, 32)], f"Look {MARKER} now"),
    "qwen2vl_merger-two": (lambda png, wav: [png(64, 64, seed=1), png(48, 80, seed=2)], f"A {MARKER} B {MARKER} C"),
    "qwen2a": (lambda png, wav: [wav(1.0)], f"Hear {MARKER} now"),
    "ultravox-stack4": (lambda png, wav: [wav(1.0)], f"Hear {MARKER} now"),
}


def content_of(prompt: str, media: list[Path]) -> list[dict[str, Any]]:
    """The prompt as OpenAI content parts: its text around one media part per marker."""
    texts = prompt.split(MARKER)
    parts: list[dict[str, Any]] = []
    for i, text in enumerate(texts):
        if text:
            parts.append({"type": "text", "text": text})
        if i < len(media):
            path = media[i]
            if path.suffix == ".wav":
                parts.append({"type": "audio_url", "audio_url": {"url": str(path)}})
            else:
                parts.append({"type": "image_url", "image_url": {"url": str(path)}})
    return parts


def greedy_chat(llm: Llama, messages: list[dict[str, Any]], n: int = N_PREDICT, **kwargs: Any) -> list[int]:
    """The tokens a greedy chat completion samples (read by a stopping criterion that never stops)."""
    seen: list[int] = []

    def record(input_ids: Any, logits: Any) -> bool:
        seen.append(int(input_ids[-1]))
        return False

    llm.create_chat_completion(messages=messages, max_tokens=n, temperature=0.0, ignore_eos=True,
                               stopping_criteria=record, **kwargs)
    return seen


def pieces(llm: Llama, tokens: list[int]) -> bytes:
    return b"".join(llm.detokenize([t], special=True) for t in tokens)


def open_llama(paths: tuple[Path, Path], **kwargs: Any) -> Llama:
    text, mmproj = paths
    return Llama(str(text), mmproj_path=str(mmproj), n_ctx=4096, n_threads=2, n_threads_batch=2, verbose=False,
                 chat_handler_kwargs={"warmup": False, "verbose": False}, **kwargs)


@pytest.fixture(scope="module")
def media(tiny_png: Callable[..., Path], tiny_wav: Callable[..., Path]) -> Callable[[str], list[Path]]:
    return lambda name: CASES[name][0](tiny_png, tiny_wav)


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_tokens_after_media_equal_llama_mtmd_cli(tiny_mtmd_model: Callable[[str], tuple[Path, Path]],
                                                        media: Callable[[str], list[Path]], name: str) -> None:
    paths = tiny_mtmd_model(name.removesuffix("-two"))
    files, prompt = media(name), CASES[name][1]
    with open_llama(paths) as llm:
        tokens = greedy_chat(llm, [{"role": "user", "content": content_of(prompt, files)}])
        ours = pieces(llm, tokens)
        assert llm.scheduler.counters.n_media_evaluated >= len(files)
    assert len(tokens) == N_PREDICT
    assert_llama_mtmd_cli_begins_with(ours, N_PREDICT, *paths, files, prompt)


def test_the_same_image_in_the_next_turn_is_not_encoded_again(tiny_mtmd_model: Callable[[str], tuple[Path, Path]],
                                                              tiny_png: Callable[..., Path]) -> None:
    image = {"type": "image_url", "image_url": {"url": str(tiny_png(64, 64))}}
    first = [{"role": "user", "content": [image, {"type": "text", "text": "What is it?"}]}]
    with open_llama(tiny_mtmd_model("gemma3")) as llm:
        context = llm.chat_handler.context_for(llm)
        reply = pieces(llm, greedy_chat(llm, first)).decode("utf-8", "replace")
        assert context.n_encoded == 1
        second = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
        warm = greedy_chat(llm, second)
        assert context.n_encoded == 1  # the image's chunk was reused with the prefix, not encoded again
    with open_llama(tiny_mtmd_model("gemma3")) as cold_llm:
        assert greedy_chat(cold_llm, second) == warm
        assert cold_llm.chat_handler.context_for(cold_llm).n_encoded == 1


def test_another_image_in_the_same_place_is_encoded(tiny_mtmd_model: Callable[[str], tuple[Path, Path]],
                                                    tiny_png: Callable[..., Path]) -> None:
    def ask(seed: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": str(tiny_png(64, 64, seed))}},
                                             {"type": "text", "text": "What is it?"}]}]

    with open_llama(tiny_mtmd_model("gemma3")) as llm:
        context = llm.chat_handler.context_for(llm)
        a = greedy_chat(llm, ask(1))
        b = greedy_chat(llm, ask(2))
        assert context.n_encoded == 2
        assert greedy_chat(llm, ask(1)) == a and context.n_encoded == 3
    assert a != b


def test_requests_with_images_run_concurrently_each_in_its_sequence(
        tiny_mtmd_model: Callable[[str], tuple[Path, Path]], tiny_png: Callable[..., Path]) -> None:
    asks = [[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": str(tiny_png(64, 64, seed))}},
                                          {"type": "text", "text": f"Picture {seed}?"}]}] for seed in (3, 4, 5)]
    with open_llama(tiny_mtmd_model("mlp"), n_seq_max=3) as llm:
        alone = [greedy_chat(llm, ask) for ask in asks]
        llm.reset()
        together: list[list[int] | None] = [None] * 3
        # no request may finish before all three generate: on a loaded machine one could otherwise end
        # before the next arrives, which would then take its sequence over.  Each stream is held after its
        # first text (its request is generating in its sequence) until the three are; a held stream's request
        # cannot finish meanwhile, since at most read_ahead (8) of its N_PREDICT (10) tokens wait unread.
        in_flight = threading.Barrier(3, timeout=120)

        def run(i: int) -> None:
            seen: list[int] = []
            stream = llm.create_chat_completion(
                messages=asks[i], max_tokens=N_PREDICT, temperature=0.0, ignore_eos=True, stream=True,
                stopping_criteria=lambda ids, _logits: seen.append(int(ids[-1])) is not None)
            for chunk in stream:
                if chunk["choices"][0]["delta"].get("content") or chunk["choices"][0]["finish_reason"]:
                    break  # generating now
            in_flight.wait()
            for _chunk in stream:
                pass
            together[i] = seen

        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert together == alone
        starts = [{t for t in s.ledger.tokens if t < 0 and t & 1} for s in llm.scheduler.slots]
        assert all(len(s) == 1 for s in starts) and len(set().union(*starts)) == 3  # an image per sequence
