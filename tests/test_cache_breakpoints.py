"""Prompt-cache breakpoints (``cache_control``): where a mark lands in the rendered prompt, the pinned prefix
surviving the cache's LRU eviction, and a later request restoring it.

The placement tests use a character "tokenizer" (one token per character), so the expected prefix is the
rendered text up to the marked place; the engine tests use the tiny model with one sequence, so that a prefix can
only come back from the prompt cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from llama_cpp import Llama
from llama_cpp.cache_breakpoints import PromptPin, locate, marks_of, pinning, pins_for, unmarked
from llama_cpp.engine import RequestScope
from llama_cpp.engine.request import PrefixPin
from llama_cpp.llama_cache import LlamaRAMCache

EPHEMERAL = {"type": "ephemeral"}
TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def render_plain(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> tuple[str, bool]:
    """A template: the tools, then each message's role and text (parts joined by spaces)."""
    def text(content: str | list[dict[str, Any]]) -> str:
        return content if isinstance(content, str) else " ".join(p["text"] for p in content if p["type"] == "text")

    tools_text = "".join(f"[{t['function']['name']}: {t['function'].get('description', '')}]" for t in tools or ())
    return tools_text + "".join(f"<{m['role']}>{text(m['content'])}\n" for m in messages) + "<assistant>", False


def characters(text: str, bos: bool) -> list[int]:
    return [ord(c) for c in text]


def pins(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
         render: Callable[..., tuple[str, bool]] = render_plain) -> list[str]:
    marks = marks_of(messages, tools)
    clean, clean_tools = unmarked(messages, tools)
    return ["".join(map(chr, pin.tokens)) for pin in locate(render, characters, clean, clean_tools, marks)]


