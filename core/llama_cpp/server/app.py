"""``llama_cpp.server.app``: the reference's module path of ``create_app`` (``uvicorn
llama_cpp.server.app:create_app --factory``), forwarded to llama-cpp-server."""

from __future__ import annotations

from . import _forward

__all__ = _forward(globals(), "app")
