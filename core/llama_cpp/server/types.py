"""``llama_cpp.server.types``: the reference's module of the server's request and response types, forwarded
to llama-cpp-server."""

from __future__ import annotations

from . import _forward

__all__ = _forward(globals(), "types")
