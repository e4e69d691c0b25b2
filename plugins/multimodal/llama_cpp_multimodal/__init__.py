"""Multimodal chat for llama_cpp, as a plugin: images and audio through llama.cpp's mtmd.

Registers, through ``llama_cpp_multimodal_handlers``, the handler classes by the seed's ``chat_format``
names (``llava-1-5``, ``qwen2.5-vl``, ``gemma3``...) plus ``generic`` (:class:`GenericMTMDChatHandler`,
what ``Llama(model, mmproj_path=...)`` makes) and ``mtmd`` (:class:`MTMDChatHandler`).  The same classes
are the seed's ``llama_cpp.llama_multimodal`` names (and ``llama_cpp.llama_chat_format``'s).  Media parts
are read under a :class:`MediaPolicy` (docs/multimodal.md says what each switch guards).
"""

from __future__ import annotations

from llama_cpp import hookimpl
from llama_cpp.plugins import MultimodalHandler

from .errors import MediaError
from . import families
from .families import *  # noqa: F403 (the family classes are this package's public names)
from .families import FAMILIES
from .formats import MediaFormat, sniff
from .generic import GenericMTMDChatHandler
from .handler import KNOWN_MEDIA_TAGS, LIBRARY_POLICY, MTMDChatHandler
from .markers import DEFAULT_MARKER, escape_marker, new_marker
from .media import MediaInput, parse_content, parse_part
from .policy import MediaPolicy, refused_address_reason

_FAMILY_NAMES = families.__all__

#: the seed names this plugin gives ``llama_cpp.llama_multimodal`` (and ``llama_cpp.llama_chat_format``)
__llama_multimodal_exports__ = frozenset({"MTMDChatHandler", "GenericMTMDChatHandler", "KNOWN_MEDIA_TAGS",
                                          "MediaPolicy", "MediaError", *_FAMILY_NAMES})
__llama_chat_format_exports__ = __llama_multimodal_exports__


@hookimpl
def llama_cpp_multimodal_handlers() -> list[MultimodalHandler]:
    records = [
        MultimodalHandler("generic", GenericMTMDChatHandler,
                          description="the model's own chat template (what mmproj_path alone gives)"),
        MultimodalHandler("mtmd", MTMDChatHandler, description="a plain USER:/ASSISTANT: layout (DeepSeek-OCR)"),
    ]
    records += [MultimodalHandler(name, cls, description=(cls.__doc__ or "").split("\n")[0])
                for name, cls in FAMILIES.items()]
    return records


__all__ = [
    "DEFAULT_MARKER",
    "KNOWN_MEDIA_TAGS",
    "LIBRARY_POLICY",
    "GenericMTMDChatHandler",
    "MTMDChatHandler",
    "MediaError",
    "MediaFormat",
    "MediaInput",
    "MediaPolicy",
    "escape_marker",
    "llama_cpp_multimodal_handlers",
    "new_marker",
    "parse_content",
    "parse_part",
    "refused_address_reason",
    "sniff",
    *_FAMILY_NAMES,
]
