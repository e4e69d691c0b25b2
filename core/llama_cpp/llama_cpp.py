"""llama.cpp's C API under its C names, as llama-cpp-python's ctypes binding has it (the low-level API).

Code written against llama-cpp-python's ``llama_cpp.llama_cpp`` runs unchanged:
every function takes ctypes arguments (``(llama_token * n)()``, ``byref``,
``ctypes.create_string_buffer``, ``None`` for NULL), handles are Python ints,
structs are ``ctypes.Structure`` classes (``llama_batch``,
``llama_context_params``, ...), callbacks are ``CFUNCTYPE`` prototypes
(``ggml_log_callback``, ``llama_progress_callback``), and functions returning
C arrays return ctypes pointers that ``numpy.ctypeslib.as_array`` accepts.

Nothing here is a hand-written copy of a declaration: the types and signatures
come from the cffi module compiled from the headers (see
``llama_cpp._ctypes_types``), so every function of llama.h, of the ggml/gguf
headers it includes and of mtmd.h/mtmd-helper.h that the built libraries
export is here.  Enums are IntEnum classes named after their C enum
(``llama_split_mode``), and every enum member and integer ``#define`` is also
a module-level constant (``LLAMA_SPLIT_MODE_LAYER``, ``LLAMA_DEFAULT_SEED``).

The engine does not call through this module: it uses the compiled cffi
functions, ``lib`` and ``ffi`` here (the same objects as ``llama_cpp_native``),
whose calls cost a fraction of a ctypes call.  docs/low-level.md has both forms.
"""

from __future__ import annotations

import ctypes
import enum as _enum
import functools as _functools
import re as _re
import types as _types
import warnings
from ctypes import (  # noqa: F401  (llama-cpp-python's examples spell these as llama_cpp.c_bool, ...)
    CFUNCTYPE,
    POINTER,
    Structure,
    Union,
    byref,
    c_bool,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int8,
    c_int16,
    c_int32,
    c_int64,
    c_long,
    c_size_t,
    c_uint,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
    cast,
    pointer,
    sizeof,
)
from typing import Any, NewType, Sequence

from llama_cpp_native import ENUMS as _ENUMS
from llama_cpp_native import ffi, lib

from . import _foreign_writes
from ._ctypes_types import CtypesTypes as _CtypesTypes
from ._ctypes_types import is_opaque as _is_opaque

_CTYPES_ALIASES = ["CFUNCTYPE", "POINTER", "Structure", "Union", "byref", "c_bool", "c_char", "c_char_p", "c_double",
                   "c_float", "c_int", "c_int8", "c_int16", "c_int32", "c_int64", "c_long", "c_size_t", "c_uint",
                   "c_uint8", "c_uint16", "c_uint32", "c_uint64", "c_void_p", "cast", "ctypes", "pointer", "sizeof"]

_ctypes = _CtypesTypes(__name__)
_OWN_SHIM = "llama_cpp_native_"  # the project's own C helpers for the engine: not part of llama.cpp's API

# -- types ---------------------------------------------------------------------------------------
_TYPE_NAMES: dict[str, Any] = {}
_typedefs, _struct_tags, _union_tags = ffi.list_types()
for _tag in [*_struct_tags, *_union_tags]:
    if _tag.startswith(("_", _OWN_SHIM)):
        continue
    _ctype = ffi.typeof(("struct " if _tag in _struct_tags else "union ") + _tag)
    if _is_opaque(_ctype):  # a handle: an int, passed as c_void_p
        _TYPE_NAMES[f"{_tag}_p"] = NewType(f"{_tag}_p", int)
        _TYPE_NAMES[f"{_tag}_p_ctypes"] = ctypes.c_void_p
    else:
        _cls = _ctypes.struct(_ctype)
        _TYPE_NAMES[_tag] = _cls
        _TYPE_NAMES[f"{_tag}_p"] = _TYPE_NAMES[f"{_tag}_p_ctypes"] = ctypes.POINTER(_cls)
