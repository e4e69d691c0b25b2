"""Everything a text chat does also works with media: streaming, assistant_prefill, LoRA and control vectors
(held to llama-mtmd-cli where it has the switch), grammars, response_format, tool calls, the user's stop
strings, and the prompt cache."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from oracle import assert_llama_mtmd_cli_begins_with
from test_multimodal_chat import MARKER, N_PREDICT, content_of, greedy_chat, open_llama, pieces

from llama_cpp import Llama
from llama_cpp.llama_cache import LlamaRAMCache
from llama_cpp.testing import TinyLlamaSpec, write_tiny_lora

Paths = Callable[[str], "tuple[Path, Path]"]
PROMPT = f"Look {MARKER} now"


@pytest.fixture
def llm(tiny_mtmd_model: Paths) -> Any:
    with open_llama(tiny_mtmd_model("mlp")) as llm:
        yield llm


@pytest.fixture
def image(tiny_png: Callable[..., Path]) -> Path:
    return tiny_png(48, 40)


def ask(image: Path, prompt: str = PROMPT) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content_of(prompt, [image])}]


def test_streaming_gives_the_same_text(llm: Llama, image: Path) -> None:
    whole = llm.create_chat_completion(messages=ask(image), max_tokens=12, temperature=0.0, ignore_eos=True)
    chunks = list(llm.create_chat_completion(messages=ask(image), max_tokens=12, temperature=0.0, ignore_eos=True,
                                             stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert streamed == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    # the image counts its 16 embeddings in the usage, like the text tokens
    assert whole["usage"]["prompt_tokens"] == 16 + len(llm.tokenize(b"Look ")) + len(llm.tokenize(b" now", add_bos=False))


def test_assistant_prefill_continues_after_the_image(tiny_mtmd_model: Paths, image: Path) -> None:
    """The tiny model's template renders contents only: the prefilled prompt is PROMPT + the prefill."""
    paths = tiny_mtmd_model("mlp")
    with open_llama(paths) as llm:
        tokens = greedy_chat(llm, [*ask(image), {"role": "assistant", "content": "It is"}], assistant_prefill=True)
        assert_llama_mtmd_cli_begins_with(pieces(llm, tokens), N_PREDICT, *paths, [image], PROMPT + "It is")


def test_lora_applies_to_the_image_and_text(tiny_mtmd_model: Paths, image: Path, tmp_path: Path) -> None:
    paths = tiny_mtmd_model("mlp")
    lora = write_tiny_lora(tmp_path / "lora.gguf", TinyLlamaSpec(n_embd=32, n_layer=2, n_head=4, n_head_kv=2, n_ff=64))
    with open_llama(paths) as llm:
        plain = greedy_chat(llm, ask(image))
        llm.load_lora("style", str(lora))
        tuned = greedy_chat(llm, ask(image), active_loras=[{"name": "style", "scale": 1.0}])
        assert tuned != plain
        assert_llama_mtmd_cli_begins_with(pieces(llm, tuned), N_PREDICT, *paths, [image], PROMPT,
                                          extra=["--lora", str(lora)])
        assert greedy_chat(llm, ask(image)) == plain  # the next request without it: the adapter is off again


def test_a_control_vector_applies_with_media(llm: Llama, image: Path) -> None:
    plain = greedy_chat(llm, ask(image))
    rng = np.random.default_rng(7)
    vector = {"data": (rng.standard_normal(llm.n_embd() * llm.n_layer()) * 4.0).tolist()}
    steered = greedy_chat(llm, ask(image), control_vector=vector)
    assert steered != plain
    assert greedy_chat(llm, ask(image), control_vector=vector) == steered


def test_response_format_constrains_the_reply(llm: Llama, image: Path) -> None:
    schema = {"type": "object", "properties": {"animal": {"type": "string", "enum": ["cat", "dog"]}},
              "required": ["animal"]}
    reply = llm.create_chat_completion(messages=ask(image), temperature=0.0, max_tokens=64,
                                       response_format={"type": "json_object", "schema": schema})
    assert json.loads(reply["choices"][0]["message"]["content"])["animal"] in ("cat", "dog")


def test_a_forced_tool_call_with_an_image(llm: Llama, image: Path) -> None:
    tool = {"type": "function", "function": {"name": "label", "parameters": {
        "type": "object", "properties": {"kind": {"type": "string", "enum": ["photo", "drawing"]}},
        "required": ["kind"]}}}
    reply = llm.create_chat_completion(messages=ask(image), tools=[tool], temperature=0.0, max_tokens=64,
                                       tool_choice={"type": "function", "function": {"name": "label"}})
    call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "label" and json.loads(call["arguments"])["kind"] in ("photo", "drawing")


def test_the_users_stop_strings_are_kept(llm: Llama, image: Path) -> None:
    text = llm.create_chat_completion(messages=ask(image), max_tokens=12, temperature=0.0,
                                      ignore_eos=True)["choices"][0]["message"]["content"]
    stop = text[3:6]
    assert stop and stop not in text[:3]
    reply = llm.create_chat_completion(messages=ask(image), max_tokens=12, temperature=0.0, ignore_eos=True, stop=[stop])
    assert reply["choices"][0]["message"]["content"] == text[:text.index(stop)]
    assert reply["choices"][0]["finish_reason"] == "stop"


def test_a_prompt_cache_restores_the_image(tiny_mtmd_model: Paths, image: Path) -> None:
    """The media entries travel with the snapshot: another sequence restores the image from the cache
    instead of encoding it again, and answers the same."""
    with open_llama(tiny_mtmd_model("mlp"), n_seq_max=2, cache=LlamaRAMCache(capacity_bytes=64 << 20)) as llm:
        context = llm.chat_handler.context_for(llm)
        first = greedy_chat(llm, ask(image))
        busy = llm.create_completion("hold the first sequence", max_tokens=32, stream=True)
        next(busy)  # the first request's sequence is taken: the next one gets the other, fed from the cache
        again = greedy_chat(llm, ask(image))
        busy.close()
        assert again == first
        assert context.n_encoded == 1
