"""Who frees the mtmd context, and when: exactly once, before the model it refers to, never while another
Llama still uses the handler; and many load/chat/close cycles do not leak."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llama_cpp_multimodal import Gemma3ChatHandler, GenericMTMDChatHandler

from llama_cpp import Llama

Paths = Callable[[str], "tuple[Path, Path]"]


def messages(image: Path) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": str(image)}},
                                         {"type": "text", "text": "Describe it."}]}]


def chat(llm: Llama, image: Path) -> str:
    reply = llm.create_chat_completion(messages=messages(image), max_tokens=4, temperature=0.0, ignore_eos=True)
    return reply["choices"][0]["message"]["content"]


def counting_free(context: Any) -> list[Any]:
    """Count the frees of ``context``'s mtmd pointer (its handle's free function, wrapped)."""
    calls: list[Any] = []
    free = context.handle._free
    context.handle._free = lambda ptr: (calls.append(ptr), free(ptr))
    return calls


def test_close_frees_the_mtmd_context_once(tiny_mtmd_model: Paths, tiny_png: Callable[..., Path]) -> None:
    text, mmproj = tiny_mtmd_model("gemma3")
    handler = Gemma3ChatHandler(mmproj_path=str(mmproj), verbose=False, warmup=False)
    llm = Llama(str(text), chat_handler=handler, n_ctx=512, verbose=False)
    chat(llm, tiny_png(64, 64))
    frees = counting_free(handler.context_for(llm))
    handler.close()
    handler.close()
    llm.close()
    assert len(frees) == 1
    with pytest.raises(RuntimeError, match="closed"):
        handler.context_for(llm)


def test_a_llama_made_with_mmproj_path_closes_its_handler(tiny_mtmd_model: Paths,
                                                          tiny_png: Callable[..., Path]) -> None:
    text, mmproj = tiny_mtmd_model("mlp")
    llm = Llama(str(text), mmproj_path=str(mmproj), n_ctx=512, verbose=False,
                chat_handler_kwargs={"warmup": False, "verbose": False})
    handler = llm.chat_handler
    assert isinstance(handler, GenericMTMDChatHandler)
    chat(llm, tiny_png(48, 40))
    frees = counting_free(handler.context_for(llm))
    llm.close()
    llm.close()
    assert len(frees) == 1
    with pytest.raises(RuntimeError):
        llm.create_chat_completion(messages=messages(tiny_png(48, 40)))


def test_a_shared_handler_outlives_the_first_llama(tiny_mtmd_model: Paths, tiny_png: Callable[..., Path]) -> None:
    """Each Llama's model gets its own mtmd context; closing one Llama frees only that one (before its
    model), and the handler goes on serving the other."""
    text, mmproj = tiny_mtmd_model("gemma3")
    handler = Gemma3ChatHandler(mmproj_path=str(mmproj), verbose=False, warmup=False)
    first = Llama(str(text), chat_handler=handler, n_ctx=512, verbose=False)
    second = Llama(str(text), chat_handler=handler, n_ctx=512, verbose=False)
    image = tiny_png(64, 64)
    expected = chat(first, image)
    assert chat(second, image) == expected
    first_context, second_context = handler.context_for(first), handler.context_for(second)
    assert first_context is not second_context
    frees = counting_free(first_context)
    first.close()
    assert len(frees) == 1 and not second_context.closed
    assert chat(second, image) == expected
    second.close()
    assert second_context.closed
    handler.close()


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="resident memory is read from /proc")
def test_load_chat_close_cycles_do_not_leak(tiny_mtmd_model: Paths, tiny_png: Callable[..., Path]) -> None:
    text, mmproj = tiny_mtmd_model("gemma3")
    image = tiny_png(64, 64)

    def cycle() -> None:
        llm = Llama(str(text), mmproj_path=str(mmproj), n_ctx=256, verbose=False,
                    chat_handler_kwargs={"warmup": False, "verbose": False})
        chat(llm, image)
        llm.close()

    for _ in range(10):  # allocator pools and caches settle first
        cycle()
    gc.collect()
    before = _rss_mb()
    for _ in range(100):
        cycle()
    gc.collect()
    assert _rss_mb() - before < 20.0