for _name in _typedefs:
    if _name.startswith(("_", _OWN_SHIM)) or _name in _ENUMS or _name in _TYPE_NAMES:
        continue
    _ctype = ffi.typeof(_name)
    if _ctype.kind == "pointer" and _ctype.item.kind in ("struct", "union") and _is_opaque(_ctype.item):
        _TYPE_NAMES[_name] = NewType(_name, int)  # llama_memory_t, ggml_backend_t, ...: handles
        _TYPE_NAMES[f"{_name}_ctypes"] = ctypes.c_void_p
    elif _ctype.kind in ("struct", "union") and _is_opaque(_ctype):
        continue  # an opaque typedef (FILE, mtmd_context) is only ever used through a pointer: its _p above
    else:
        _TYPE_NAMES[_name] = _ctypes.of(_ctype)
_TYPE_NAMES.update(_ctypes.structs)  # with the unions made for anonymous members (llama_model_kv_override_value)
# an interface struct's members get their prototype under "<struct>_<member>", for writing one in Python
# (llama_sampler_i_apply, ...)
for _tag, _cls in list(_ctypes.structs.items()):
    if _tag.endswith("_i"):
        _TYPE_NAMES.update({f"{_tag}_{member}": kind for member, kind in _cls._fields_})
_TYPE_NAMES["llama_token_p"] = ctypes.POINTER(ctypes.c_int32)
# the ctypes binding's name for the logger prototype, which llama.h spells ggml_log_callback
_TYPE_NAMES["llama_log_callback"] = _TYPE_NAMES["ggml_log_callback"]
globals().update(_TYPE_NAMES)


# -- functions -----------------------------------------------------------------------------------
def _address(name: str) -> int:
    return int(ffi.cast("uintptr_t", ffi.addressof(lib, name)))


# the calls that change what a context's memory holds, which the engine must then not trust (their
# first argument is the context or the memory): see llama_cpp._foreign_writes
_WRITES_MEMORY = _re.compile(r"llama_(decode|encode|memory_(clear|seq_(rm|cp|keep|add|div))"
                             r"|state_(seq_)?(set_data|load_file)(_ext)?|set_state_data|load_session_file)")


def _noting_writes(name: str, raw: Any) -> Any:
    def call(target: Any, *args: Any) -> Any:
        result = raw(target, *args)
        _foreign_writes.note(target)
        return result

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``{name}`` (llama.h); tells the engine that this context's memory changed."
    return _functools.wraps(raw, assigned=(), updated=())(call)


_C_FUNCTIONS: list[str] = [name for name in dir(lib)
                           if not name.startswith(("_", _OWN_SHIM)) and callable(getattr(lib, name))]
_RAW: dict[str, Any] = {}
for _name in _C_FUNCTIONS:
    _fn = _ctypes.function(ffi.typeof(getattr(lib, _name)))(_address(_name))
    _fn.__name__ = _name
    _RAW[_name] = _fn
# llama-cpp-python's CDLL, which integrations reach into for raw function pointers
# (llguidance: ``ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p)``)
_lib = _types.SimpleNamespace(**_RAW)
globals().update({name: _noting_writes(name, fn) if _WRITES_MEMORY.fullmatch(name) else fn
                  for name, fn in _RAW.items()})


# llama.cpp renamed these; the ctypes binding kept the old names as wrappers, and so does this module
def llama_set_adapter_lora(ctx: int, adapter: int, scale: float) -> int:
    """One adapter at ``scale`` (deprecated: ``llama_set_adapters_lora`` takes a list)."""
    warnings.warn("llama_set_adapter_lora is deprecated; use llama_set_adapters_lora", DeprecationWarning,
                  stacklevel=2)
    return _RAW["llama_set_adapters_lora"](ctx, (ctypes.c_void_p * 1)(adapter), 1, (ctypes.c_float * 1)(scale))


def llama_apply_adapter_cvec(ctx: int, data: Any, len: int, n_embd: int, il_start: int, il_end: int) -> int:
    """Deprecated name of ``llama_set_adapter_cvec``."""
    warnings.warn("llama_apply_adapter_cvec is deprecated; use llama_set_adapter_cvec", DeprecationWarning,
                  stacklevel=2)
    return _RAW["llama_set_adapter_cvec"](ctx, data, len, n_embd, il_start, il_end)


