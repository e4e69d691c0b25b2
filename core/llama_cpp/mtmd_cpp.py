"""llama.cpp's multimodal C API (``mtmd.h``, ``mtmd-helper.h``) under its C names.

The seed's ``llama_cpp.mtmd_cpp`` (the README's "mtmd_cpp_lib") bound about 82 functions with ctypes.
Here every ``mtmd_*`` function the built ``mtmd`` library exports is a module attribute, called
through the same compiled cffi module as :mod:`llama_cpp.llama_cpp` (which also carries them): nothing
is a hand-written copy of a declaration.  mtmd's enums are IntEnum classes named after their C enum
(``mtmd_input_chunk_type``) and every ``MTMD_*`` member is also a module-level constant.

Differences from the ctypes binding are those of :mod:`llama_cpp.llama_cpp` (docs/low-level.md):
pointers are cffi cdata, structs such as ``mtmd_context_params`` are returned by value as cdata whose
fields are attributes, strings are ``char *`` cdata (``ffi.string(mtmd_default_marker())``), and
``NULL`` is ``ffi.NULL``.  The library is the one the package ships, so the seed's ``MTMD_CPP_LIB``
variable has no meaning here.
"""

from __future__ import annotations

from . import llama_cpp as _llama_cpp
from .llama_cpp import ffi, lib

_C_NAMES: list[str] = [name for name in dir(lib) if name.startswith(("mtmd_", "MTMD_"))]
globals().update({name: getattr(lib, name) for name in _C_NAMES})

# mtmd's enums, as the IntEnum classes that llama_cpp.llama_cpp builds for every enum of the headers
_ENUM_NAMES: list[str] = [name for name in _llama_cpp.__all__
                          if name.startswith("mtmd_") and isinstance(getattr(_llama_cpp, name), type)]
globals().update({name: getattr(_llama_cpp, name) for name in _ENUM_NAMES})


def default_marker() -> str:
    """The text that stands for one media item in a prompt (``<__media__>``), as a Python string."""
    return ffi.string(lib.mtmd_default_marker()).decode()


__all__ = [*_C_NAMES, *_ENUM_NAMES, "default_marker", "ffi", "lib"]
