"""Multimodal chat for llama_cpp, as a plugin: media parts read safely into records mtmd can take.

This release reads and checks media (:func:`parse_content`, :class:`MediaPolicy`); it registers no hook
implementation yet, so the plugin host loads it and finds nothing to choose. The handlers that turn
these records into ledger chunks register through ``llama_cpp_multimodal_handlers``.
"""

from __future__ import annotations

from .errors import MediaError
from .formats import MediaFormat, sniff
from .markers import DEFAULT_MARKER, escape_marker, new_marker
from .media import MediaInput, parse_content, parse_part
from .policy import MediaPolicy, refused_address_reason

__all__ = [
    "DEFAULT_MARKER",
    "MediaError",
    "MediaFormat",
    "MediaInput",
    "MediaPolicy",
    "escape_marker",
    "new_marker",
    "parse_content",
    "parse_part",
    "refused_address_reason",
    "sniff",
]
