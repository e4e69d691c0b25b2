"""ctypes types for the C declarations the cffi module was compiled from.

The low-level API has to look like llama-cpp-python's ctypes binding (pointer
parameters that take ctypes arrays and ``byref``, ``llama_batch`` as a
``ctypes.Structure``, ``ctypes.CFUNCTYPE`` callbacks), but no declaration may
be written twice: the cffi module already holds every type and signature of
the headers, generated at build time.  :class:`CtypesTypes` translates those
cffi types into ctypes ones, following the conventions of the ctypes binding:

- a pointer to an opaque struct (``llama_model *``, ``llama_memory_t``) is
  ``c_void_p``, so handles travel as Python ints;
- ``char *`` is ``c_char_p`` (bytes in, bytes out);
- a pointer to a struct with a public layout is ``POINTER(struct)``;
- an enum is the signed integer of its size;
- a function pointer is a ``CFUNCTYPE`` prototype.

Every struct is checked against the compiler's layout (size and each field's
offset, which cffi measured when the module was built), so a translation that
disagrees with the C compiler fails at import instead of corrupting memory.
"""

from __future__ import annotations

import ctypes
from typing import Any

from llama_cpp_native import ffi

# C primitive types whose ctypes counterpart is not "the integer of this size and sign"
_NAMED: dict[str, Any] = {
    "_Bool": ctypes.c_bool,
    "char": ctypes.c_char,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "long double": ctypes.c_longdouble,
    "size_t": ctypes.c_size_t,
    "int": ctypes.c_int,
}
_SIGNED = {1: ctypes.c_int8, 2: ctypes.c_int16, 4: ctypes.c_int32, 8: ctypes.c_int64}
_UNSIGNED = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}


def struct_name(ctype: Any) -> str:
    """``struct llama_batch`` → ``llama_batch``: the class name the ctypes binding uses."""
    return ctype.cname.split(" ", 1)[1] if ctype.cname.startswith(("struct ", "union ")) else ctype.cname


def is_opaque(ctype: Any) -> bool:
    """A struct whose layout the headers do not publish (``struct llama_model``)."""
    try:
        ffi.sizeof(ctype)
    except ffi.error:
        return True
    return False