def test_each_mark_pins_the_prompt_up_to_its_place() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "does f"}, "cache_control": EPHEMERAL}]
    messages = [{"role": "system", "content": "be brief", "cache_control": EPHEMERAL},
                {"role": "user", "content": [{"type": "text", "text": "one", "cache_control": EPHEMERAL},
                                             {"type": "text", "text": "two"}]},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"},
                                              "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                                             {"type": "text", "text": "three"}]}]
    assert pins(messages, tools) == ["[f: does f", "[f: does f]<system>be brief",
                                     "[f: does f]<system>be brief\n<user>one",
                                     "[f: does f]<system>be brief\n<user>one two\n<user>three"]
    assert [m.seconds for m in marks_of(messages, tools)] == [300.0, 300.0, 300.0, 3600.0]


def test_a_mark_the_template_does_not_copy_through_pins_nothing() -> None:
    def shouting(messages: list[dict[str, Any]], tools: Any) -> tuple[str, bool]:
        return "".join(m["content"].upper() for m in messages), False

    assert pins([{"role": "user", "content": "hello", "cache_control": EPHEMERAL}], render=shouting) == []
    assert pins([{"role": "user", "content": "", "cache_control": EPHEMERAL}]) == []  # nowhere to put it


@pytest.mark.parametrize("mark, message", [
    ({"type": "persistent"}, "messages[0].cache_control must be {'type': 'ephemeral'}"),
    ({"type": "ephemeral", "ttl": "2h"}, "with an optional 'ttl' of '5m' or '1h'"),
    ({"type": "ephemeral", "extra": 1}, "messages[0].cache_control"),
    ("ephemeral", "messages[0].cache_control"),
])
def test_a_malformed_mark_is_refused_naming_it(mark: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        marks_of([{"role": "user", "content": "hi", "cache_control": mark}], None)


def test_at_most_four_marks() -> None:
    messages = [{"role": "user", "content": f"m{i}", "cache_control": EPHEMERAL} for i in range(5)]
    with pytest.raises(ValueError, match="at most 4 cache_control breakpoints may be given, found 5"):
        marks_of(messages, None)


def test_a_request_carries_the_pins_its_prompt_starts_with() -> None:
    with pinning([PromptPin((1, 2, 3), 300.0), PromptPin((1, 9), 60.0), PromptPin((1, 2, 3, 4), 3600.0)]):
        # (1, 2, 3, 4) is the whole prompt: its last token is always evaluated, nothing to pin there
        assert pins_for([1, 2, 3, 4]) == (PrefixPin(3, 300.0),)
    assert pins_for([1, 2, 3, 4]) == ()


class Entry(bytes):
    """A cache value of a known size (a snapshot's ``nbytes``)."""

    @property
    def nbytes(self) -> int:
        return len(self)


def test_the_ram_cache_evicts_pinned_entries_last() -> None:
    cache = LlamaRAMCache(capacity_bytes=30)
    cache.pin([1, 2, 3], Entry(b"p" * 10), seconds=60.0)
    for k in range(4):
        cache[[7, k]] = Entry(b"x" * 10)
    assert cache.lookup([1, 2, 3, 4]) == (3, Entry(b"p" * 10))  # three unpinned stores later, the pin is still there
    assert cache.renew([1, 2], seconds=60.0) and not cache.renew([1, 5], seconds=60.0)
    cache.pin([5], Entry(b"q" * 10), seconds=60.0)
    cache.pin([6], Entry(b"r" * 10), seconds=60.0)
    cache.pin([8], Entry(b"s" * 10), seconds=60.0)  # the capacity holds three: the least recently used pin goes
    assert cache.lookup([1, 2, 3]) is None and cache.cache_size == 30


def test_an_expired_pin_is_an_ordinary_entry() -> None:
    cache = LlamaRAMCache(capacity_bytes=20)
    cache.pin([1], Entry(b"p" * 10), seconds=0.0)
    cache[[2]] = Entry(b"x" * 10)
    cache[[3]] = Entry(b"y" * 10)
    assert cache.lookup([1]) is None


def test_renew_pins_an_entry_already_stored() -> None:
    cache = LlamaRAMCache(capacity_bytes=20)
    cache[[1, 2, 3]] = Entry(b"p" * 10)
    assert cache.renew([1, 2], seconds=60.0)
    cache[[2]] = Entry(b"x" * 10)
    cache[[3]] = Entry(b"y" * 10)
    assert cache.lookup([1, 2, 3]) == (3, Entry(b"p" * 10))


@pytest.fixture(scope="module")
def chat_model(tiny_model_factory: Callable[..., Path]) -> Path:
    return tiny_model_factory(chat_template=TEMPLATE)


SYSTEM = "You are a careful assistant. " * 12


def ask(llm: Llama, system: str, question: str, marked: bool = True) -> Any:
    message: dict[str, Any] = {"role": "system", "content": system}
    if marked:
        message["cache_control"] = EPHEMERAL
    with RequestScope().active() as scope:
        llm.create_chat_completion([message, {"role": "user", "content": question}], max_tokens=4, temperature=0)
    return scope.requests[0]


def test_a_pinned_prefix_outlives_the_unpinned_entries_and_is_restored(chat_model: Path) -> None:
    cache = LlamaRAMCache(capacity_bytes=1 << 30)
    with Llama(str(chat_model), n_ctx=1024, n_seq_max=1, n_batch=64, cache=cache, verbose=False) as llm:
        first = ask(llm, SYSTEM, "What is one?")
        system_prefix = len(llm.tokenize(f"<|system|>{SYSTEM}".encode(), add_bos=llm.add_bos_token(), special=True))
        (pin,) = first.pins
        assert system_prefix - 1 <= pin.n_tokens <= system_prefix
        assert first.n_prompt_pinned == pin.n_tokens and first.n_prompt_reused == 0
        # the cache holds two entries of about the same size now: the pin and the finished request's snapshot;
        # shrink it to hold three, and fill it with unrelated conversations
        pinned_size = cache.cache_size
        cache.capacity_bytes = pinned_size * 3 // 2
        for k in range(3):
            ask(llm, f"Another system prompt, number {k}. " * 10, "Hi?", marked=False)
        assert any(len(tokens) == pin.n_tokens for tokens, _ in cache.prefixes())
        second = ask(llm, SYSTEM, "And what is two?")
        assert second.n_prompt_reused >= pin.n_tokens  # restored from the pin: only the rest is evaluated
        assert second.n_prompt_evaluated == len(second.prompt) - second.n_prompt_reused
        assert second.n_prompt_pinned == 0  # the pin was there: renewed, not stored again


def test_without_marks_the_same_traffic_loses_the_prefix(chat_model: Path) -> None:
    cache = LlamaRAMCache(capacity_bytes=1 << 30)
    with Llama(str(chat_model), n_ctx=1024, n_seq_max=1, n_batch=64, cache=cache, verbose=False) as llm:
        ask(llm, SYSTEM, "What is one?", marked=False)
        cache.capacity_bytes = cache.cache_size * 3 // 2
        for k in range(3):
            ask(llm, f"Another system prompt, number {k}. " * 10, "Hi?", marked=False)
        second = ask(llm, SYSTEM, "And what is two?", marked=False)
        assert second.n_prompt_reused < 8  # the template's opening tokens at most


def test_a_pinned_request_generates_what_an_unpinned_one_does(chat_model: Path) -> None:
    with Llama(str(chat_model), n_ctx=1024, n_seq_max=1, n_batch=64, cache=LlamaRAMCache(), verbose=False) as llm:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Count."}]
        plain = llm.create_chat_completion(messages, max_tokens=12, temperature=0)
        llm.reset()
        marked = [{**messages[0], "cache_control": EPHEMERAL}, messages[1]]
        pinned = llm.create_chat_completion(marked, max_tokens=12, temperature=0)
    assert pinned["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert pinned["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]
