"""``llama_cpp.server.app``: the reference's module path of ``create_app`` (``uvicorn
llama_cpp.server.app:create_app --factory``), forwarded to llama-cpp-server."""

from __future__ import annotations

from . import _server

create_app = _server().create_app

__all__ = ["create_app"]