class CtypesTypes:
    """Translates cffi ctypes into ctypes types; each struct becomes one ``ctypes.Structure`` class."""

    def __init__(self, module: str) -> None:
        self.module = module  # the __module__ of the generated classes
        self.structs: dict[str, Any] = {}  # every Structure and Union class made, by name
        self._nullable: dict[Any, Any] = {}  # callback prototype -> its parameter type that takes None

    def of(self, ctype: Any) -> Any:
        """The ctypes type of a parameter, field or element (``None`` for ``void``)."""
        kind = ctype.kind
        if kind == "void":
            return None
        if kind == "primitive":
            return self._primitive(ctype)
        if kind == "enum":
            return _SIGNED[ffi.sizeof(ctype)]
        if kind == "pointer":
            return self._pointer(ctype.item)
        if kind == "function":
            return self.prototype(ctype)
        if kind == "array":
            item = self.of(ctype.item)
            return ctypes.POINTER(item) if ctype.length is None else item * ctype.length
        if kind in ("struct", "union"):
            return self.struct(ctype)
        raise TypeError(f"no ctypes counterpart for the C type {ctype.cname!r} ({kind})")

    def prototype(self, ctype: Any) -> Any:
        """``CFUNCTYPE(result, *args)`` for a C function-pointer type (a callback's signature)."""
        return ctypes.CFUNCTYPE(self.of(ctype.result), *(self.of(arg) for arg in ctype.args))

    def function(self, ctype: Any) -> Any:
        """The prototype to call a C function through: as ``prototype``, except that a callback parameter
        also takes ``None`` for NULL (``llama_log_set(None, None)``), as every other pointer does."""
        return ctypes.CFUNCTYPE(self.of(ctype.result), *(self._parameter(arg) for arg in ctype.args))

    def _parameter(self, ctype: Any) -> Any:
        kind = self.of(ctype)
        if ctype.kind == "pointer" and ctype.item.kind == "function":
            ctype = ctype.item
        if ctype.kind != "function":
            return kind
        nullable = self._nullable.get(kind)
        if nullable is None:
            def from_param(cls: Any, value: Any, _base: Any = kind) -> Any:
                return ctypes.c_void_p() if value is None else _base.from_param(value)
            namespace = {"_flags_": kind._flags_, "_argtypes_": kind._argtypes_, "_restype_": kind._restype_,
                         "from_param": classmethod(from_param)}
            nullable = self._nullable[kind] = type(f"{kind.__name__}_or_NULL", (kind,), namespace)
        return nullable

    def struct(self, ctype: Any) -> type[ctypes.Structure]:
        """The ``ctypes.Structure`` (or ``Union``) of a struct with a public layout, created once."""
        name = struct_name(ctype)
        known = self.structs.get(name)
        if known is not None:
            return known
        base = ctypes.Union if ctype.kind == "union" else ctypes.Structure
        cls: Any = type(name, (base,), {"__module__": self.module,
                                        "__doc__": f"``{ctype.cname}`` of the C headers."})
        self.structs[name] = cls  # before its fields: a field may point back to this struct
        fields, anonymous = self._fields(name, ctype)
        if anonymous:
            cls._anonymous_ = anonymous
        cls._fields_ = fields
        self._check_layout(cls, ctype)
        return cls

    # -- parts ------------------------------------------------------------------------
    @staticmethod
    def _primitive(ctype: Any) -> Any:
        named = _NAMED.get(ctype.cname)
        if named is not None:
            return named
        size = ffi.sizeof(ctype)
        signed = int(ffi.cast(ctype, -1)) < 0
        return (_SIGNED if signed else _UNSIGNED)[size]

    def _pointer(self, item: Any) -> Any:
        if item.kind == "void":
            return ctypes.c_void_p
        if item.kind == "primitive" and item.cname == "char":
            return ctypes.c_char_p
        if item.kind == "function":  # cffi spells a function pointer as the function type itself
            return self.prototype(item)
        if item.kind in ("struct", "union") and is_opaque(item):
            return ctypes.c_void_p
        return ctypes.POINTER(self.of(item))

    def _fields(self, name: str, ctype: Any) -> tuple[list[tuple[Any, ...]], list[str]]:
        """The ``_fields_`` of a struct.  cffi lists the members of an anonymous union inline, all at one
        offset (``llama_model_kv_override``'s ``val_i64``/``val_f64``/...); they become a union field
        named ``value`` (``value1``, ... for more), of class ``<struct>_value``, made anonymous so that
        both ``override.val_i64`` and ``override.value.val_i64`` work, as in the ctypes binding."""
        groups: list[list[tuple[str, Any]]] = []
        for field_name, field in ctype.fields:
            if ctype.kind == "struct" and groups and groups[-1][0][1].offset == field.offset:
                groups[-1].append((field_name, field))
            else:
                groups.append([(field_name, field)])
        fields: list[tuple[Any, ...]] = []
        anonymous: list[str] = []
        for group in groups:
            if len(group) == 1:
                field_name, field = group[0]
                entry: tuple[Any, ...] = (field_name, self.of(field.type))
                fields.append(entry if field.bitsize < 0 else (*entry, field.bitsize))
                continue
            label = "value" if not anonymous else f"value{len(anonymous)}"
            union: Any = type(f"{name}_{label}", (ctypes.Union,), {"__module__": self.module})
            union._fields_ = [(member, self.of(field.type)) for member, field in group]
            self.structs[union.__name__] = union
            fields.append((label, union))
            anonymous.append(label)
        return fields, anonymous

    @staticmethod
    def _check_layout(cls: Any, ctype: Any) -> None:
        if ctypes.sizeof(cls) != ffi.sizeof(ctype):
            raise ImportError(f"the ctypes layout of {ctype.cname} takes {ctypes.sizeof(cls)} bytes where the "
                              f"compiler's takes {ffi.sizeof(ctype)}")
        for field_name, field in ctype.fields:
            if field.bitsize >= 0:
                continue
            offset = getattr(cls, field_name).offset  # (a member of an anonymous union has its own descriptor)
            if offset != field.offset:
                raise ImportError(f"the ctypes layout puts {ctype.cname}.{field_name} at offset {offset} where "
                                  f"the compiler puts it at {field.offset}")
