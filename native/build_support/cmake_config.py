"""pip's ``-C cmake.args=...`` for the native build, and its way from the umbrella to the native layer.

``-C cmake.args="-DGGML_BLAS=ON;-DGGML_BLAS_VENDOR=OpenBLAS"`` is scikit-build-core's setting, the form the
reference's README gives.  pip passes ``-C`` (``--config-settings``) only to the projects named on its
command line, not to the dependencies it builds for them (checked with pip 26.3): ``pip install . -C
cmake.args=...`` reaches the umbrella's build backend, never llama-cpp-native's.  So the umbrella's backend
hands the arguments over in a file of the native folder's build directory, marked with the id of the pip
process, and the native backend takes them from there when pip gave it none: pip runs both backends as its
own child processes, so arguments left by another pip run are never taken.

Standard library only: both backends import this before anything is installed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

# native/build: setuptools' own build folder (ignored by git, left out of every sdist)
HANDOFF = Path(__file__).resolve().parents[1] / "build" / "pip-cmake-args.json"


def from_pip(config_settings: Mapping[str, Any] | None) -> list[str]:
    """The CMake arguments of ``-C cmake.args=...``, split at ``;`` (given once, or several times)."""
    value = (config_settings or {}).get("cmake.args")
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [arg.strip() for item in items for arg in item.split(";") if arg.strip()]


def hand_over(args: list[str]) -> None:
    """The umbrella's side: leave ``args`` for the native build of this pip run (none: remove what an
    earlier run left)."""
    if not args:
        HANDOFF.unlink(missing_ok=True)
        return
    HANDOFF.parent.mkdir(parents=True, exist_ok=True)
    HANDOFF.write_text(json.dumps({"pip": os.getppid(), "cmake_args": args}))


def handed_over() -> list[str]:
    """The native side: the arguments the umbrella left in this pip run ([] if none, or another run's)."""
    try:
        left = json.loads(HANDOFF.read_text())
    except (OSError, ValueError):
        return []
    return list(left["cmake_args"]) if left.get("pip") == os.getppid() else []


def take_over() -> list[str]:
    """:func:`handed_over`, then the file is gone: one build takes the arguments once."""
    args = handed_over()
    if args:
        HANDOFF.unlink(missing_ok=True)
    return args
