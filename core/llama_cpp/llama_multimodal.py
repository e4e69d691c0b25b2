"""The seed's ``llama_cpp.llama_multimodal``: multimodal chat handlers (images and audio through mtmd).

The classes (``MTMDChatHandler``, ``GenericMTMDChatHandler``, ``Llava15ChatHandler``, ``Qwen25VLChatHandler``
and every other family of docs/multimodal.md) live in the multimodal plugin (``llama-cpp-multimodal``) and
are looked up in the loaded plugins on first access, so ``from llama_cpp.llama_multimodal import X`` works
without the core importing a plugin.  They are also importable from ``llama_cpp.llama_chat_format``, as in
the seed.  ``Llama(model_path, mmproj_path=...)`` makes the handler itself.
"""

from __future__ import annotations

from .plugins import seed_exports

__getattr__ = seed_exports(__name__, "__llama_multimodal_exports__", "llama-cpp-multimodal")
