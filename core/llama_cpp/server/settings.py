"""``llama_cpp.server.settings``: the reference's module of the server's settings (``ModelSettings``,
``ServerSettings``, ``Settings``, ``ConfigFileSettings``), forwarded to llama-cpp-server."""

from __future__ import annotations

from . import _forward

__all__ = _forward(globals(), "settings")
