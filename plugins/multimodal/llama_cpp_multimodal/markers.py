"""Keeping a media marker typed by a user as text.

mtmd splits the prompt it tokenizes at its media marker (``<__media__>`` unless the context was made with
another ``media_marker``) and pairs each occurrence with the next bitmap. A user who types the marker
would shift every image onto the wrong place or make the counts disagree. The handler therefore:

1. creates its mtmd context with a marker of its own, :func:`new_marker`, that no user can guess;
2. passes every piece of user-controlled text (text parts, names, tool results) through
   :func:`escape_marker` with that marker before rendering the template, as a second fence;
3. puts the marker into the rendered prompt itself, once per :class:`~llama_cpp_multimodal.MediaInput`.

Other tags (``<image>``, ``[IMG]``, ``<|image_pad|>``) typed by a user are left alone: they are text, and
only the handler's marker stands for media.
"""

from __future__ import annotations

import re
import secrets

#: mtmd's default marker (``mtmd_default_marker()``).
DEFAULT_MARKER = "<__media__>"
#: U+2060 WORD JOINER: invisible, and splits the marker so mtmd no longer finds it.
WORD_JOINER = "\u2060"


def new_marker() -> str:
    """A media marker for one mtmd context (``mtmd_context_params.media_marker``), unguessable by users."""
    return f"<__media_{secrets.token_hex(8)}__>"


def escape_marker(text: str, marker: str = DEFAULT_MARKER) -> str:
    """``text`` with every occurrence of ``marker``, overlapping ones included, broken by a word joiner.

    The joiner goes after the marker's first character, so the text reads the same; no new occurrence can
    appear, because every one would have to contain a joiner, which the marker does not.
    """
    if len(marker) < 2 or WORD_JOINER in marker:
        raise ValueError(f"media marker {marker!r}: needs 2 or more characters and no U+2060")
    starts = [m.start() for m in re.finditer(f"(?={re.escape(marker)})", text)]
    if not starts:
        return text
    pieces, previous = [], 0
    for start in starts:
        pieces += [text[previous:start + 1], WORD_JOINER]
        previous = start + 1
    pieces.append(text[previous:])
    return "".join(pieces)
