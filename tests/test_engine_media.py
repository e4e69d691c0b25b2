"""The engine's media entries: a chunk is kept whole or not at all, whatever compares prefixes; and the
errors of Llama(mmproj_path=...) say what is wrong before anything loads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llama_cpp import Llama
from llama_cpp.engine.media import (MediaChunk, MediaPrompt, chunk_boundary, is_continuation, media_entries,
                                    media_key, next_chunk, text_only)
from llama_cpp.engine.prefix import common_prefix


class FakeChunk(MediaChunk):
    def __init__(self, key: int, n_pos: int) -> None:
        self.key, self.n_pos, self.n_tokens = key, n_pos, n_pos * 2

    def evaluate(self, ctx: Any, n_past: int, seq_id: int) -> None:  # pragma: no cover - never evaluated here
        raise AssertionError


def test_entries_mark_the_start_of_each_chunk() -> None:
    key = media_key("sha", "projector")
    entries = media_entries(key, 4)
    assert entries[0] < 0 and not is_continuation(entries[0])
    assert all(is_continuation(e) for e in entries[1:]) and len(set(entries[1:])) == 1
    assert media_key("sha", "projector") == key != media_key("other", "projector")
    with pytest.raises(ValueError, match="at least one position"):
        media_entries(key, 0)
    with pytest.raises(ValueError, match="outside"):
        media_entries(1 << 30, 1)


def test_a_prefix_never_ends_inside_a_chunk() -> None:
    a, b = media_entries(5, 3), media_entries(6, 3)
    held = [1, 2, *a, 7, 8]
    assert common_prefix(held, [1, 2, *a, 7, 9]) == 6
    assert common_prefix(held, [1, 2, *b, 7, 8]) == 2  # another image: the chunk's start differs
    # the same image counted over more positions (another projector option): back to the chunk's start
    assert common_prefix(held, [1, 2, *media_entries(5, 4), 7]) == 2
    assert common_prefix(held, held[:4]) == 2  # a shorter sequence that ends inside the chunk
    two_same = [1, *a, *a, 9]
    assert common_prefix(two_same, [1, *a, *a[:2]]) == 4  # a cut inside the second copy keeps the first
    assert chunk_boundary(held, 4) == 2 and chunk_boundary(held, 5) == 5 and chunk_boundary(held, 6) == 6
    assert text_only(held) == [1, 2, 7, 8]


def test_a_media_prompt_checks_its_entries() -> None:
    chunk = FakeChunk(9, 3)
    prompt = MediaPrompt([1, *media_entries(9, 3), 4], {1: chunk}, "x")
    assert prompt.n_tokens == 2 + 6 and next_chunk(prompt.media, 0, 5) == 1 and next_chunk(prompt.media, 2, 5) == 5
    with pytest.raises(ValueError, match="end with text"):
        MediaPrompt([1, *media_entries(9, 3)], {1: chunk})
    with pytest.raises(ValueError, match="does not match"):
        MediaPrompt([1, *media_entries(8, 3), 4], {1: chunk})
    with pytest.raises(ValueError, match="1 media chunks in its tokens but 0"):
        MediaPrompt([1, *media_entries(9, 3), 4], {})


def test_mmproj_errors_say_what_is_wrong(tiny_mtmd_model: Callable[[str], "tuple[Path, Path]"],
                                         tmp_path: Path) -> None:
    text, mmproj = map(str, tiny_mtmd_model("gemma3"))
    with pytest.raises(FileNotFoundError, match="mmproj file not found"):
        Llama(text, mmproj_path=str(tmp_path / "missing.gguf"), verbose=False)
    with pytest.raises(ValueError, match="not a multimodal projector"):
        Llama(text, mmproj_path=text, verbose=False)
    with pytest.raises(ValueError, match="not a multimodal handler; valid names: .*qwen2.5-vl"):
        Llama(text, mmproj_path=mmproj, chat_format="chatml", verbose=False)
    def handler(**kw: object) -> None: ...

    with pytest.warns(UserWarning, match="replaces the chat_handler passed"):  # as the seed: it replaces it
        with Llama(text, mmproj_path=mmproj, chat_handler=handler, verbose=False) as llm:
            assert llm.chat_handler is not handler and llm.chat_handler is not None
    with pytest.raises(TypeError, match="unexpected keyword"):
        Llama(text, mmproj_path=mmproj, chat_handler_kwargs={"no_such_option": 1}, verbose=False)
    with pytest.raises(ValueError, match="image_max_tokens"):
        Llama(text, mmproj_path=mmproj, chat_handler_kwargs={"image_min_tokens": 64, "image_max_tokens": 32},
              verbose=False)
    (tmp_path / "notgguf.bin").write_bytes(b"hello")
    with pytest.raises(ValueError, match="not a GGUF file"):
        Llama(text, mmproj_path=str(tmp_path / "notgguf.bin"), verbose=False)


def test_chat_format_and_template_choices_reach_the_handler(tiny_mtmd_model: Callable[[str], "tuple[Path, Path]"]) -> None:
    from llama_cpp.llama_multimodal import Gemma3ChatHandler, GenericMTMDChatHandler

    text, mmproj = map(str, tiny_mtmd_model("gemma3"))
    with Llama(text, mmproj_path=mmproj, chat_format="gemma3", verbose=False) as llm:
        assert type(llm.chat_handler) is Gemma3ChatHandler
    explicit = "{% for m in messages %}[{{ m.content }}]{% endfor %}"
    with Llama(text, mmproj_path=mmproj, verbose=False, chat_handler_kwargs={"chat_format": explicit}) as llm:
        assert isinstance(llm.chat_handler, GenericMTMDChatHandler)
        assert llm.chat_handler.template_for(llm) == explicit
    with pytest.raises(ValueError, match="chat_template_name"):
        Llama(text, mmproj_path=mmproj, chat_format="gemma3", chat_template_name="tool_use", verbose=False)
