"""Lay out the built llama.cpp libraries and headers inside the package.

Wheels hold no symlinks, so each library is copied once under the name the
dynamic loader looks for (its SONAME by CMake's convention: the shortest
versioned name, ``libllama.so.0``), and every library carries an ``$ORIGIN``
rpath so that the copies find each other wherever the package is installed.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import sys
from pathlib import Path

# Headers shipped with the package: llama.h, the ggml/gguf headers it
# includes, and the multimodal API.
HEADER_SOURCES = (("include", "*.h"), ("ggml/include", "*.h"), ("tools/mtmd", "mtmd*.h"))
CDEF_HEADERS = ("llama.h", "mtmd.h", "mtmd-helper.h", "llama_cpp_native_shim.h")
LINK_LIBRARIES = ("llama", "mtmd", "ggml", "ggml-base", "llama-cpp-native-shim")


def _versioned(name: str) -> bool:
    return bool(re.search(r"\.so\.\d+$", name) or re.search(r"\.\d+\.dylib$", name))


# The libraries the package ships (ggml and its backends, llama, mtmd,
# llama-common and the shim); the tools' own libraries stay in the build tree.
SHIPPED_PREFIXES = ("libggml", "libllama.", "libllama-common.", "libmtmd.", "libllama-cpp-native-shim.")


def loader_names(bin_dir: Path) -> dict[Path, str]:
    """Map each shipped library file in ``bin_dir`` to the name the loader asks for."""
    groups: dict[Path, list[str]] = {}
    pattern = "*.dylib" if sys.platform == "darwin" else "*.so*"
    for entry in bin_dir.glob(pattern):
        if entry.name.startswith(SHIPPED_PREFIXES):
            groups.setdefault(entry.resolve(), []).append(entry.name)
    names = {}
    for real, aliases in groups.items():
        versioned = sorted((a for a in aliases if _versioned(a)), key=len)
        names[real] = versioned[0] if versioned else min(aliases, key=len)
    return names


def copy_libraries(bin_dir: Path, dest: Path) -> list[str]:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    copied = []
    for real, name in sorted(loader_names(bin_dir).items(), key=lambda kv: kv[1]):
        shutil.copy2(real, dest / name)
        copied.append(name)
    return copied


def copy_headers(source: Path, shim_dir: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for folder, pattern in HEADER_SOURCES:
        for header in sorted((source / folder).glob(pattern)):
            shutil.copy2(header, dest / header.name)
    shutil.copy2(shim_dir / "llama_cpp_native_shim.h", dest / "llama_cpp_native_shim.h")


def copy_grammars(source: Path, dest: Path) -> None:
    """llama.cpp's example GBNF grammars (json.gbnf, arithmetic.gbnf...), shipped as data."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for grammar in sorted((source / "grammars").glob("*.gbnf")):
        shutil.copy2(grammar, dest / grammar.name)


class ExportedSymbols:
    """Answers "does a built library export this function?" via the dynamic loader.

    ``dlsym`` on a handle also searches that library's dependencies, so asking
    the handles of llama and mtmd covers ggml and every linked backend.
    """

    def __init__(self, lib_dir: Path) -> None:
        mode = getattr(os, "RTLD_GLOBAL", 0) | getattr(os, "RTLD_NOW", 0)
        self._handles = []
        for stem in LINK_LIBRARIES:
            path = lib_dir / (f"lib{stem}.dylib" if sys.platform == "darwin" else f"lib{stem}.so")
            if path.exists():
                self._handles.append(ctypes.CDLL(str(path), mode=mode))
        if not self._handles:
            raise RuntimeError(f"no llama.cpp library found in {lib_dir}")

    def __call__(self, name: str) -> bool:
        return any(hasattr(h, name) for h in self._handles)

    def ggml_build(self) -> tuple[str, str]:
        """ggml's (version, commit) as compiled into the libraries just built."""
        for handle in self._handles:
            if hasattr(handle, "ggml_commit"):
                for fn in (handle.ggml_version, handle.ggml_commit):
                    fn.restype = ctypes.c_char_p
                return handle.ggml_version().decode(), handle.ggml_commit().decode()
        return "unknown", "unknown"
