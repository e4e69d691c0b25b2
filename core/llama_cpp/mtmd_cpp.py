"""llama.cpp's multimodal C API (``mtmd.h``, ``mtmd-helper.h``) under its C names, in ctypes form.

The seed's ``llama_cpp.mtmd_cpp`` (the README's "mtmd_cpp_lib") bound about 82 functions with ctypes.
Here every ``mtmd_*`` function the built ``mtmd`` library exports is a module attribute, with the
signature, structs (``mtmd_context_params``, ``mtmd_input_text``, ...) and handle types
(``mtmd_context_p``, ``mtmd_bitmap_p``, ...) that :mod:`llama_cpp.llama_cpp` generates for the whole
C API (it carries them too): nothing is a hand-written copy of a declaration.  mtmd's enums are IntEnum
classes named after their C enum (``mtmd_input_chunk_type``) and every ``MTMD_*`` member is also a
module-level constant.  The library is the one the package ships, so the seed's ``MTMD_CPP_LIB``
variable has no meaning here.
"""

from __future__ import annotations

from . import llama_cpp as _llama_cpp
from .llama_cpp import ffi, lib  # noqa: F401  (the cffi form, as in llama_cpp.llama_cpp)

_NAMES: list[str] = [name for name in _llama_cpp.__all__ if name.startswith(("mtmd_", "MTMD_"))]
globals().update({name: getattr(_llama_cpp, name) for name in _NAMES})


def default_marker() -> str:
    """The text that stands for one media item in a prompt (``<__media__>``), as a Python string."""
    return _llama_cpp.mtmd_default_marker().decode()


__all__ = [*_NAMES, "default_marker", "ffi", "lib"]