def ctypes_function_for_shared_library(lib: Any) -> Any:
    """llama-cpp-python's decorator factory for binding a function of a ``ctypes.CDLL`` by hand (a library of
    one's own, or a symbol this module does not bind): ``@ctypes_function_for_shared_library(cdll)(name,
    argtypes, restype)`` over a stub gives the library's function with those types.  ``name`` may be a list
    of aliases, the first the library has wins; a missing one raises AttributeError, or with
    ``required=False`` gives a stub that raises RuntimeError when called; ``enabled=False`` keeps the stub."""
    def bind(name: str | Sequence[str], argtypes: list[Any], restype: Any, enabled: bool = True,
             required: bool = True) -> Any:
        names = [name] if isinstance(name, str) else list(name)

        def decorate(stub: Any) -> Any:
            if not enabled:
                return stub
            for alias in names:
                fn = getattr(lib, alias, None)
                if fn is not None:
                    fn.argtypes, fn.restype = argtypes, restype
                    return fn
            if required:
                raise AttributeError(f"{lib!r} has none of {names}")

            @_functools.wraps(stub)
            def missing(*_args: Any, **_kwargs: Any) -> Any:
                raise RuntimeError(f"{names[0]} is not in {lib!r}")
            return missing
        return decorate
    return bind


# -- enums and constants -------------------------------------------------------------------------
def _make_enum(name: str, members: list[str]) -> type[_enum.IntEnum]:
    values = {member: int(getattr(lib, member)) for member in members if hasattr(lib, member)}
    # Aliases (two names, one value) are kept: IntEnum makes the later ones aliases.
    # the functional API is typed as returning the enum class's metaclass instance, not type[IntEnum]
    return _enum.IntEnum(name, values, module=__name__)  # type: ignore[return-value]


_ENUM_CLASSES: dict[str, type[_enum.IntEnum]] = {
    name: _make_enum(name, members) for name, members in _ENUMS.items()
}
globals().update(_ENUM_CLASSES)
_CONSTANTS: list[str] = [name for name in dir(lib) if not name.startswith("_") and isinstance(getattr(lib, name), int)]
globals().update({name: getattr(lib, name) for name in _CONSTANTS})

# Constants that llama-cpp-python users import but llama.h does not define as
# a macro: LLAMA_MAX_DEVICES is a function of the build, LLAMA_MAX_SEQ is
# llama.cpp's internal limit on sequence ids (src/llama-cparams.h).
LLAMA_MAX_DEVICES: int = int(lib.llama_max_devices())
LLAMA_MAX_SEQ: int = 256


def __getattr__(name: str) -> Any:
    """Only reached for a name the built libraries do not export (everything they do is bound above, when
    the module loads): says so and where the names come from.  It is also what tells a type checker that
    this module's names are made at import, so a C function here is ``Any`` to it, as at ``lib``."""
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}: the libraries of this build export no "
                         "such function, struct, enum or constant (the names are those of llama.h, ggml.h, "
                         "gguf.h, mtmd.h and mtmd-helper.h of the pinned llama.cpp source)")


def new_array(ctype: str, count_or_values: Any) -> Any:
    """``ffi.new(f"{ctype}[]", ...)``: a C array for the cffi form of the API (``lib``), owned by the cdata."""
    return ffi.new(f"{ctype}[]", count_or_values)


__all__ = [
    *_C_FUNCTIONS,
    *_CONSTANTS,
    *_ENUM_CLASSES,
    *_TYPE_NAMES,
    *_CTYPES_ALIASES,
    "LLAMA_MAX_DEVICES",
    "LLAMA_MAX_SEQ",
    "ctypes_function_for_shared_library",
    "ffi",
    "llama_apply_adapter_cvec",
    "llama_set_adapter_lora",
    "lib",
    "new_array",
]
del _name, _tag, _ctype, _cls, _fn
