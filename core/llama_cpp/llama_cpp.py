"""llama.cpp's C API under its C names (the low-level API).

Every function of llama.h, of the ggml/gguf headers it includes and of
mtmd.h/mtmd-helper.h that the built libraries export is a module attribute
here, called through cffi's API mode (compiled, not marshalled by libffi).
Enums are IntEnum classes named after their C enum (``llama_split_mode``),
and every enum member and integer ``#define`` is also a module-level constant
(``LLAMA_SPLIT_MODE_LAYER``, ``LLAMA_DEFAULT_SEED``, ...).

What differs from the ctypes binding of llama-cpp-python is listed in
docs/low-level.md: pointers are cffi cdata (``ffi.new("llama_token[]", n)``
instead of ``(llama_token * n)()``), structs are returned by value as cdata
whose fields are read and written as attributes, and ``NULL`` is
``ffi.NULL``.
"""

from __future__ import annotations

import enum as _enum
from typing import Any

from llama_cpp_native import ENUMS as _ENUMS
from llama_cpp_native import ffi, lib

# Function and constant names straight from the compiled module: nothing here
# is a hand-written copy of a declaration.
_C_NAMES: list[str] = [name for name in dir(lib) if not name.startswith("_")]
globals().update({name: getattr(lib, name) for name in _C_NAMES})


def _make_enum(name: str, members: list[str]) -> type[_enum.IntEnum]:
    values = {member: int(getattr(lib, member)) for member in members if hasattr(lib, member)}
    # Aliases (two names, one value) are kept: IntEnum makes the later ones aliases.
    return _enum.IntEnum(name, values, module=__name__)  # type: ignore[return-value]


_ENUM_CLASSES: dict[str, type[_enum.IntEnum]] = {
    name: _make_enum(name, members) for name, members in _ENUMS.items()
}
globals().update(_ENUM_CLASSES)

# Constants that llama-cpp-python users import but llama.h does not define as
# a macro: LLAMA_MAX_DEVICES is a function of the build, LLAMA_MAX_SEQ is
# llama.cpp's internal limit on sequence ids (src/llama-cparams.h).
LLAMA_MAX_DEVICES: int = int(lib.llama_max_devices())
LLAMA_MAX_SEQ: int = 256

# Type names that ctypes users spell as attributes; with cffi they are C type
# strings for ffi.new / ffi.cast.
llama_token = "llama_token"
llama_pos = "llama_pos"
llama_seq_id = "llama_seq_id"


def new_array(ctype: str, count_or_values: Any) -> Any:
    """``ffi.new(f"{ctype}[]", ...)``: a C array owned by the returned cdata."""
    return ffi.new(f"{ctype}[]", count_or_values)


__all__ = [
    *_C_NAMES,
    *_ENUM_CLASSES,
    "LLAMA_MAX_DEVICES",
    "LLAMA_MAX_SEQ",
    "ffi",
    "lib",
    "llama_pos",
    "llama_seq_id",
    "llama_token",
    "new_array",
]
