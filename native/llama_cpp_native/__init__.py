"""llama.cpp's C API through a cffi API-mode extension.

``ffi`` and ``lib`` are the raw binding: every function of llama.h, the ggml
and gguf headers it includes, mtmd.h and mtmd-helper.h that the built
libraries export, their enums and integer ``#define`` constants.  The
declarations were generated from the headers when the package was built, and
the shared libraries live in ``lib_dir`` next to this file.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._build_info import BUILD_INFO, ENUMS

__all__ = [
    "BUILD_INFO",
    "ENUMS",
    "build_description",
    "ffi",
    "grammars_dir",
    "include_dir",
    "lib",
    "lib_dir",
    "llama_commit",
    "llama_build_number",
    "system_info",
    "tools_dir",
]

_HERE = Path(__file__).resolve().parent
lib_dir: Path = _HERE / "lib"
include_dir: Path = _HERE / "include"
grammars_dir: Path = _HERE / "grammars"  # llama.cpp's example GBNF grammars

llama_commit: str = BUILD_INFO["llama_commit"]
llama_build_number: int = BUILD_INFO["llama_build_number"]


def build_description(commit: str = llama_commit, number: int = llama_build_number) -> str:
    """A llama.cpp build as people name it: ``b<number> (<commit>)``."""
    return f"{'b' + str(number) if number else 'b?'} ({commit})"


try:
    from ._native import ffi, lib
except ImportError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        f"the llama.cpp libraries in {lib_dir} could not be loaded ({exc}); "
        "reinstall llama-cpp-native for this platform"
    ) from exc


def _check_build() -> None:
    """Refuse to run against libraries of another llama.cpp build.

    ggml compiles the build's commit into the library, so comparing it with
    what was read from the libraries at build time catches a library swapped
    for one of another build (a different commit or ggml version).
    """
    loaded = (ffi.string(lib.ggml_version()).decode(), ffi.string(lib.ggml_commit()).decode())
    expected = (BUILD_INFO["ggml_version"], BUILD_INFO["ggml_commit"])
    if loaded != expected:
        raise ImportError(
            "llama_cpp_native was compiled against llama.cpp build "
            f"{build_description()} (ggml {expected[0]}, commit {expected[1]}), but the loaded "
            f"libraries are ggml {loaded[0]}, commit {loaded[1]} (expected them in {lib_dir}); "
            "reinstall llama-cpp-native so that the extension and the libraries come from one build"
        )


_check_build()


def system_info() -> str:
    """llama.cpp's description of the CPU features and backends compiled in."""
    return ffi.string(lib.llama_print_system_info()).decode("utf-8", "replace")


def tools_dir() -> Path | None:
    """The folder holding llama.cpp's own tools (``llama-completion``, ``llama-bench``...).

    ``LLAMA_CPP_TOOLS_DIR`` wins; otherwise the tools built next to this
    package's libraries (``python -m llama_cpp_native build-tools``), if any.
    """
    env = os.environ.get("LLAMA_CPP_TOOLS_DIR")
    if env:
        return Path(env)
    candidate = Path(BUILD_INFO["build_dir"]) / "bin"
    exe = "llama-completion.exe" if os.name == "nt" else "llama-completion"
    return candidate if (candidate / exe).exists() else None
