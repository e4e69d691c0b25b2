"""A media marker typed by a user stays text."""

from __future__ import annotations

import pytest

from llama_cpp_multimodal import DEFAULT_MARKER, escape_marker, new_marker
from llama_cpp_multimodal.markers import WORD_JOINER


@pytest.mark.parametrize("text", ["see <__media__> here", "<__media__><__media__>", "<__media__", "no marker",
                                  "<<__media__>__media__>>"])
def test_escaped_text_has_no_marker_and_reads_the_same(text: str) -> None:
    escaped = escape_marker(text)
    assert DEFAULT_MARKER not in escaped
    assert escaped.replace(WORD_JOINER, "") == text
    assert escaped.count(WORD_JOINER) == text.count(DEFAULT_MARKER)


def test_overlapping_occurrences_are_all_broken() -> None:
    assert escape_marker("aaa", "aa") == f"a{WORD_JOINER}a{WORD_JOINER}a"


def test_other_tags_stay_as_typed() -> None:
    text = "<image> [IMG] <|image_pad|>"
    assert escape_marker(text) == text


def test_new_markers_differ_and_are_escapable() -> None:
    one, two = new_marker(), new_marker()
    assert one != two and one.startswith("<__media_")
    assert one not in escape_marker(f"typed {one}", one)


@pytest.mark.parametrize("marker", ["", "x", f"a{WORD_JOINER}b"])
def test_unusable_markers_are_refused(marker: str) -> None:
    with pytest.raises(ValueError, match="media marker"):
        escape_marker("text", marker)
