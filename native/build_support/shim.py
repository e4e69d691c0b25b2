"""Build the shim library: C entry points to llama.cpp's C++-only "common" code.

It is this project's own code (native/shim), compiled against the headers of
the llama.cpp source and linked to the llama-common library of the same CMake
build, into the same folder, so that it is shipped and found like the others.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent.parent / "shim"
# the shim's translation units: the entry points to llama.cpp's common code, the top-k sampling path, the
# token choice with its bursts of decodes, and the repetition penalties
SOURCES = ("llama_cpp_native_shim.cpp", "sample_top.cpp", "token_choice.cpp", "penalties.cpp")


def library_name() -> str:
    return "libllama-cpp-native-shim.dylib" if sys.platform == "darwin" else "libllama-cpp-native-shim.so"


def build_shim(source: Path, bin_dir: Path) -> Path:
    """Compile the shim into ``bin_dir`` unless it is newer than everything it is made from."""
    out = bin_dir / library_name()
    sources = [SHIM_DIR / name for name in SOURCES]
    inputs = [*sources, *SHIM_DIR.glob("*.h"), *bin_dir.glob("libllama-common.*")]
    if out.exists() and all(out.stat().st_mtime >= p.stat().st_mtime for p in inputs):
        return out
    cxx = shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")
    origin = "@loader_path" if sys.platform == "darwin" else "$ORIGIN"
    cmd = [
        *cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-DLLAMA_CPP_NATIVE_SHIM_BUILD",
        f"-I{SHIM_DIR}", f"-I{source / 'common'}", f"-I{source / 'include'}", f"-I{source / 'ggml' / 'include'}",
        f"-I{source / 'vendor'}", *map(str, sources),
        f"-L{bin_dir}", "-lllama-common", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{origin}",
        "-o", str(out),
    ]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError("building the shim library failed:\n" + " ".join(cmd) + "\n" + proc.stdout)
    return out
