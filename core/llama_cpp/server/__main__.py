"""``python -m llama_cpp.server --model PATH``: the reference server's command, run by llama-cpp-server."""

from __future__ import annotations

import sys

from . import _MISSING


def _run() -> int:
    try:
        from llama_cpp_server.__main__ import main
    except ImportError as exc:
        if exc.name not in ("llama_cpp_server", "llama_cpp_server.__main__", None):
            raise
        print(f"error: {_MISSING}", file=sys.stderr)
        return 1
    return main()


if __name__ == "__main__":
    sys.exit(_run())
