"""Owners of native pointers: one pointer per object, freed exactly once.

Each handle frees its pointer in ``close()`` (idempotent) and, as a last
resort, when garbage-collected.  Using a closed handle raises
``RuntimeError`` instead of passing a dangling pointer to C.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from llama_cpp_native import ffi, lib

from ._logger import capture_messages

_backend_lock = threading.Lock()
_backend_ready = False


def ensure_backend() -> None:
    """``llama_backend_init`` once per process (it is process-global in llama.cpp)."""
    global _backend_ready
    if _backend_ready:
        return
    with _backend_lock:
        if not _backend_ready:
            lib.llama_backend_init()
            _backend_ready = True


def as_pointer(handle: Any, ctype: str) -> Any:
    """``handle`` as a cffi pointer of C type ``ctype`` (``"struct llama_context *"``), from either form of
    the low-level API: cffi cdata, or the int, ``c_void_p`` or typed ctypes pointer that ``llama_cpp.llama_cpp``
    and ``Llama.ctx``/``Llama.model`` hand out."""
    if isinstance(handle, ffi.CData):
        return handle
    if isinstance(handle, ctypes._Pointer):  # LP_llama_sampler...
        handle = ctypes.cast(handle, ctypes.c_void_p)
    address = getattr(handle, "value", handle)  # ctypes.c_void_p
    if not isinstance(address, int) or address == 0:
        raise TypeError(f"expected a {ctype} (an int, a ctypes pointer or cffi cdata), got {handle!r}")
    return ffi.cast(ctype, address)

_Self = TypeVar("_Self", bound="Closing")


class Closing:
    """``with`` support and a last-resort ``close()`` at garbage collection (subclasses define close)."""

    __slots__ = ()

    if TYPE_CHECKING:  # every subclass defines it; declared for the type checker only
        def close(self) -> None: ...

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown; nothing useful to report
            pass


class NativeHandle(Closing):
    """Owns one native pointer and the function that frees it."""

    __slots__ = ("_ptr", "_free", "_what", "__weakref__")

    def __init__(self, ptr: Any, free: Callable[[Any], None], what: str) -> None:
        if ptr == ffi.NULL:
            raise RuntimeError(f"llama.cpp could not create the {what}")
        self._ptr = ptr
        self._free = free
        self._what = what

    @property
    def ptr(self) -> Any:
        ptr = self._ptr
        if ptr is None:
            raise RuntimeError(f"the {self._what} is closed")
        return ptr

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            self._free(ptr)


class SharedHandle(NativeHandle):
    """A native pointer that any thread may call through while another closes it (the model: ``tokenize``,
    metadata reads, building a request's samplers all run on the callers' threads).

    Such a call runs inside ``with handle.calling as ptr:``.  ``close()`` waits for the calls in progress
    on other threads to return before it frees the pointer, and a call that would start after ``close()``
    began raises ``RuntimeError`` instead of reaching freed memory.  Calls that only the owner makes, after
    it has stopped everything else (the engine's decodes), use ``ptr`` directly and pay nothing.
    """

    __slots__ = ("_changed", "_calls", "_closing", "calling")

    def __init__(self, ptr: Any, free: Callable[[Any], None], what: str) -> None:
        super().__init__(ptr, free, what)
        self._changed = threading.Condition(threading.Lock())
        self._calls: dict[int, int] = {}  # thread ident -> calls in progress on it (a call may nest another)
        self._closing = False
        self.calling = _Call(self)

    def begin_call(self) -> Any:
        """Count a call in (``calling``'s entry); the pointer, valid until ``end_call``."""
        me = threading.get_ident()
        with self._changed:
            if self._closing:
                raise RuntimeError(f"the {self._what} is closed")
            self._calls[me] = self._calls.get(me, 0) + 1
        return self._ptr

    def end_call(self) -> None:
        me = threading.get_ident()
        with self._changed:
            left = self._calls.pop(me) - 1
            if left:
                self._calls[me] = left
            elif self._closing and not self._calls:
                self._changed.notify_all()

    def close(self) -> None:
        """Free the pointer once no other thread is calling through it (idempotent)."""
        with self._changed:
            if self._closing:
                return
            if threading.get_ident() in self._calls:  # waiting would wait for itself
                raise RuntimeError(f"the {self._what} cannot be closed from inside a call on it (a callback it "
                                   "made, such as a log handler)")
            self._closing = True
            while self._calls:
                self._changed.wait()
        super().close()


class _Call:
    """``SharedHandle.calling``: ``with`` around one call through the pointer."""

    __slots__ = ("_handle",)

    def __init__(self, handle: SharedHandle) -> None:
        self._handle = handle

    def __enter__(self) -> Any:
        return self._handle.begin_call()

    def __exit__(self, *exc: object) -> None:
        self._handle.end_call()


class _LoadProgress:
    """A load's progress callback and what it raised (the load is cancelled, and the exception raised)."""

    def __init__(self, callback: Callable[[float], object]) -> None:
        self.callback = callback
        self.error: BaseException | None = None
        self.cancelled = False


@ffi.callback("llama_progress_callback")
def _on_load_progress(progress: float, user_data: Any) -> bool:
    load = ffi.from_handle(user_data)
    try:
        load.cancelled = load.callback(float(progress)) is False
    except BaseException as exc:  # noqa: BLE001 - re-raised by load_model once llama.cpp has stopped
        load.error, load.cancelled = exc, True
    return not load.cancelled


def load_model(path: Path, params: Any, quiet: bool = False,
               progress: Callable[[float], object] | None = None) -> SharedHandle:
    """Load a model; a failure's ValueError carries llama.cpp's reason (not printed as well when ``quiet``).
    ``progress(fraction)`` is called as the load goes (llama.cpp's ``progress_callback``, on this thread, from
    0.0 to 1.0); returning False cancels the load (a ValueError), and what it raises cancels it and is raised."""
    ensure_backend()
    load = _LoadProgress(progress) if progress is not None else None
    handle = ffi.new_handle(load) if load is not None else ffi.NULL
    if load is not None:
        params.progress_callback, params.progress_callback_user_data = _on_load_progress, handle
    try:
        with capture_messages(quiet=quiet) as log:
            ptr = lib.llama_model_load_from_file(str(path).encode("utf-8"), params)
    finally:
        if load is not None:  # the params may be read again later (model_params): no dangling handle in them
            params.progress_callback, params.progress_callback_user_data = ffi.NULL, ffi.NULL
    if load is not None and load.error is not None:
        if ptr != ffi.NULL:  # (llama.cpp finished anyway): the caller gets the error, not the model
            lib.llama_model_free(ptr)
        raise load.error
    if ptr == ffi.NULL:
        reason = "the progress callback returned False: the load was cancelled" if load is not None and \
            load.cancelled else log.reason("not a valid GGUF model file, or an unsupported one")
        raise ValueError(f"failed to load model from {str(path)!r}: {reason}")
    return SharedHandle(ptr, lib.llama_model_free, "model")


def new_context(model: NativeHandle, params: Any, quiet: bool = False) -> NativeHandle:
    """Create a context; a failure's ValueError carries llama.cpp's reason."""
    with capture_messages(quiet=quiet) as log:
        ptr = lib.llama_init_from_model(model.ptr, params)
    if ptr == ffi.NULL:
        reason = log.reason("no reason was logged")
        raise ValueError(f"llama.cpp could not create a context for this model with these parameters: {reason}")
    return NativeHandle(ptr, lib.llama_free, "context")


class Batch(NativeHandle):
    """A ``llama_batch`` of ``capacity`` tokens with room for ``n_seq_max`` sequence ids per token."""

    __slots__ = ("batch", "capacity")

    def __init__(self, capacity: int, n_seq_max: int = 1) -> None:
        batch = ffi.new("struct llama_batch *", lib.llama_batch_init(capacity, 0, n_seq_max))
        super().__init__(batch, lambda b: lib.llama_batch_free(b[0]), "batch")
        self.batch = batch[0]
        self.capacity = capacity
