"""``llama_cpp.server.model``: the reference's module of ``LlamaProxy``, forwarded to llama-cpp-server (whose
module is ``llama_cpp_server.models``)."""

from __future__ import annotations

from . import _forward

__all__ = _forward(globals(), "models")
