"""``llama_cpp.server``: the reference's import path of the OpenAI-compatible server.

The server is its own distribution, ``llama-cpp-server`` (``contrib/server``; ``pip install .`` installs
it): this package only forwards to it, so that ``python -m llama_cpp.server``, ``from
llama_cpp.server.app import create_app`` and the reference's modules (``.settings``, ``.types``,
``.model``) keep working, and says what to install when it is missing.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

_MISSING = ("the llama_cpp server is not installed: pip install llama-cpp-server (or install this project with "
            "`pip install .`, which includes it)")


def _server(module: str = "") -> ModuleType:
    """``llama_cpp_server`` (or its ``module``), or an ImportError saying what to install."""
    try:
        return importlib.import_module("llama_cpp_server" + (f".{module}" if module else ""))
    except ImportError as exc:
        if exc.name not in ("llama_cpp_server", None):
            raise  # the server is installed but one of its own dependencies is not
        raise ImportError(_MISSING) from None


def _forward(namespace: dict[str, Any], module: str) -> list[str]:
    """Put the public names of the server's ``module`` into ``namespace`` (a forwarding module's globals);
    returns them, the forwarding module's ``__all__``."""
    target = _server(module)
    namespace.update({name: getattr(target, name) for name in target.__all__})
    return list(target.__all__)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_server(), name)
