"""``llama_cpp.server``: the reference's import path of the OpenAI-compatible server.

The server is its own distribution, ``llama-cpp-server`` (``contrib/server``; ``pip install .`` installs
it): this package only forwards to it, so that ``python -m llama_cpp.server`` and
``from llama_cpp.server.app import create_app`` keep working, and says what to install when it is missing.
"""

from __future__ import annotations

from typing import Any

_MISSING = ("the llama_cpp server is not installed: pip install llama-cpp-server (or install this project with "
            "`pip install .`, which includes it)")


def _server() -> Any:
    try:
        import llama_cpp_server
    except ImportError as exc:
        if exc.name not in ("llama_cpp_server", None):
            raise  # the server is installed but one of its own dependencies is not
        raise ImportError(_MISSING) from None
    return llama_cpp_server


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_server(), name)
