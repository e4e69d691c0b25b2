"""Leave ggml's AMX kernels out of a native build whose compiler would break them.

GCC 12's ``_tile_loadconfig`` (Debian 12 ships 12.2) tells the optimizer that the instruction reads 8 bytes
of its 64-byte tile configuration, so at ``-O3`` the stores that fill in the tiles' shapes are dropped. On a
CPU with AMX (Xeon Sapphire Rapids and later), a native build of ggml then multiplies Q4_0, Q4_1, Q8_0 and
K-quant weights with unconfigured tiles: the first batch of two or more tokens dies with SIGILL at
``tilezero`` or SIGSEGV in ``ggml_backend_amx_mul_mat``, in llama.cpp's own tools as in this package.

Before CMake configures a native x86-64 build, a probe compiles that pattern with the same compiler and
``-O3 -march=native`` and runs it. When it dies, the build adds ``-mno-amx-int8`` to the C and C++ flags
(merged with the user's own): ggml then multiplies those weights with its AVX512-VNNI kernels. A compiler that
keeps the configuration, or a CPU without AMX, changes nothing. Standard library only, like ``_cmake``.
"""

from __future__ import annotations

import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Mapping

FLAG = "-mno-amx-int8"
_FLAG_VARIABLES = ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS")

# ggml's tile setup (a configuration in a local, filled in field by field, then loaded), then a tile
# instruction: it faults when the compiler dropped the stores. Without AMX in -march=native it does nothing.
_PROBE = r"""
#include <immintrin.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__AMX_INT8__)
struct tile_shapes {
    uint8_t palette = 0; uint8_t start_row = 0; uint8_t reserved[14] = {};
    uint16_t colsb[16] = {}; uint8_t rows[16] = {};
};
__attribute__((noinline)) static void configure_tiles(void) {
    alignas(64) tile_shapes config = {};
    config.palette = 1;
    for (int i = 0; i < 8; i++) { config.rows[i] = 16; config.colsb[i] = 64; }
    _tile_loadconfig(&config);
}
int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) return 0;
    configure_tiles();
    _tile_zero(4);
    _tile_zero(7);
    _tile_release();
    return 0;
}
#else
int main(void) { return 0; }
#endif
"""


def _last_definition(args: list[str], name: str) -> str | None:
    """The value of the last ``-D<name>=...`` (or ``-D<name>:TYPE=...``) in ``args``: CMake keeps the last."""
    value = None
    for arg in args:
        if arg.startswith(f"-D{name}=") or arg.startswith(f"-D{name}:"):
            value = arg.partition("=")[2]
    return value


def is_native_x86_build(args: list[str]) -> bool:
    """Whether ``args`` configure ggml for this very x86-64 CPU (``GGML_NATIVE`` is on unless turned off)."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    native = _last_definition(args, "GGML_NATIVE")
    return native is None or native.strip().upper() not in ("OFF", "0", "FALSE", "NO", "N")


def cxx_compiler(args: list[str], environ: Mapping[str, str]) -> list[str]:
    """The C++ compiler CMake will use: ``-DCMAKE_CXX_COMPILER``, else ``CXX``, else ``c++``."""
    return shlex.split(_last_definition(args, "CMAKE_CXX_COMPILER") or environ.get("CXX") or "c++")


def amx_tiles_break(compiler: list[str]) -> bool:
    """True when the probe, built by ``compiler`` for this CPU, dies; False when it runs, or cannot be built
    or run here (nothing to learn, so nothing to change)."""
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "amx_probe"
        try:
            built = subprocess.run([*compiler, "-O3", "-march=native", "-x", "c++", "-", "-o", str(exe)],
                                   input=_PROBE, capture_output=True, text=True, timeout=120)
            if built.returncode != 0:
                return False
            return subprocess.run([str(exe)], capture_output=True, timeout=30).returncode < 0
        except (OSError, subprocess.SubprocessError):
            return False


def with_amx_workaround(args: list[str], environ: Mapping[str, str],
                        tiles_break: Callable[[list[str]], bool] = amx_tiles_break) -> list[str]:
    """``args`` with :data:`FLAG` added to the C and C++ flags when this is a native x86-64 build whose
    compiler breaks AMX tiles; ``args`` unchanged otherwise, and when they already carry the flag (so a
    recorded build's arguments find the same build folder again). ``tiles_break`` is the probe (tests
    replace it)."""
    flags = _last_definition(args, "CMAKE_CXX_FLAGS") or ""
    if FLAG in shlex.split(flags) or not is_native_x86_build(args):
        return args
    if not tiles_break(cxx_compiler(args, environ)):
        return args
    print(f"llama_cpp_native: this compiler drops AMX tile configurations (Debian 12's GCC 12 does): building "
          f"ggml without its AMX kernels ({FLAG})", flush=True)
    merged = [f"-D{name}={' '.join(part for part in (_last_definition(args, name), FLAG) if part)}"
              for name in _FLAG_VARIABLES]
    return [*args, *merged]
