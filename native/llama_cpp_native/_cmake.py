"""Configure and build llama.cpp with CMake, with a build cache.

One build directory per (source tree, CMAKE_ARGS) pair lives in the user cache,
so reinstalling the package unchanged re-runs CMake's own up-to-date check and
recompiles nothing.  The same directory later builds llama.cpp's tools (the
oracles of the test suite and the benchmarks) against the very libraries the
package ships.

Standard library only: the build backend imports this before anything exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ._amx_check import with_amx_workaround
from ._source import SourceTree, cache_root

# The libraries the package ships; CMake builds their dependencies (ggml-base,
# ggml-cpu and any GPU backend) on the way.  llama-common holds the C++-only
# parts the package exposes through its shim (the JSON-schema converter).
LIBRARY_TARGETS = ("llama", "mtmd", "llama-common")
# llama.cpp's own programs used as oracles of correctness and speed.
TOOL_TARGETS = ("llama-completion", "llama-bench", "llama-batched-bench", "llama-embedding", "llama-tokenize",
                "llama-speculative-simple", "llama-lookup", "llama-lookup-create", "llama-mtmd-cli")
# llama.cpp's server, the oracle for ours (its llama-server routes in the tests, its speed in the benchmark):
# built only on request (``build-tools --server``), since it is the slowest tool to compile.
SERVER_TARGETS = ("llama-server",)
# What configuring the server's folder takes: its web UI stays out (no npm, no download at build time).
_SERVER_OPTIONS = ("-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF")

# Options that keep the configure step to what a library build needs; the
# tools and examples are configured (cheap) but only built on request.
_BASE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DLLAMA_BUILD_COMMON=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_EXAMPLES=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    # Every library and tool lands in one folder and finds its siblings there,
    # both in the build tree and once copied into the installed package.
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
)


def _origin() -> str:
    return "@loader_path" if sys.platform == "darwin" else "$ORIGIN"


def user_cmake_args() -> list[str]:
    """``CMAKE_ARGS`` as llama-cpp-python users pass it (``-DGGML_CUDA=on`` ...)."""
    return shlex.split(os.environ.get("CMAKE_ARGS", ""))


def _stable_copy(src: Path, name: str) -> Path:
    """Copy a build tool into the cache once, so its path outlives pip's build env.

    A CMake build folder records the paths of cmake and ninja; pip installs
    them into a throwaway environment per build, so the cached folder would
    point at deleted programs on the next install.
    """
    dest = cache_root() / "toolchain" / name
    if not dest.exists():
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        if src.is_dir():
            shutil.copytree(src, tmp, symlinks=True)
        else:
            tmp.mkdir(parents=True)
            shutil.copy2(src, tmp / src.name)
        try:
            os.replace(tmp, dest)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _cmake_exe() -> str:
    try:  # the `cmake` package from the index, so no system CMake is needed
        import cmake  # type: ignore[import-not-found]  # optional, and without type information

        data = Path(cmake.CMAKE_DATA)
        if (data / "bin" / "cmake").exists():
            return str(_stable_copy(data, f"cmake-{cmake.__version__}") / "bin" / "cmake")
    except (ImportError, AttributeError):
        pass
    # at run time (build-tools) the build environment is gone: use its saved copy
    saved = sorted((cache_root() / "toolchain").glob("cmake-*/bin/cmake"))
    if saved:
        return str(saved[-1])
    found = shutil.which("cmake")
    if not found:
        raise RuntimeError("CMake was not found: install the `cmake` package (pip install cmake)")
    return found


def _generator_args() -> list[str]:
    if any(a.startswith("-G") for a in user_cmake_args()):
        return []
    name = "ninja.exe" if os.name == "nt" else "ninja"
    candidates = []
    try:
        import ninja  # type: ignore[import-not-found]  # optional, and without type information

        candidates.append(Path(ninja.BIN_DIR) / name)
    except (ImportError, AttributeError):
        pass
    found = shutil.which("ninja")
    if found:
        candidates.append(Path(found))
    for exe in candidates:
        if exe.is_file():
            version = subprocess.run([str(exe), "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
            stable = _stable_copy(exe, f"ninja-{version or 'unknown'}") / name
            return ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={stable}"]
    return []


def _cache_is_stale(directory: Path) -> bool:
    """True when a build folder refers to a cmake or make program that is gone."""
    cache = directory / "CMakeCache.txt"
    if not cache.exists():
        return False
    for line in cache.read_text(errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.split(":")[0] in ("CMAKE_COMMAND", "CMAKE_MAKE_PROGRAM"):
            value = value.strip()
            if value and os.path.isabs(value) and not os.path.exists(value):
                return True
    return False


@dataclass(frozen=True)
class Build:
    """A CMake build directory of one source tree with one set of CMAKE_ARGS."""

    source: SourceTree
    cmake_args: tuple[str, ...]
    directory: Path

    @property
    def bin_dir(self) -> Path:
        return self.directory / "bin"

    def libraries(self) -> list[Path]:
        """The shared libraries built here, real files only (no version symlinks)."""
        patterns = ("*.dylib",) if sys.platform == "darwin" else ("*.so*",)
        found = []
        for pattern in patterns:
            for path in sorted(self.bin_dir.glob(pattern)):
                if path.is_file() and not path.is_symlink():
                    found.append(path)
        return found


def _build_key(source: SourceTree, cmake_args: list[str]) -> str:
    blob = json.dumps({"source": str(source.path), "commit": source.commit, "args": cmake_args})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _run(cmd: list[str], log: Path) -> None:
    print("+", " ".join(shlex.quote(c) for c in cmd), flush=True)
    with open(log, "a") as fh:
        fh.write("+ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-60:]
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n" + "\n".join(tail))


def configure(source: SourceTree, extra_args: list[str] | None = None) -> Build:
    """Configure (or reuse) the cached build directory for ``source`` and CMAKE_ARGS (plus the flags that keep
    a broken compiler away from ggml's AMX kernels, :mod:`._amx_check`)."""
    args = with_amx_workaround(list(extra_args if extra_args is not None else user_cmake_args()), os.environ)
    directory = cache_root() / "build" / _build_key(source, args)
    if _cache_is_stale(directory):
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    build = Build(source=source, cmake_args=tuple(args), directory=directory)
    if not (directory / "CMakeCache.txt").exists() or not (directory / ".configured").exists():
        cmd = [
            _cmake_exe(), "-S", str(source.path), "-B", str(directory),
            *_generator_args(), *_BASE_OPTIONS,
            f"-DCMAKE_INSTALL_RPATH={_origin()}",
            f"-DLLAMA_BUILD_NUMBER={source.number}",
            f"-DLLAMA_BUILD_COMMIT={source.commit}",
            *args,
        ]
        _run(cmd, directory / "build.log")
        (directory / ".configured").write_text(json.dumps({"source": str(source.path), "cmake_args": args}))
    return build


def _jobs() -> str:
    return os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)


def build_targets(build: Build, targets: tuple[str, ...]) -> None:
    cmd = [_cmake_exe(), "--build", str(build.directory), "--config", "Release", "-j", _jobs()]
    for target in targets:
        cmd += ["--target", target]
    _run(cmd, build.directory / "build.log")


def build_libraries(build: Build) -> list[Path]:
    build_targets(build, LIBRARY_TARGETS)
    return build.libraries()


def _server_configured(build: Build) -> bool:
    cache = build.directory / "CMakeCache.txt"
    return cache.exists() and "LLAMA_BUILD_SERVER:BOOL=ON" in cache.read_text(errors="replace")


def build_tools(build: Build, server: bool = False) -> Path:
    """Build llama.cpp's oracle tools next to the libraries; returns their folder.  With ``server``, also
    ``llama-server``: the build folder is configured again with the server's folder switched on, which
    changes no library (only tools/ reads the switch), so nothing already built is compiled again."""
    targets = TOOL_TARGETS
    if server:
        if not _server_configured(build):
            _run([_cmake_exe(), "-S", str(build.source.path), "-B", str(build.directory), *_SERVER_OPTIONS],
                 build.directory / "build.log")
        targets += SERVER_TARGETS
    build_targets(build, targets)
    return build.bin_dir
